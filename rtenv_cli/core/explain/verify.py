"""`rtenv explain --verify`: run a probe with the same request on a live Ray cluster and diff.

Ray is imported only in the child process this module starts (`python -c <probe>`), so rtenv
never imports Ray itself; the child connects with `ray.init(address=...)`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rtenv_cli.core.errors import OperationError
from rtenv_cli.core.explain.worker_env import SRC_NODE, EnvPreview, ExplainRequest, predict

_PROBE = r'''
import json, os, sys, time, ray
spec = json.loads(sys.argv[1])
ray.init(address=spec["address"], runtime_env=spec["job"] or None, log_to_driver=False)

def read():
    return {"env": dict(os.environ), "cwd": os.getcwd()}

@ray.remote
def probe_task():
    return read()

@ray.remote
class ProbeActor:
    def read(self):
        return read()

def settle(held, before):
    # A finished task's worker lease and a killed actor's resources go back to the raylet
    # asynchronously: without this the next probe can get GPU 1 while GPU 0 is still being
    # returned. Wait until what the last probe held is free again, i.e. as free as it was before
    # that probe (other work on a shared cluster may hold some all along), in the GCS's view,
    # which trails the raylet by one report period (100 ms): hence the sleep before looking.
    deadline = time.monotonic() + 30
    while held and time.monotonic() < deadline:
        time.sleep(0.25)
        free = ray.available_resources()
        if all(free.get(k, 0) >= before.get(k, 0) for k in held):
            return free
    return ray.available_resources()

out = []
held, before = [], {}
for p in spec["probes"]:
    before = settle(held, before)
    held = [k for k, v in p["resources"].items() if v] + (["GPU"] if p["num_gpus"] else [])
    opts = {"resources": p["resources"]}
    if p["num_cpus"] is not None:
        opts["num_cpus"] = p["num_cpus"]
    if p["num_gpus"]:
        opts["num_gpus"] = p["num_gpus"]
    if p["runtime_env"] is not None:
        opts["runtime_env"] = p["runtime_env"]
    a = None
    try:
        if p["kind"] == "actor":
            a = ProbeActor.options(**opts).remote()
            out.append(ray.get(a.read.remote(), timeout=120))
        else:
            out.append(ray.get(probe_task.options(**opts).remote(), timeout=120))
    except Exception as exc:
        out.append({"error": f"{type(exc).__name__}: {exc}"[:2000]})
    finally:
        if a is not None:
            ray.kill(a)
print("RTENV-PROBE " + json.dumps(out))
'''


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
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(spec)],
                              capture_output=True, text=True, timeout=timeout, env=child_env,
                              check=False)
    except subprocess.TimeoutExpired:
        raise OperationError(f"the probe on {address} did not finish in {timeout:g} s",
                             hint="check the cluster has the requested resources free") from None
    for line in proc.stdout.splitlines():
        if line.startswith("RTENV-PROBE "):
            return json.loads(line[len("RTENV-PROBE "):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    raise OperationError(f"the probe on {address} failed: " + " | ".join(tail),
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


def verify_on_cluster(req: ExplainRequest, address: str) -> VerifyReport:
    preview = predict(req)
    if preview.errors:
        return VerifyReport(False, 0, {}, "; ".join(preview.errors))
    (res,) = run_probes(address, req.job_runtime_env, [req])
    if "error" in res:
        return VerifyReport(False, 0, {}, str(res["error"]))
    d = diff(preview, res["env"])  # type: ignore[arg-type]
    return VerifyReport(not d, len(compared_keys(preview)), d)
