"""Where watch pushes go, and the Ray package client used until the PUSH feature's lands.

`resolve()` prefers the PUSH feature's `transport.resolve.resolve_target`; while that module is
absent it applies the same rule itself: no address -> the embedded store (LocalStoreTarget), an
address that answers `/api/agent` -> the rtenv agent (AgentTarget, delta protocol), else a Ray
dashboard. `RayPackages` speaks Ray 2.60's `/api/packages/gcs/<name>` protocol (GET pins the URI
for 10 minutes, PUT takes the whole zip, streamed from disk); it is a deliberate minimal stand-in
for `transport.ray_dashboard.RayDashboardTarget`, which is used whenever it is importable.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import PackageTooLargeError, TransportError

RAY_HTTP_LIMIT = 100 * 1024 * 1024  # the dashboard's aiohttp client_max_size


class RayPackages:
    """A Ray dashboard's package store (see module doc)."""

    max_upload_bytes: int | None = RAY_HTTP_LIMIT
    pins = True  # GET pins a URI for RAY_RUNTIME_ENV_TEMPORARY_REFERENCE_EXPIRATION_S (600 s)

    def __init__(self, base_url: str, token: str | None = None) -> None:
        import requests

        if not base_url.startswith(("http://", "https://")):
            base_url = f"http://{base_url}"
        self.url = base_url.rstrip("/")
        self.label = f"Ray cluster {self.url}"
        self.session = requests.Session()
        token = token or os.environ.get("RAY_AUTH_TOKEN")
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    def _call(self, method: str, name: str, **kw: Any) -> Any:
        import requests

        try:
            return self.session.request(method, f"{self.url}/api/packages/gcs/{name}",
                                        timeout=600, **kw)
        except requests.RequestException as exc:
            raise TransportError(f"cannot reach the Ray dashboard at {self.url}: {exc}",
                                 hint="check --address (the dashboard, port 8265)") from exc

    def exists(self, uri: str) -> bool:
        resp = self._call("GET", uri.removeprefix("gcs://"))
        if resp.status_code in (401, 403):
            raise TransportError(f"{self.label} refused the token (HTTP {resp.status_code})",
                                 hint="set RAY_AUTH_TOKEN")
        return bool(resp.status_code == 200)  # noqa: PLR2004 - HTTP OK

    def upload(self, uri: str, path: Path, *,
               on_progress: Callable[[int], None] | None = None) -> None:
        size = Path(path).stat().st_size
        if size > RAY_HTTP_LIMIT:
            raise PackageTooLargeError(
                f"{uri} is {size} bytes; the Ray dashboard refuses bodies over {RAY_HTTP_LIMIT}",
                hint="exclude large files (excludes / .rayignore) or push to an rtenv agent")
        with Path(path).open("rb") as fh:
            resp = self._call("PUT", uri.removeprefix("gcs://"), data=fh,
                              headers={"Content-Length": str(size)})
        if resp.status_code != 200:  # noqa: PLR2004 - HTTP OK
            raise TransportError(f"{self.label} refused {uri}: HTTP {resp.status_code} "
                                 f"{resp.text[:200]}")
        if on_progress is not None:
            on_progress(size)

    def published_uri(self, uri: str) -> str:
        return uri


def _is_agent(url: str, token: str | None) -> bool:
    import requests

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        resp = requests.get(f"{url.rstrip('/')}/api/agent", timeout=5, headers=headers)
    except requests.RequestException:
        return False
    return resp.status_code in (200, 401, 403) and "json" in resp.headers.get("content-type", "")


def resolve(to: str | None, address: str | None, env: Mapping[str, str] | None = None,
            token: str | None = None) -> Any:
    """The push target for `--to` / `--address` (see module doc)."""
    env = dict(os.environ if env is None else env)
    try:
        from rtenv_cli.core.transport.resolve import resolve_target
    except ImportError:
        pass
    else:
        return resolve_target(to, address, env)
    dest = to or address
    if not dest:
        from rtenv_cli.core.transport.local_store import LocalStoreTarget

        return LocalStoreTarget()
    url = dest if dest.startswith(("http://", "https://")) else f"http://{dest}"
    if _is_agent(url, token or env.get("RTENV_AGENT_TOKEN")):
        from rtenv_cli.core.transport.agent_http import AgentTarget

        return AgentTarget(url, token)
    try:
        from rtenv_cli.core.transport.ray_dashboard import RayDashboardTarget
    except ImportError:
        return RayPackages(url, token)
    return RayDashboardTarget(url, token=token)
