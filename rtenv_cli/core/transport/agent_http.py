"""Talking to an `rtenv agent` over HTTP: `AgentTarget` (push) and `AgentClient` (envs, cache).

The agent speaks Ray's package protocol, so the package calls are Ray's (`GET` to check, `PUT`
to upload); the delta calls and environment calls are the agent's own (`core.agent.protocol`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rtenv_cli.core.agent.protocol import TOKEN_ENV, EnvHandle, decode_error, download_capability
from rtenv_cli.core.errors import PackagingError, TransportError


class _Http:
    def __init__(self, url: str, token: str | None = None, timeout: float = 900) -> None:
        if not url.startswith(("http://", "https://")):
            url = f"http://{url}"
        self.url = url.rstrip("/")
        self.token = token if token is not None else os.environ.get(TOKEN_ENV)
        self.timeout = timeout
        self._session: Any = None

    def session(self) -> Any:
        if self._session is None:
            import requests

            self._session = requests.Session()
            if self.token:
                self._session.headers["Authorization"] = f"Bearer {self.token}"
        return self._session

    def call(self, method: str, path: str, *, ok: tuple[int, ...] = (200,), **kw: Any) -> Any:
        import requests

        try:
            resp = self.session().request(method, self.url + path, timeout=self.timeout, **kw)
        except requests.RequestException as exc:
            text = str(exc)
            reason = ("connection refused" if "refused" in text else
                      "timed out" if isinstance(exc, requests.Timeout) else type(exc).__name__)
            raise TransportError(f"cannot reach the rtenv agent at {self.url} ({reason})",
                                 hint="start it with `rtenv agent`, or leave out the agent URL "
                                 "to use the embedded store") from exc
        if resp.status_code in ok:
            return resp
        if resp.status_code in (401, 403):
            raise TransportError(f"the rtenv agent at {self.url} refused the token "
                                 f"(HTTP {resp.status_code})",
                                 hint=f"pass --token or set {TOKEN_ENV}")
        try:
            body = resp.json()
        except ValueError:
            body = None
        raise decode_error(body, resp.text[:500] or f"HTTP {resp.status_code}")


class AgentTarget:
    """A push target: an rtenv agent's package store."""

    max_upload_bytes: int | None = None
    pins = False
    streams_while_written = False
    verifies_packages = True  # upload takes `hashed_dirs` (packaging's BuiltPackage.hashed_dirs)

    def __init__(self, url: str, token: str | None = None) -> None:
        self.http = _Http(url, token)
        self.label = f"rtenv agent {self.http.url}"

    @staticmethod
    def _name(uri: str) -> str:
        if not uri.startswith("gcs://"):
            raise TransportError(f"the rtenv agent takes gcs:// package URIs, not {uri!r}")
        return quote(uri.removeprefix("gcs://"), safe="")

    def exists(self, uri: str) -> bool:
        resp = self.http.call("GET", f"/api/packages/gcs/{self._name(uri)}", ok=(200, 404))
        return bool(resp.status_code == 200)  # noqa: PLR2004 - HTTP OK

    def upload(self, uri: str, path: Path, *, on_progress: Callable[[int], None] | None = None,
               hashed_dirs: Sequence[str] = ()) -> None:
        """Ray's PUT, plus the names Ray hashed that the zip cannot show (the agent verifies
        the package against its name and needs them)."""
        size = Path(path).stat().st_size
        headers = {"Content-Length": str(size)}
        if hashed_dirs:
            from rtenv_cli.core.agent.delta import hashed_dirs_header

            headers.update(hashed_dirs_header(hashed_dirs))
        with Path(path).open("rb") as fh:
            self.http.call("PUT", f"/api/packages/gcs/{self._name(uri)}", data=fh,
                           headers=headers)
        if on_progress is not None:
            on_progress(size)

    def published_uri(self, uri: str) -> str:
        return uri

    def remote_uri(self, uri: str) -> str:
        """Where Ray's own nodes fetch the package (`--stage-to` an agent): a capability URL
        ending in the package name, which Ray's http(s) remote-URI support downloads."""
        name = uri.removeprefix("gcs://")
        return f"{self.http.url}/download/{download_capability(self.http.token, name)}/{name}"

    def missing_blobs(self, manifest: Mapping[str, Any]) -> list[str]:
        return list(self.http.call("POST", "/api/manifests", json=dict(manifest))
                    .json()["missing"])

    def put_blob(self, sha256: str, path: Path) -> None:
        with Path(path).open("rb") as fh:
            self.http.call("PUT", f"/api/blobs/{sha256}", data=fh)

    def put_blobs(self, blobs: list[tuple[str, Path]]) -> None:
        """Many blobs in one streamed request (records `<sha256> <size>\\n<bytes>`)."""
        def body() -> Any:
            for sha, path in blobs:
                with Path(path).open("rb") as fh:
                    left = os.fstat(fh.fileno()).st_size
                    yield f"{sha} {left}\n".encode()
                    while left > 0:  # exactly the declared size, or the record is not sent
                        chunk = fh.read(min(1 << 20, left))
                        if not chunk:
                            raise PackagingError(f"{path} shrank while it was sent",
                                                 hint="push again")
                        left -= len(chunk)
                        yield chunk

        if blobs:
            self.http.call("POST", "/api/blobs", data=body())

    def commit_manifest(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        return dict(self.http.call("POST", "/api/manifests/commit", json=dict(manifest)).json())


class AgentClient:
    """Environments and cache control on an rtenv agent (same calls as the embedded store)."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.http = _Http(url, token)

    def info(self) -> dict[str, Any]:
        return dict(self.http.call("GET", "/api/agent").json())

    def get_or_create(self, runtime_env: Mapping[str, Any], *, holder: str,
                      pid: int | None = None, lease_s: float | None = None,
                      base_dir: Path | None = None) -> Any:
        del base_dir  # requirement files are resolved by the caller's validation
        body = {"runtime_env": dict(runtime_env), "holder": holder, "pid": pid,
                "lease_s": lease_s}
        return EnvHandle.from_dict(self.http.call("POST", "/api/envs", json=body).json())

    def release(self, env_key: str, holder: str) -> int:
        path = f"/api/envs/{quote(env_key, safe='')}/refs/{quote(holder, safe='')}"
        return int(self.http.call("DELETE", path).json()["released"])

    def cache(self, kinds: tuple[str, ...] = ()) -> dict[str, Any]:
        return dict(self.http.call("GET", "/api/cache", params=[("kind", k) for k in kinds])
                    .json())

    def gc(self, **params: Any) -> dict[str, Any]:
        return dict(self.http.call("POST", "/api/gc", json=params).json())
