"""`rtenv explain --verify`: run a probe with the same request on a live Ray cluster and diff.

Ray is imported only in the child process this module starts (`python -c <probe.py>`), so rtenv
never imports Ray itself; the child connects with `ray.init(address=<GCS>)`. A dashboard URL or
`auto` is turned into that GCS address first (transport.resolve). A request no node could ever
run is refused by the probe before it is submitted (Ray would keep it pending forever).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rtenv_cli.core.errors import OperationError
from rtenv_cli.core.explain.worker_env import SRC_NODE, EnvPreview, ExplainRequest, predict


def probe_spec(req: ExplainRequest) -> dict[str, object]:
    gpu = next((r for r in req.resources if r.resource == "GPU"), None)
    return {"kind": req.kind, "num_cpus": req.num_cpus,
            "num_gpus": gpu.amount if gpu else 0,
            "resources": {r.resource: r.amount for r in req.resources if r.resource != "GPU"},
            "runtime_env": dict(req.task_runtime_env) if req.task_runtime_env is not None
            else None}


def run_probes(address: str, job_runtime_env: Mapping[str, object] | None,
               requests: Sequence[ExplainRequest], *, env: Mapping[str, str] | None = None,
               timeout: float = 300.0) -> list[dict[str, object]]:
    """Run one probe per request, one at a time (so first-fit ids hold), in one driver."""
    spec = {"address": address, "job": dict(job_runtime_env) if job_runtime_env else None,
            "probes": [probe_spec(r) for r in requests]}
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    source = Path(__file__).with_name("probe.py").read_text(encoding="utf-8")
    try:
        proc = subprocess.run([sys.executable, "-c", source, json.dumps(spec)],
                              capture_output=True, text=True, timeout=timeout, env=child_env,
                              check=False)
    except subprocess.TimeoutExpired:
        raise OperationError(f"the probe on {address} did not finish in {timeout:g} s",
                             hint="check the cluster has the requested resources free") from None
    for line in proc.stdout.splitlines():
        if line.startswith("RTENV-PROBE "):
            results: list[dict[str, object]] = json.loads(line[len("RTENV-PROBE "):])
            return results
    from rtenv_cli.core.transport.ray_driver import missing_ray_error, ray_is_missing

    if ray_is_missing(proc.stderr + proc.stdout):
        raise missing_ray_error(address, "the probe")
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    # the last line of Ray's traceback is its message; the rest is Ray's internals
    last = next((ln for ln in reversed(lines) if ln.strip()), "no output")
    raise OperationError(f"the probe on {address} failed: {last.strip()[:500]}",
                         hint="is the address the head's GCS address (host:port)?")


def _norm(key: str, value: str | None, preview: EnvPreview) -> object:
    if value is None:
        return None
    unordered = any(d.get("env_var") == key and d.get("order_guaranteed") is False
                    for d in preview.devices)
    return sorted(value.split(",")) if unordered else value


def compared_keys(preview: EnvPreview) -> list[str]:
    """Variables whose value the prediction pins down (not node-inherited, no placeholders)."""
    keys = []
    for k, v in preview.env.items():
        if preview.sources.get(k) == SRC_NODE:
            continue
        if v is not None and "<" in v and ">" in v:
            continue  # session-dir placeholder: the real value names a directory we can't know
        keys.append(k)
    return sorted(keys)


def diff(preview: EnvPreview, actual: Mapping[str, str], keys: Sequence[str] | None = None
         ) -> dict[str, tuple[object, object]]:
    out: dict[str, tuple[object, object]] = {}
    for k in compared_keys(preview) if keys is None else keys:
        want = _norm(k, preview.env.get(k), preview)
        got = _norm(k, actual.get(k), preview)
        if want != got:
            out[k] = (want, got)
    return out


@dataclass(frozen=True)
class VerifyReport:
    ok: bool
    compared: int
    diff: dict[str, tuple[object, object]]
    error: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "compared": self.compared, "error": self.error,
                "diff": {k: {"predicted": a, "actual": b} for k, (a, b) in self.diff.items()}}


def gcs_address(address: str, env: Mapping[str, str] | None = None) -> str:
    """The GCS address `ray.init` needs for what the user gave: a GCS host:port as is, a
    dashboard URL through the dashboard's node summary, `auto` through Ray's address file."""
    from rtenv_cli.core.transport.resolve import (
        AddressKind,
        gcs_address_of_dashboard,
        resolve_address,
    )

    where = resolve_address(address, env).require(AddressKind.GCS, AddressKind.DASHBOARD,
                                                  command="rtenv explain --verify")
    where.check_reachable().close()
    if where.kind is AddressKind.DASHBOARD:
        return gcs_address_of_dashboard(where.value, env)
    return where.value


def verify_on_cluster(req: ExplainRequest, address: str,
                      env: Mapping[str, str] | None = None) -> VerifyReport:
    preview = predict(req)
    if preview.errors:
        raise OperationError("Ray rejects this request: " + "; ".join(preview.errors),
                             hint="fix the request; nothing was run on the cluster")
    gcs = gcs_address(address, env)
    (res,) = run_probes(gcs, req.job_runtime_env, [req], env=env)
    if "error" in res:
        hint = ("ask for what a node has (`ray status` lists the cluster's resources)"
                if res.get("infeasible") else "the probe task or actor failed on the cluster")
        raise OperationError(str(res["error"]), hint=hint)
    d = diff(preview, res["env"])  # type: ignore[arg-type]
    return VerifyReport(not d, len(compared_keys(preview)), d)
