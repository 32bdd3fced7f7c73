"""Checks of what an address names: a Ray cluster (reachable, auth, every node), an rtenv agent
or a shared directory. The address is decided by the one resolver (transport/resolve)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rtenv_cli.core.doctor.local import LOW_DISK_BYTES, RAY_PIN, installed_ray, ray_series
from rtenv_cli.core.doctor.model import Check, fail, ok, warn
from rtenv_cli.core.doctor.plugin import plugin_status
from rtenv_cli.core.errors import RtenvError
from rtenv_cli.core.transport.http import HttpClient, Timeouts
from rtenv_cli.core.transport.resolve import Address, AddressKind, resolve_address
from rtenv_cli.core.units import human_bytes

RAY_AUTH_FIX = ("export RAY_AUTH_TOKEN=<the cluster's token> (or RAY_AUTH_TOKEN_PATH=<file>, or "
             "write it to ~/.ray/auth_token)")
_QUICK = Timeouts(connect=5.0, read=15.0, floor=20.0, retries=1)  # a check, not a transfer


def check_address(text: str, env: Mapping[str, str] | None = None,
                  scan: Callable[[str], Any] | None = None) -> list[Check]:
    """The checks for ADDRESS (what --address or RAY_ADDRESS gave). SCAN lists the Ray nodes
    (default: cache.ray_nodes.list_ray_nodes; the CLI wraps it in a spinner)."""
    env = os.environ if env is None else env
    try:
        where = resolve_address(text, env)
    except RtenvError as exc:
        return [fail("cluster", f"{text}: {exc.message}", exc.hint)]
    try:
        if where.kind is AddressKind.LOCAL:
            return [ok("address", "local: the embedded store (checked above)")]
        if where.kind is AddressKind.FILE:
            return [_check_directory(where)]
        if where.kind is AddressKind.AGENT:
            return _check_agent(where, env)
        return _check_ray(where, env, scan)
    finally:
        where.close()


def _check_directory(where: Address) -> Check:
    from urllib.parse import unquote, urlsplit

    path = Path(unquote(urlsplit(where.value).path))
    if not path.is_dir():
        return fail("shared directory", f"{path} does not exist: `rtenv push --to "
                    f"{where.value}` has nowhere to write", f"mkdir -p {path} (on the shared "
                    "filesystem every node mounts)")
    if not os.access(path, os.W_OK):
        return fail("shared directory", f"{path} is not writable by this user",
                    f"give this user write access to {path}")
    return ok("shared directory", f"{path} exists and is writable")


def _check_agent(where: Address, env: Mapping[str, str]) -> list[Check]:
    from rtenv_cli.core.transport.agent_http import AgentClient
    from rtenv_cli.core.transport.agent_protocol import TOKEN_ENV
    client = HttpClient(where.value, "rtenv agent", timeouts=_QUICK)
    try:
        reply = client.request("GET", "/api/agent", idempotent=True, ok=lambda _s: True)
    except RtenvError as exc:
        return [fail("agent", exc.message, "start it (`rtenv agent`) or check the URL")]
    token = env.get(TOKEN_ENV)
    checks = []
    if reply.status_code in (401, 403):
        if not token:
            return [ok("agent", f"rtenv agent at {where.value}"),
                    fail("auth", "the agent requires a token and none was found",
                         f"export {TOKEN_ENV}=<the agent's token>")]
        checks.append(ok("auth", f"token mode; a token was found in {TOKEN_ENV}"))
    else:
        checks.append(ok("auth", "no token required (a loopback agent without --token)"))
    agent = AgentClient(where.value, token)
    try:
        info = agent.info()
        listing = agent.cache()
    except RtenvError as exc:
        return [*checks, fail("agent", exc.message, exc.hint)]
    totals = listing.get("totals") or {}
    checks.insert(0, ok("agent", f"rtenv agent {info.get('version')} at {where.value}, store "
                        f"{info.get('root')}: {human_bytes(totals.get('size_bytes'))} in "
                        f"{totals.get('count')} entries"))
    return checks


def _ray_version_of_dashboard(where: Address, token: str | None) -> tuple[int, str | None]:
    client = HttpClient(where.value, "Ray dashboard", timeouts=_QUICK)
    if token:
        client.headers["Authorization"] = f"Bearer {token}"
    reply = client.request("GET", "/api/version", idempotent=True, ok=lambda _s: True)
    if reply.status_code != 200:  # noqa: PLR2004 - HTTP OK
        return reply.status_code, None
    try:
        return 200, str(reply.json().get("ray_version"))
    except (RtenvError, AttributeError):
        return 200, None


def _auth_mode_of_dashboard(where: Address) -> str | None:
    client = HttpClient(where.value, "Ray dashboard", timeouts=_QUICK)
    reply = client.request("GET", "/api/authentication_mode", idempotent=True,
                           ok=lambda _s: True)
    try:
        return str(reply.json().get("authentication_mode"))
    except (RtenvError, AttributeError):
        return None


def _check_ray(where: Address, env: Mapping[str, str],
               scan: Callable[[str], Any] | None) -> list[Check]:
    from rtenv_cli.core.transport.ray_dashboard import load_token

    try:
        token = load_token(env, to=where.value)
    except RtenvError as exc:  # another user holds the port: the file's token stays home
        return [fail("auth", exc.message, exc.hint)]
    found = "a token was found" if token else "no token was found"
    checks: list[Check] = []
    if where.kind is AddressKind.GCS:
        from rtenv_cli.core.transport.grpc_unary import GrpcError
        from rtenv_cli.core.transport.ray_gcs import probe_auth

        if where.channel is None:
            return [fail("cluster", f"cannot reach the Ray GCS at {where.value}",
                         "check --address / RAY_ADDRESS (the head's GCS, default port 6379, or "
                         "the dashboard URL) and that the cluster is up (`ray status`)")]
        checks.append(ok("cluster", f"{where.describe()}: reachable"))
        try:
            needs, accepted = probe_auth(where.value, token)
        except (GrpcError, RtenvError) as exc:
            return [*checks, fail("auth", f"the GCS did not answer a read: {exc}", None)]
        mode = "token" if needs else "disabled"
    else:
        try:
            mode = _auth_mode_of_dashboard(where) or "unknown"
            status, version = _ray_version_of_dashboard(where, token)
        except RtenvError as exc:
            return [fail("cluster", exc.message, "check --address / RAY_ADDRESS and that the "
                         "cluster is up (`ray status`)")]
        needs = mode == "token"
        accepted = None if not (needs and token) else status == 200  # noqa: PLR2004 - HTTP OK
        shown = f", Ray {version}" if version else ""
        checks.append(ok("cluster", f"{where.describe()}: reachable{shown}"))
    checks.append(_auth_check(mode, needs, accepted, found))
    if needs and not accepted:
        return checks  # every further call would be refused
    return [*checks, *_check_nodes(where, scan)]


def _auth_check(mode: str, needs: bool, accepted: bool | None, found: str) -> Check:
    if not needs:
        return ok("auth", f"auth mode {mode}; {found} (none needed)")
    if accepted is None:
        return fail("auth", f"auth mode token; {found}: every call is refused", RAY_AUTH_FIX)
    if not accepted:
        return fail("auth", f"auth mode token; {found}, but the cluster refuses it",
                    "set RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) to the cluster's current token")
    return ok("auth", f"auth mode token; {found} and accepted")


def _check_nodes(where: Address, scan: Callable[[str], Any] | None) -> list[Check]:
    if installed_ray() is None:
        return [warn("nodes", "per-node checks skipped: they run a Ray task on every node, "
                     "which needs the `ray` package here", RAY_PIN)]
    if scan is None:
        from rtenv_cli.core.cache.ray_nodes import list_ray_nodes

        scan = list_ray_nodes
    try:
        listing = scan(where.value)
    except RtenvError as exc:
        return [fail("nodes", f"the node scan failed: {exc.message}", exc.hint)]
    checks = [ok("nodes", f"{len(listing.nodes)} alive node(s) answered")]
    for node in listing.nodes:
        checks += node_checks(node, where)
    return checks


def node_checks(node: Mapping[str, Any], where: Address | None = None) -> list[Check]:
    """Ray and Python versions, rtenv's plugin, caches and free disk of one scanned node."""
    from rtenv_cli.core.spec.model import RAY_VERSION

    label = f"node {str(node.get('node_id', '?'))[:8]}"
    if node.get("error"):
        return [fail(label, f"{node.get('node_ip')}: the scan failed: {node['error']}",
                     "check the node (`ray status`; its raylet and runtime-env agent logs)")]
    facts = node.get("facts") or {}
    version, python = facts.get("ray_version"), facts.get("python")
    local_ray = installed_ray()
    detail = f"{node.get('node_ip')}: Ray {version}, Python {python}"
    problems = []
    if version and ray_series(version) != ray_series(RAY_VERSION):
        problems.append(f"rtenv reproduces Ray {RAY_VERSION}")
    if version and local_ray and version != local_ray:
        problems.append(f"this machine has Ray {local_ray}: `ray.init` from here fails on a "
                        "version mismatch")
    import platform

    here = ".".join(platform.python_version().split(".")[:2])
    if python and ".".join(str(python).split(".")[:2]) != here:
        problems.append(f"this machine has Python {here}: `ray.init` from here fails on a "
                        "version mismatch (`ray job submit` works)")
    checks = [warn(f"{label} ray", f"{detail}; " + "; ".join(problems),
                   "use the same Ray and Python versions on the nodes and the driver")
              if problems else ok(f"{label} ray", detail)]
    checks.append(plugin_status(node, f"{label} plugin"))
    checks.append(_caches(node, label, where))
    return checks


def _caches(node: Mapping[str, Any], label: str, where: Address | None) -> Check:
    live = old = 0
    for session in node.get("sessions") or []:
        if not session.get("counted", True):
            continue
        if session.get("live"):
            live += int(session.get("size_bytes") or 0)
        else:
            old += int(session.get("size_bytes") or 0)
    disk = (node.get("facts") or {}).get("disk") or {}
    free, total = disk.get("free_bytes"), disk.get("total_bytes")
    detail = (f"caches: live session {human_bytes(live)}, old sessions {human_bytes(old)}; "
              f"{human_bytes(free)} free of {human_bytes(total)} at {disk.get('path')}")
    addr = (where.given or where.value) if where is not None else "<address>"
    if free is not None and total and (free < LOW_DISK_BYTES or free < total * 0.05):
        fix = (f"rtenv cache gc --address {addr} (old sessions' caches)" if old else
               "free space on the node, or bound Ray's caches with "
               "RAY_RUNTIME_ENV_<PLUGIN>_CACHE_SIZE_GB on `ray start`")
        return warn(f"{label} caches", f"{detail}: low on disk", fix)
    return ok(f"{label} caches", detail)
