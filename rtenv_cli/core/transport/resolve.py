"""What an address names, decided once for every command: an rtenv agent, a Ray dashboard, a Ray
cluster's GCS, a shared directory, or the embedded local store.

`resolve_address` takes what the user wrote (`--to`, `--address`, RAY_ADDRESS or
RAY_API_SERVER_ADDRESS) and returns a typed `Address`:

- `local`: the embedded store;
- `file:///dir`: a shared filesystem;
- `http(s)://host:port`: an rtenv agent when it answers `/api/agent`, else a Ray dashboard;
- `host:port` without a scheme: like Ray (`ray.init(address=...)`, `ray job submit --address`),
  the cluster's GCS (`head:6379`); when that port answers HTTP/1 instead (a dashboard or an
  rtenv agent given without `http://`), it is taken as that HTTP server;
- `auto`: the cluster `ray start` last started on this machine, read from Ray's address file as
  `ray.init(address="auto")` reads it (ray._common.utils.get_ray_address_file:
  `$RAY_TMPDIR|$TMPDIR|/tmp` + `/ray/ray_current_cluster`).

Each command then says which kinds it serves (`Address.require`).

A token given (`rtenv push --token`) goes to whichever target the address names; without one,
each target reads its own: RTENV_AGENT_TOKEN for an rtenv agent, RAY_AUTH_TOKEN (or its file)
for Ray.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import TransportError, UsageError
from rtenv_cli.core.transport import http
from rtenv_cli.core.transport.http import Timeouts


class AddressKind(str, Enum):
    LOCAL = "local"
    FILE = "file"
    AGENT = "agent"
    DASHBOARD = "dashboard"
    GCS = "gcs"


_EXAMPLES = {
    AddressKind.LOCAL: "local",
    AddressKind.FILE: "file:///shared/dir",
    AddressKind.AGENT: "http://<node>:8790 (an rtenv agent)",
    AddressKind.DASHBOARD: "http://<head>:8265 (the Ray dashboard)",
    AddressKind.GCS: "<head>:6379 (the Ray GCS)",
}
_NAMES = {AddressKind.LOCAL: "the embedded local store", AddressKind.FILE: "a shared directory",
          AddressKind.AGENT: "an rtenv agent", AddressKind.DASHBOARD: "a Ray dashboard",
          AddressKind.GCS: "a Ray GCS"}


@dataclass(frozen=True)
class Address:
    kind: AddressKind
    value: str  # "local", the file:// URL, the http(s) URL, or host:port
    given: str = ""  # what the user wrote, when it differs (e.g. "auto")
    channel: Any = field(default=None, compare=False, repr=False)  # an open GCS connection

    @property
    def is_ray(self) -> bool:
        return self.kind in (AddressKind.DASHBOARD, AddressKind.GCS)

    def describe(self) -> str:
        shown = f"{self.given} ({self.value})" if self.given and self.given != self.value \
            else self.value
        return f"{shown}, {_NAMES[self.kind]}"

    def require(self, *kinds: AddressKind, command: str) -> Address:
        """This address, if `command` serves its kind; else a usage error naming what to give."""
        if self.kind in kinds:
            return self
        self.close()
        examples = [_EXAMPLES[k] for k in kinds]
        wanted = examples[0] if len(examples) == 1 else \
            ", ".join(examples[:-1]) + " or " + examples[-1]
        raise UsageError(f"{command} cannot use {self.describe()}",
                         hint=f"give {wanted}")

    def check_reachable(self) -> Address:
        """This address, unless it is a GCS that did not answer the probe (a driver's ray.init
        would retry it for a minute before saying so)."""
        if self.kind is AddressKind.GCS and self.channel is None:
            raise TransportError(f"cannot reach the Ray GCS at {self.value}",
                                 hint="check --address / RAY_ADDRESS (the head's GCS, default "
                                 "port 6379, or the dashboard URL) and that the cluster is up")
        return self

    def close(self) -> None:
        if self.channel is not None:
            with contextlib.suppress(Exception):
                self.channel.close()


def ray_temp_dir(env: Mapping[str, str]) -> Path:
    """Ray's default temp dir (ray._common.utils.get_default_ray_temp_dir, on Linux)."""
    base = env.get("RAY_TMPDIR") or env.get("TMPDIR") or "/tmp"  # noqa: S108 - Ray's own default
    return Path(base) / "ray"


def _check_record(path: Path, st: os.stat_result) -> None:
    """auto_address's rule for the record `ray start` wrote (`st`)."""
    import stat

    if not hasattr(os, "geteuid"):  # no POSIX owners (Windows)
        return
    if st.st_uid in (os.geteuid(), 0) and stat.S_ISREG(st.st_mode) and not st.st_mode & 0o002:
        return
    from rtenv_cli.core.paths import owner_name

    raise UsageError(f"address auto: {path}, the record of the last `ray start` on this "
                     f"machine, was not written by this user: owned by {owner_name(st.st_uid)}, "
                     f"mode {stat.S_IMODE(st.st_mode):04o} (Ray's temp dir is shared by all "
                     "users, and another user's record may name a listener of theirs)",
                     hint="give the cluster's address: --address <head>:6379 (the GCS) or "
                     "http://<head>:8265 (the dashboard); or set RAY_TMPDIR to this user's own "
                     "Ray temp dir")


def auto_address(env: Mapping[str, str]) -> str:
    """The GCS address `ray.init(address="auto")` connects to: the one `ray start` wrote.

    Ray leaves its temp dir writable by everyone (try_make_directory_shared), so the record is
    believed only when this user or root wrote it and no one else may rewrite it: another
    user's record could point `auto` at a listener of theirs, which would be sent the token
    from Ray's token file and the user's packages."""
    path = ray_temp_dir(env) / "ray_current_cluster"
    try:
        # no link followed, no FIFO waited on (the mode is checked on the open file)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        text = ""
    else:
        with os.fdopen(fd, "rb") as fh:
            _check_record(path, os.fstat(fh.fileno()))
            text = fh.read(4096).decode("utf-8", "replace").strip()
    if not text:
        raise UsageError(f"address auto: no Ray cluster was started on this machine ({path} "
                         "does not exist)",
                         hint="start one with `ray start --head`, or give its address, e.g. "
                         "--address <head>:6379 or http://<head>:8265")
    return text


PROBE_LIMIT = 64 * 1024  # an agent's /api/agent is a few dozen bytes


def probe_timeouts() -> Timeouts:
    """The address probe's bounds: the client's, shortened (a probe is one small GET)."""
    t = http.DEFAULT_TIMEOUTS
    return replace(t, connect=min(t.connect, 5.0), read=min(t.read, 5.0),
                   floor=min(t.floor, 10.0), retries=1)


def _is_agent(url: str) -> bool:
    """Whether `url` answers `GET /api/agent` as an rtenv agent does (JSON, or a token refusal),
    through the one HTTP client: a deadline for the whole exchange and a cap on what it reads.
    One that cannot be reached is left to the target's own calls to report; one that accepts
    and then stalls, trickles or floods is an error here."""
    client = http.HttpClient(url, "server", timeouts=probe_timeouts(),
                             hint="check the address: an rtenv agent (http://<node>:8790) or a "
                             "Ray dashboard (http://<head>:8265)")
    try:
        resp = client.request("GET", "/api/agent", idempotent=False, limit=PROBE_LIMIT,
                              ok=lambda s: s in (200, 401, 403))
    except http.Unreachable:  # refused or reset: the target's own calls say so
        _refuse_grpc_port(url)
        return False
    return resp.status_code in (200, 401, 403) and "json" in resp.headers.get("content-type", "")


def _refuse_grpc_port(url: str) -> None:
    """UsageError when `url` (an http:// address whose port did not answer HTTP) is a gRPC
    port, the Ray GCS's: HTTP to it ends in a "connection reset" that names no mix-up."""
    from urllib.parse import urlsplit

    from rtenv_cli.core.transport.grpc_unary import Channel, GrpcError, NotGrpcError

    parts = urlsplit(url)
    if parts.hostname is None or parts.port is None:
        return
    try:
        Channel(parts.hostname, parts.port, timeout=5, connect_timeout=5).close()
    except (GrpcError, NotGrpcError, OSError):
        return  # not a gRPC server (or not up): the HTTP call's own error says what failed
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    raise UsageError(f"{url} is a gRPC port (the Ray GCS's), which does not speak HTTP",
                     hint=f"give it without http:// (--address {host}:{parts.port}), or give "
                     f"the dashboard URL (http://{host}:8265)")


def _http(url: str, given: str) -> Address:
    kind = AddressKind.AGENT if _is_agent(url) else AddressKind.DASHBOARD
    return Address(kind, url.rstrip("/"), given)


def _host_port(text: str, given: str, env: Mapping[str, str], *, auto: bool,
               token: str | None = None) -> Address:
    """GCS unless the port answers HTTP/1; an unreachable one stays GCS (its calls say so),
    except for `auto`, where it means the cluster `ray start` recorded is gone."""
    from rtenv_cli.core.transport.grpc_unary import Channel, GrpcError, NotGrpcError
    from rtenv_cli.core.transport.ray_dashboard import load_token
    from rtenv_cli.core.transport.ray_gcs import split_host_port

    host, port = split_host_port(text)
    token = token if token is not None else load_token(env, to=text)
    meta = [("authorization", f"Bearer {token}")] if token else []
    try:
        channel = Channel(host, port, metadata=meta)
    except NotGrpcError:
        return _http(f"http://{text}", given)
    except GrpcError as exc:
        if auto:
            raise TransportError(f"address auto: the cluster `ray start` last recorded ({text}) "
                                 f"does not answer: {exc.message}",
                                 hint="no local Ray cluster runs: start one with `ray start "
                                 "--head`, or give the address of a running one") from None
        channel = None
    return Address(AddressKind.GCS, text, given, channel)


def resolve_address(text: str, env: Mapping[str, str] | None = None,
                    token: str | None = None) -> Address:
    """Decide what `text` names (see the module doc); probes the network for http and
    host:port addresses."""
    env = os.environ if env is None else env
    given = text.strip()
    if given == "local":
        return Address(AddressKind.LOCAL, "local")
    if given.startswith("file://"):
        return Address(AddressKind.FILE, given)
    if given.startswith("ray://"):
        raise UsageError(f"{given} is a Ray Client address, which rtenv does not speak",
                         hint="give the head's GCS address (<head>:6379) or the dashboard URL "
                         "(http://<head>:8265)")
    if given == "auto":
        return _host_port(auto_address(env), given, env, auto=True, token=token)
    if given.startswith(("http://", "https://")):
        return _http(given, given)
    if "://" in given:
        raise UsageError(f"unsupported address {given}",
                         hint="use http(s)://host:port, host:port, file:///dir, auto or local")
    if not re.fullmatch(r"\[?[\w.:-]+\]?:\d+", given):
        raise UsageError(f"{given!r} is not an address",
                         hint="use <head>:6379 (the Ray GCS), http://<head>:8265 (the "
                         "dashboard), http://<node>:8790 (an rtenv agent), file:///dir, auto "
                         "or local")
    return _host_port(given, given, env, auto=False, token=token)


def given_address(address: str | None, env: Mapping[str, str]) -> str | None:
    """--address, else RAY_ADDRESS, else RAY_API_SERVER_ADDRESS (empty values count as unset)."""
    return address or env.get("RAY_ADDRESS") or env.get("RAY_API_SERVER_ADDRESS") or None


def gcs_address_of_dashboard(url: str, env: Mapping[str, str] | None = None,
                             wait_s: float = 10.0) -> str:
    """The GCS address of the cluster whose dashboard is `url` (see `dashboard_gcs`)."""
    return dashboard_gcs(url, env, wait_s=wait_s).address


@dataclass(frozen=True)
class DashboardGcs:
    """What a Ray dashboard tells of its cluster's GCS."""

    address: str  # host:port: the GCS port on the dashboard's host (the one this machine reaches)
    advertised: str  # the head raylet's `--gcs-address` (how the cluster's nodes reach it)
    cluster_id: str  # hex, the head raylet's `--cluster-id` (the GCS's GetClusterId)


def dashboard_gcs(url: str, env: Mapping[str, str] | None = None, token: str | None = None,
                  wait_s: float = 10.0) -> DashboardGcs:
    """The GCS of the cluster whose dashboard is `url`, from the head raylet's command line in the
    dashboard's node summary (`GET /nodes?view=summary`: each node's `cmdline`), where Ray's own
    local discovery (services._find_address_from_flag) reads `--gcs-address=`. No documented
    dashboard route names the GCS (`/api/v0/nodes` and `/api/v0/cluster_metadata` do not). The
    port is taken on the dashboard's host; the raylet's own host is the cluster's view of it (a
    pod's IP, say). `token` (else Ray's, read for `url`) goes to the dashboard. A summary
    without command lines yet (a head that just started) is asked again for up to `wait_s`."""
    import time
    from urllib.parse import urlsplit

    from rtenv_cli.core.transport.ray_dashboard import load_token

    if token is None:
        token = load_token(os.environ if env is None else env, to=url)
    client = http.HttpClient(url, "Ray dashboard", timeouts=probe_timeouts())
    if token:
        client.headers["Authorization"] = f"Bearer {token}"
    deadline = time.monotonic() + wait_s
    while True:
        resp = client.request("GET", "/nodes", idempotent=True, params={"view": "summary"},
                              ok=lambda s: s == 200)  # noqa: PLR2004 - HTTP OK
        if resp.status_code in (401, 403):  # a token missing or refused
            said = "requires a token" if resp.status_code == 401 else "refused the token"  # noqa: PLR2004
            raise TransportError(f"the Ray dashboard at {url} {said} (HTTP {resp.status_code})",
                                 hint="set RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) to the "
                                 "cluster's token")
        found = None
        with contextlib.suppress(TransportError, KeyError, TypeError, AttributeError):
            found = _gcs_flags(resp.json()["data"]["summary"])
        if found is not None:
            break
        # a head that just started (no command lines yet, or a 5xx) is asked again
        if time.monotonic() > deadline or (resp.status_code != 200  # noqa: PLR2004
                                           and resp.status_code < 500):  # noqa: PLR2004
            raise UsageError(f"cannot find the Ray GCS address from the dashboard at {url} "
                             f"(HTTP {resp.status_code} to GET /nodes?view=summary)",
                             hint="give the head's GCS address instead, e.g. --address "
                             "<head>:6379 (`ray status` on the head prints it)")
        time.sleep(0.5)
    advertised, cluster_id = found
    port = advertised.rpartition(":")[2]
    host = urlsplit(url).hostname or "127.0.0.1"
    return DashboardGcs(f"[{host}]:{port}" if ":" in host else f"{host}:{port}", advertised,
                        cluster_id)


def _gcs_flags(summary: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(`--gcs-address`, `--cluster-id`) of the first raylet command line naming both, the
    head's first (each node's summary carries its raylet's `cmdline`)."""
    nodes = sorted(summary, key=lambda n: not (n.get("raylet") or {}).get("isHeadNode"))
    for node in nodes:
        flags: dict[str, str] = {}
        for arg in node.get("cmdline") or []:
            for word in str(arg).split(" "):
                name, eq, value = word.partition("=")
                if eq and name in ("--gcs-address", "--cluster-id"):
                    flags.setdefault(name, value)
        address, cluster_id = flags.get("--gcs-address", ""), flags.get("--cluster-id", "")
        if address.rpartition(":")[2].isdigit() and cluster_id:
            return address, cluster_id
    return None


def local_store_target() -> Any:
    from rtenv_cli.core.transport.local_store import LocalStoreTarget

    return LocalStoreTarget()


def target_for(dest: str | Address, env: Mapping[str, str], token: str | None = None) -> Any:
    """The push target an address names."""
    addr = dest if isinstance(dest, Address) else resolve_address(dest, env, token)
    if addr.kind is AddressKind.LOCAL:
        return local_store_target()
    if addr.kind is AddressKind.FILE:
        from rtenv_cli.core.transport.file_target import FileTarget

        return FileTarget(addr.value)
    if addr.kind is AddressKind.AGENT:
        from rtenv_cli.core.transport.agent_http import AgentTarget

        return AgentTarget(addr.value, token)
    if addr.kind is AddressKind.DASHBOARD:
        from rtenv_cli.core.transport.ray_dashboard import RayDashboardTarget

        return RayDashboardTarget(addr.value, token, env=env)
    from rtenv_cli.core.transport.ray_gcs import RayGcsTarget

    return RayGcsTarget(addr.value, env=env, token=token, channel=addr.channel)


def resolve_target(to: str | None, address: str | None, env: Mapping[str, str] | None = None,
                   token: str | None = None) -> Any:
    """Where a push goes: --to, else the address (see given_address), else the local store."""
    env = os.environ if env is None else env
    dest = to or given_address(address, env)
    if not dest:
        return local_store_target()
    return target_for(dest, env, token)
