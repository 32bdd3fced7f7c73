"""`rtenv cache ls|gc|purge --address <ray>`: Ray nodes' runtime-env caches.

Each alive node is measured by a Ray task pinned to it (`ray_scan.py`, sent as source to a job on
the cluster, or run as a driver for a GCS address). It lists every `session_*` dir's
`runtime_resources` and joins the live session's entries with what the node's runtime-env agent
reports (reference counts). Only OLD sessions' caches are ever deleted: Ray 2.60's agent trusts its
in-memory URI cache and would hand out a deleted directory of the live session; the live session
is bounded by the `RAY_RUNTIME_ENV_<PLUGIN>_CACHE_SIZE_GB` settings, which are reported instead.

Where rtenv's runtime_env plugin runs, each node's rtenv store (`$RTENV_HOME/store` of its raylet)
is reported beside Ray's caches (`rtenv`, see ray_store.py) and `gc`/`purge` collect it with the
store's own gc: unreferenced entries only, under each entry's lock; the plugin's reference on an
environment lasts until Ray releases the URI (`delete_uri`), so one a live worker uses stays.

Nodes may share a temp dir (several raylets on one machine, a shared filesystem): each session
folder is reported by every node that sees it (`nodes`) and counted once (`counted`, on its first
report), by the folder's identity. A node that fails is one line in `errors`; the others report.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtenv_cli.core.errors import OperationError, TransportError

if TYPE_CHECKING:
    from rtenv_cli.core.cache.gc import GcResult
    from rtenv_cli.core.cache.ls import CacheListing

MARKER = "RTENV_SCAN "
ERROR_MARKER = "RTENV_SCAN_ERROR "
DEFAULT_CACHE_GB = 10
LIVE_SESSION_NOTE = (
    "the live session's caches are left to Ray: its agent trusts an in-memory cache and would "
    "hand out a deleted directory; bound them with RAY_RUNTIME_ENV_<PLUGIN>_CACHE_SIZE_GB "
    f"(default {DEFAULT_CACHE_GB} GB per plugin) on `ray start`")


@dataclass(frozen=True)
class RayNodesListing:
    address: str
    nodes: tuple[dict[str, Any], ...]
    reported: int | None = None  # runtime envs the state API reports cluster-wide
    # the nodes' references to trees in the cluster's KV (trees/gc.py tree_refs); None: not
    # read (they are read through a GCS address)
    tree_refs: tuple[dict[str, Any], ...] | None = None
    only: str | None = None  # one part shown (ray | rtenv: `cache ls --only`), else both

    @property
    def errors(self) -> tuple[str, ...]:
        return node_errors(self.nodes)

    def rtenv_stores(self) -> tuple[tuple[dict[str, Any], CacheListing], ...]:
        """(node, its rtenv store's listing) for each node with rtenv installed."""
        from rtenv_cli.core.cache.ls import CacheListing

        return tuple((n, CacheListing.from_dict(n["rtenv"])) for n in self.nodes
                     if _has_store(n))

    def to_dict(self) -> dict[str, Any]:
        return {"address": self.address, "nodes": list(self.nodes), "reported": self.reported,
                "totals": _totals(self.nodes), "errors": list(self.errors),
                "tree_refs": None if self.tree_refs is None else list(self.tree_refs),
                "only": self.only, "note": LIVE_SESSION_NOTE}


@dataclass(frozen=True)
class RayCleanPlan:
    address: str
    nodes: tuple[dict[str, Any], ...]
    dry_run: bool
    removable: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    removed: tuple[str, ...] = field(default_factory=tuple)

    @property
    def freed_bytes(self) -> int:
        return sum(r["size_bytes"] for r in self.removable)

    @property
    def errors(self) -> tuple[str, ...]:
        return node_errors(self.nodes)

    def rtenv_gc(self) -> tuple[tuple[dict[str, Any], GcResult], ...]:
        """(node, what its rtenv store's gc would remove or removed) per node with a store."""
        from rtenv_cli.core.cache.gc import GcResult

        return tuple((n, GcResult.from_dict(n["rtenv"]["gc"])) for n in self.nodes
                     if _has_store(n) and n["rtenv"].get("gc"))

    @property
    def rtenv_removable(self) -> int:
        return sum(len(r.plan.remove) for _, r in self.rtenv_gc())

    def settings(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for node in self.nodes:
            for key, value in (node.get("settings") or {}).items():
                out.setdefault(key, value if value else f"{DEFAULT_CACHE_GB} (default)")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"address": self.address, "dry_run": self.dry_run,
                "removable": list(self.removable), "removed": list(self.removed),
                "freed_bytes": self.freed_bytes, "settings": self.settings(),
                "rtenv": [{"node_id": n["node_id"], "node_ip": n["node_ip"],
                           "root": n["rtenv"]["root"], **r.to_dict()}
                          for n, r in self.rtenv_gc()],
                "errors": list(self.errors), "note": LIVE_SESSION_NOTE}


def node_errors(nodes: tuple[dict[str, Any], ...]) -> tuple[str, ...]:
    """One line per failure: a node that could not scan, or a folder it could not delete."""
    out = []
    for n in nodes:
        where = f"node {n['node_id'][:12]} ({n['node_ip']})"
        if n.get("error"):
            out.append(f"{where}: {n['error']}")
        out += [f"{where}: {e}" for e in n.get("errors") or []]
        if (n.get("rtenv") or {}).get("error"):
            out.append(f"{where}: rtenv store: {n['rtenv']['error']}")
    return tuple(out)


def _has_store(node: dict[str, Any]) -> bool:
    store = node.get("rtenv") or {}
    return bool(store) and not store.get("error") and not store.get("missing")


def mark_shared(nodes: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
    """Give each session the nodes it lives on, and count a shared folder once (its first
    report)."""
    holders: dict[str, list[str]] = {}
    for n in nodes:
        for s in n["sessions"]:
            holders.setdefault(s.get("key") or f"{n['node_id']}:{s['path']}", []).append(
                n["node_id"])
    seen: set[str] = set()
    for n in nodes:
        for s in n["sessions"]:
            key = s.get("key") or f"{n['node_id']}:{s['path']}"
            s["nodes"] = holders[key]
            s["counted"] = key not in seen
            seen.add(key)
    return nodes


def _totals(nodes: tuple[dict[str, Any], ...]) -> dict[str, int]:
    live = old = 0
    for node in nodes:
        for s in node["sessions"]:
            if not s.get("counted", True):
                continue
            if s["live"]:
                live += s["size_bytes"]
            else:
                old += s["size_bytes"]
    return {"live_bytes": live, "old_sessions_bytes": old, "reclaimable_bytes": old}


def _script() -> str:
    return Path(__file__).with_name("ray_scan.py").read_text(encoding="utf-8")


def _auth_headers() -> dict[str, str]:
    token = os.environ.get("RAY_AUTH_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token else {}


def _via_job(address: str, args: list[str], timeout: float, script: str | None = None) -> str:
    try:
        from ray.job_submission import JobStatus, JobSubmissionClient
    except ImportError as exc:
        from rtenv_cli.core.transport.ray_driver import missing_ray_error

        raise missing_ray_error(address, "scanning the nodes") from exc
    try:
        client = JobSubmissionClient(address, headers=_auth_headers() or None)
    except Exception as exc:
        raise TransportError(f"cannot reach the Ray dashboard at {address}: {exc}",
                             hint="check --address (http://<head>:8265)") from exc
    # the job's shell is started by Ray's job supervisor, a Ray worker: the interpreter whose
    # site-packages hold the `_raylet.so` it mapped has `ray`, whatever `python` on PATH is
    find_python = (
        "PY=; R=$(grep -m1 -o '/[^ ]*/site-packages/ray/_raylet.so' /proc/$PPID/maps "
        "2>/dev/null); if [ -n \"$R\" ]; then V=${R%/lib/*}; "
        "[ -x \"$V/bin/python\" ] && PY=\"$V/bin/python\"; fi; [ -z \"$PY\" ] && PY=python3; ")
    entry = (find_python + '"$PY" -c ' + shlex.quote(script or _script()) + " "
             + " ".join(map(shlex.quote, args)))
    job_id = client.submit_job(entrypoint=entry, metadata={"rtenv": "cache-scan"})
    deadline = time.monotonic() + timeout
    while True:
        status = client.get_job_status(job_id)
        if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            break
        if time.monotonic() > deadline:
            client.stop_job(job_id)
            raise OperationError(f"the node scan job {job_id} did not finish in {timeout:g}s")
        time.sleep(0.3)
    logs = str(client.get_job_logs(job_id))
    if status != JobStatus.SUCCEEDED:
        raise OperationError(f"the node scan job {job_id} failed: {_failure(logs)}",
                             hint=f"`ray job logs {job_id}` shows its whole output")
    return logs


def _via_driver(address: str, args: list[str], timeout: float, script: str | None = None) -> str:
    env = dict(os.environ, RAY_ADDRESS=address)
    proc = subprocess.run([sys.executable, "-c", script or _script(), *args], env=env, text=True,
                          capture_output=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        from rtenv_cli.core.transport.ray_driver import missing_ray_error, ray_is_missing

        if ray_is_missing(proc.stdout + proc.stderr):
            raise missing_ray_error(address, "scanning the nodes")
        raise OperationError(f"the node scan failed: {_failure(proc.stdout + proc.stderr)}",
                             hint="is the Ray cluster reachable at this GCS address?")
    return proc.stdout


def _failure(output: str) -> str:
    """One line for a failed scan: the script's own error line, else the output's last line
    (the message of a traceback), never the whole output (which echoes the script)."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for line in reversed(lines):
        if line.startswith(ERROR_MARKER):
            return line[len(ERROR_MARKER):]
    return lines[-1][:500] if lines else "no output"


def _scan(address: str, mode: str, older_than_s: float | None, timeout: float = 300,
          rtenv_gc: dict[str, object] | None = None) -> tuple[dict[str, Any], ...]:
    args = [mode, "-" if older_than_s is None else str(older_than_s),
            "-" if rtenv_gc is None else json.dumps(rtenv_gc)]
    is_http = address.startswith(("http://", "https://"))
    out = (_via_job if is_http else _via_driver)(address, args, timeout)
    for line in reversed(out.splitlines()):
        if line.startswith(MARKER):
            nodes = json.loads(line[len(MARKER):])["nodes"]
            return mark_shared(tuple(_join(n) for n in nodes))
    raise OperationError(f"the node scan printed no result: {_failure(out)}")


def _join(node: dict[str, Any]) -> dict[str, Any]:
    """Attach the agent's reference counts to the live session's entries."""
    refs: dict[tuple[str, str], int] = {}
    for state in (node.get("agent") or {}).get("states") or []:
        for uri in state["uris"]:
            key = (uri["kind"], uri["dir"])
            refs[key] = refs.get(key, 0) + int(state["ref_cnt"])
    for session in node["sessions"]:
        for entry in session["entries"]:
            entry["refs"] = refs.get((entry["kind"], entry["name"]), 0) if session["live"] \
                else None
            entry["state"] = ("old session (orphaned)" if not session["live"] else
                              "referenced" if entry["refs"] else "cached, unreferenced")
    return node


def _reported(address: str) -> int | None:
    if not address.startswith(("http://", "https://")):
        return None
    from rtenv_cli.core.transport.http import HttpClient

    client = HttpClient(address, "Ray dashboard")
    client.headers.update(_auth_headers())
    try:
        resp = client.request("GET", "/api/v0/runtime_envs", idempotent=True,
                              params={"detail": "1", "limit": "10000"})
        return int(resp.json()["data"]["result"]["total"])
    except (TransportError, ValueError, KeyError, TypeError):
        return None


def node_facts(address: str, *, timeout: float = 180) -> tuple[dict[str, Any], ...]:
    """Each alive node's identity and `facts` (Ray, Python, the plugin setting of its `ray
    start`, free disk), or its `error`: the scan without its caches (`rtenv ray-env --check`)."""
    return _scan(address, "facts", None, timeout)


def list_ray_nodes(address: str) -> RayNodesListing:
    nodes = _scan(address, "scan", None)
    return RayNodesListing(address, nodes, _reported(address))


def clean_ray_nodes(address: str, *, dry_run: bool, older_than_s: float | None = None,
                    rtenv_gc: dict[str, object] | None = None) -> RayCleanPlan:
    """Old sessions' caches (older than `older_than_s`) and, with `rtenv_gc` (`purge`,
    `older_than_s`, `keep_storage`, `kinds`: what `rtenv cache gc|purge` takes), each node's
    rtenv store: planned (dry run) or removed."""
    nodes = _scan(address, "scan" if dry_run else "clean", older_than_s, rtenv_gc=rtenv_gc)
    return plan_from(address, nodes, dry_run=dry_run)


def plan_from(address: str, nodes: tuple[dict[str, Any], ...], *,
              dry_run: bool) -> RayCleanPlan:
    """What the nodes' reports say goes (dry run) or went: each shared folder once."""
    # a node sharing the folder may have looked after another deleted it: take the report
    # that found something to remove
    taken: dict[str, dict[str, Any]] = {}
    for n in nodes:
        for s in n["sessions"]:
            key = s.get("key") or f"{n['node_id']}:{s['path']}"
            if s["removable"] and key not in taken:
                taken[key] = {"node_id": n["node_id"], "node_ip": n["node_ip"],
                              "nodes": s.get("nodes", [n["node_id"]]), "session": s["name"],
                              "path": f"{s['path']}/runtime_resources",
                              "size_bytes": s["size_bytes"]}
    removable = tuple(taken.values())
    removed = tuple(dict.fromkeys(p for n in nodes for p in n.get("removed") or []))
    return RayCleanPlan(address, nodes, dry_run, removable, removed)
