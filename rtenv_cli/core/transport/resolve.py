"""Which target a push goes to: --to, else --address / RAY_ADDRESS / RAY_API_SERVER_ADDRESS,
else the embedded local store.

A token given (`rtenv push --token`) goes to whichever target that is; without one, each target
reads its own: RTENV_AGENT_TOKEN for an rtenv agent, RAY_AUTH_TOKEN (or its file) for Ray.

`--to` accepts `file:///dir` (shared filesystem), `http(s)://` (an rtenv agent when it answers
`/api/agent`, else a Ray dashboard), `host:port` without a scheme, or `local` (the embedded store).
Like Ray (`ray.init(address=...)`, RAY_ADDRESS, `ray job submit --address`), an address without
a scheme names the cluster's GCS (`head:6379`): packages go there directly over gRPC, as
`ray.init` uploads them (transport.ray_gcs). When that port answers HTTP/1 instead (a dashboard
or an rtenv agent given without `http://`), it is taken as that HTTP server.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from rtenv_cli.core.errors import UsageError


def _is_agent(url: str) -> bool:
    import requests

    try:
        resp = requests.get(f"{url.rstrip('/')}/api/agent", timeout=5)
    except requests.RequestException:
        return False
    return resp.status_code in (200, 401, 403) and "json" in resp.headers.get("content-type", "")


def http_target(url: str, env: Mapping[str, str], token: str | None = None) -> Any:
    if _is_agent(url):
        from rtenv_cli.core.transport.agent_http import AgentTarget

        return AgentTarget(url, token)
    from rtenv_cli.core.transport.ray_dashboard import RayDashboardTarget

    return RayDashboardTarget(url, token, env=env)


def local_store_target() -> Any:
    try:
        from rtenv_cli.core.transport.local_store import LocalStoreTarget
    except ImportError as exc:
        raise UsageError("no push target: the embedded local store is not available",
                         hint="pass --to file:///dir or --address http://<head>:8265") from exc
    return LocalStoreTarget()


def target_for(dest: str, env: Mapping[str, str], token: str | None = None) -> Any:
    if dest == "local":
        return local_store_target()
    if dest.startswith("file://"):
        from rtenv_cli.core.transport.file_target import FileTarget

        return FileTarget(dest)
    if dest.startswith("ray://") or dest == "auto":
        raise UsageError(f"{dest} is not a dashboard address",
                         hint="pass the dashboard URL, e.g. --address http://127.0.0.1:8265")
    if "://" in dest and not dest.startswith(("http://", "https://")):
        raise UsageError(f"unsupported push target {dest}",
                         hint="use http(s)://host:port, file:///dir or local")
    if "://" not in dest:
        from rtenv_cli.core.transport.grpc_unary import NotGrpcError
        from rtenv_cli.core.transport.ray_gcs import RayGcsTarget

        try:
            return RayGcsTarget.connect(dest, env, token)
        except NotGrpcError:
            dest = f"http://{dest}"
    return http_target(dest, env, token)


def resolve_target(to: str | None, address: str | None, env: Mapping[str, str] | None = None,
                   token: str | None = None) -> Any:
    env = os.environ if env is None else env
    dest = to or address or env.get("RAY_ADDRESS") or env.get("RAY_API_SERVER_ADDRESS")
    if not dest:
        return local_store_target()
    return target_for(dest, env, token)
