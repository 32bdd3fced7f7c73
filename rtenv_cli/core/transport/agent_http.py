"""Talking to an `rtenv agent` over HTTP: `AgentTarget` (push) and `AgentClient` (envs, cache).

The agent speaks Ray's package protocol, so the package calls are Ray's (`GET` to check, `PUT`
to upload); the delta calls and environment calls are the agent's own (`agent_protocol`).
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rtenv_cli.core.errors import PackagingError, TransportError, UsageError
from rtenv_cli.core.store.handle import EnvHandle
from rtenv_cli.core.transport.agent_protocol import (
    REPLIES,
    TOKEN_ENV,
    check,
    decode_error,
    download_capability,
    is_error_body,
)
from rtenv_cli.core.transport.base import ZipLayout
from rtenv_cli.core.transport.http import HttpClient, Reply, Timeouts

# Seconds the agent may work before it answers: building an environment (pip, uv, conda), and
# assembling a package from blobs or collecting garbage.
BUILD_WAIT = 900.0
WORK_WAIT = 300.0


class _Http:
    def __init__(self, url: str, token: str | None = None,
                 timeouts: Timeouts | None = None) -> None:
        self.client = HttpClient(url, "rtenv agent", timeouts=timeouts,
                                 hint="check the agent (`rtenv agent`) and its URL, or leave "
                                 "out the agent URL to use the embedded store")
        self.url = self.client.url
        self.token = token if token is not None else os.environ.get(TOKEN_ENV)
        self.bearer = None
        if self.token:  # given: it goes where it is told
            self.client.headers["Authorization"] = f"Bearer {self.token}"
        else:  # this user's loopback agent: its token file, only to a socket this user owns
            from rtenv_cli.core.transport.agent_token import file_bearer

            self.bearer = file_bearer(self.url)
            self.token = self.bearer.token if self.bearer else None
            self.client.per_request = self.bearer

    def call(self, method: str, path: str, *, ok: tuple[int, ...] = (200,),
             idempotent: bool = False, **kw: Any) -> Reply:
        resp = self.client.request(method, path, idempotent=idempotent,
                                   ok=lambda s: s in ok, **kw)
        if resp.status_code in ok:
            return resp
        try:
            body = json.loads(resp.content)
        except ValueError:
            body = None
        if resp.status_code in (401, 403) and "token" in resp.text[:500]:
            if withheld := self.bearer.withheld if self.bearer else None:
                raise TransportError(f"the rtenv agent at {self.url} requires a token (HTTP "
                                     f"{resp.status_code}); this user's token file was not sent: "
                                     f"{withheld}",
                                     hint=f"pass --token or set {TOKEN_ENV}")
            raise TransportError(f"the rtenv agent at {self.url} refused the token "
                                 f"(HTTP {resp.status_code})",
                                 hint=f"pass --token or set {TOKEN_ENV} (this user's own "
                                 "loopback agent needs neither: its token file is read)")
        if not is_error_body(body):
            raise self._not_an_agent(resp, f"HTTP {resp.status_code}")
        raise decode_error(body, resp.text[:500] or f"HTTP {resp.status_code}")

    def json(self, method: str, path: str, reply: str, **kw: Any) -> Any:
        """`call`'s JSON body, checked against the protocol's `reply` schema (REPLIES) before
        anything reads it."""
        return self.checked(self.call(method, path, **kw), reply)

    def checked(self, resp: Reply, reply: str) -> Any:
        """`resp`'s JSON body, checked against the protocol's `reply` schema."""
        body = resp.json()
        try:
            check(body, REPLIES[reply])
        except UsageError as exc:
            raise self._not_an_agent(resp, exc.message) from None
        return body

    def _not_an_agent(self, resp: Reply, what: str) -> TransportError:
        return TransportError(f"{self.url} does not answer as an rtenv agent ({resp.call}: "
                              f"{what}; it sent {resp.text[:200] or 'an empty body'!r})",
                              hint="check the URL and its port: another server listens "
                              "there; an rtenv agent (`rtenv agent`, port 8790 by default) "
                              "answers GET /api/agent with {\"agent\": \"rtenv\", ...}")


class AgentTarget:
    """A push target: an rtenv agent's package store."""

    max_upload_bytes: int | None = None
    pins = False
    layout: ZipLayout = "ray"
    verifies_packages = True  # upload takes `hashed_dirs` (packaging's BuiltPackage.hashed_dirs)

    def __init__(self, url: str, token: str | None = None, *,
                 timeouts: Timeouts | None = None) -> None:
        self.http = _Http(url, token, timeouts)
        self.label = f"rtenv agent {self.http.url}"
        self._one_request = True  # until the agent says it has no /api/publish

    @staticmethod
    def _name(uri: str) -> str:
        if not uri.startswith("gcs://"):
            raise TransportError(f"the rtenv agent takes gcs:// package URIs, not {uri!r}")
        return quote(uri.removeprefix("gcs://"), safe="")

    def exists(self, uri: str) -> bool:
        resp = self.http.call("GET", f"/api/packages/gcs/{self._name(uri)}", ok=(200, 404),
                              idempotent=True)
        return bool(resp.status_code == 200)  # noqa: PLR2004 - HTTP OK

    def upload(self, uri: str, path: Path, *, on_progress: Callable[[int], None] | None = None,
               hashed_dirs: Sequence[str] = ()) -> None:
        """Ray's PUT, plus the names Ray hashed that the zip cannot show (the agent verifies
        the package against its name and needs them)."""
        size = Path(path).stat().st_size
        headers: dict[str, str] = {}
        if hashed_dirs:
            from rtenv_cli.core.store.delta import hashed_dirs_header

            headers.update(hashed_dirs_header(hashed_dirs))
        # A package is named by its content: sending it again is harmless.
        self.http.call("PUT", f"/api/packages/gcs/{self._name(uri)}", body_path=Path(path),
                       headers=headers, idempotent=True)
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
        reply = self.http.json("POST", "/api/manifests", "Missing", json=dict(manifest))
        return list(reply["missing"])

    def put_blob(self, sha256: str, path: Path) -> None:
        self.http.call("PUT", f"/api/blobs/{sha256}", body_path=Path(path), idempotent=True)

    def put_blobs(self, blobs: list[tuple[str, Path]]) -> None:
        """Many blobs in one streamed request (records `<sha256> <size>\\n<bytes>`)."""
        if blobs:
            size = sum(Path(p).stat().st_size for _s, p in blobs)
            self.http.call("POST", "/api/blobs", data=_records(blobs), size=size)

    def commit_manifest(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        return dict(self.http.json("POST", "/api/manifests/commit", "Committed",
                                   json=dict(manifest), wait=WORK_WAIT))

    def publish(self, manifest: Mapping[str, Any], blobs: list[tuple[str, Path]]
                ) -> dict[str, Any]:
        """`put_blobs` then `commit_manifest` in one request (`POST /api/publish`: a save
        costs one round trip); the two calls to an agent older than that route."""
        if self._one_request:
            text = json.dumps(dict(manifest)).encode()
            size = sum(Path(p).stat().st_size for _s, p in blobs)
            resp = self.http.call("POST", "/api/publish", ok=(200, 404, 405),
                                  data=itertools.chain([b"%d\n" % len(text), text],
                                                       _records(blobs)),
                                  size=size + len(text), wait=WORK_WAIT)
            if resp.status_code == 200:  # noqa: PLR2004 - HTTP OK
                return dict(self.http.checked(resp, "Committed"))
            if is_error_body(_json_or_none(resp.content)):
                raise decode_error(resp.json(), resp.text[:500])
            self._one_request = False  # the route is unknown there
        self.put_blobs(blobs)
        return self.commit_manifest(manifest)


def _records(blobs: list[tuple[str, Path]]) -> Iterator[bytes]:
    """Blob records `<sha256> <size>\\n<bytes>`, read from the files as they are sent."""
    for sha, path in blobs:
        with Path(path).open("rb") as fh:
            left = os.fstat(fh.fileno()).st_size
            yield f"{sha} {left}\n".encode()
            while left > 0:  # exactly the declared size, or the record is not sent
                chunk = fh.read(min(1 << 20, left))
                if not chunk:
                    raise PackagingError(f"{path} shrank while it was sent", hint="push again")
                left -= len(chunk)
                yield chunk


def _json_or_none(content: bytes) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return None


class AgentClient:
    """Environments and cache control on an rtenv agent (same calls as the embedded store)."""

    def __init__(self, url: str, token: str | None = None, *,
                 timeouts: Timeouts | None = None) -> None:
        self.http = _Http(url, token, timeouts)

    def info(self) -> dict[str, Any]:
        return dict(self.http.json("GET", "/api/agent", "AgentInfo", idempotent=True))

    def get_or_create(self, runtime_env: Mapping[str, Any], *, holder: str,
                      pid: int | None = None, lease_s: float | None = None,
                      base_dir: Path | None = None) -> Any:
        del base_dir  # requirement files are resolved by the caller's validation
        body = {"runtime_env": dict(runtime_env), "holder": holder, "pid": pid,
                "lease_s": lease_s}
        return EnvHandle.from_dict(self.http.json("POST", "/api/envs", "EnvHandle", json=body,
                                                  wait=BUILD_WAIT))

    def release(self, env_key: str, holder: str) -> int:
        path = f"/api/envs/{quote(env_key, safe='')}/refs/{quote(holder, safe='')}"
        return int(self.http.json("DELETE", path, "Released")["released"])

    def cache(self, kinds: tuple[str, ...] = ()) -> dict[str, Any]:
        return dict(self.http.json("GET", "/api/cache", "CacheListing", idempotent=True,
                                   params=[("kind", k) for k in kinds]))

    def gc(self, **params: Any) -> dict[str, Any]:
        return dict(self.http.json("POST", "/api/gc", "GcResult", json=params,
                                   wait=WORK_WAIT))
