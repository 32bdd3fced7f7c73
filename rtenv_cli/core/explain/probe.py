"""Runs as a Ray driver (stdlib + ray only), for `rtenv explain --verify`:

    python -c <this file's source> SPEC_JSON

connects to the GCS in the spec, then for each probe checks that some node could ever run it
(its total resources, as the scheduler's infeasibility check does), runs a task or actor with the
same request, and reads the environment the worker got. Prints one line `RTENV-PROBE <json>`: one
result per probe, `{"env": ..., "cwd": ...}` or `{"error": ..., "infeasible": bool}`.
Sent as source text, so it must stay self-contained.
"""

import json
import logging
import os
import sys
import time

WAIT_S = 120  # per probe, once the cluster is known to have what it needs


def read():
    return {"env": dict(os.environ), "cwd": os.getcwd()}


def _amount(value):
    return f"{value:g}"


def needs(probe):
    """Resources the probe asks for, as Ray's scheduler sees them (name -> amount)."""
    need = {k: float(v) for k, v in probe["resources"].items() if v}
    if probe["num_cpus"]:
        need["CPU"] = float(probe["num_cpus"])
    if probe["num_gpus"]:
        need["GPU"] = float(probe["num_gpus"])
    return need


def infeasible(need, nodes):
    """Why no alive node could ever run `need` (None when one could): the scheduler would
    keep such a request pending forever, so it is refused before it is submitted."""
    totals = [n.get("Resources") or {} for n in nodes]
    if any(all(t.get(k, 0) >= v for k, v in need.items()) for t in totals):
        return None
    parts = []
    for k, v in sorted(need.items()):
        best = max((t.get(k, 0) for t in totals), default=0)
        if best < v:
            whole = sum(t.get(k, 0) for t in totals)
            has = _amount(best) if whole == best else \
                f"{_amount(whole)} ({_amount(best)} at most on one node)"
            parts.append(f"needs {k}={_amount(v)}, the cluster has {has}")
    if not parts:
        together = ", ".join(f"{k}={_amount(v)}" for k, v in sorted(need.items()))
        parts.append(f"no single node has {together} together")
    return "infeasible: " + "; ".join(parts)


def settle(ray, held, before):
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


def run_one(ray, probe, task, actor_cls):
    opts = {"resources": probe["resources"]}
    if probe["num_cpus"] is not None:
        opts["num_cpus"] = probe["num_cpus"]
    if probe["num_gpus"]:
        opts["num_gpus"] = probe["num_gpus"]
    if probe["runtime_env"] is not None:
        opts["runtime_env"] = probe["runtime_env"]
    actor = None
    try:
        if probe["kind"] == "actor":
            actor = actor_cls.options(**opts).remote()
            return ray.get(actor.read.remote(), timeout=WAIT_S)
        return ray.get(task.options(**opts).remote(), timeout=WAIT_S)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:2000], "infeasible": False}
    finally:
        if actor is not None:
            ray.kill(actor)


def main():
    import ray

    spec = json.loads(sys.argv[1])
    ray.init(address=spec["address"], runtime_env=spec["job"] or None, log_to_driver=False,
             logging_level=logging.ERROR)
    task = ray.remote(read)

    @ray.remote
    class ProbeActor:
        def read(self):
            return read()

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    out = []
    held: list[str] = []  # resource names the last probe asked for
    before: dict[str, float] = {}  # ray.available_resources() before that probe
    for probe in spec["probes"]:
        why = infeasible(needs(probe), nodes)
        if why:
            out.append({"error": why, "infeasible": True})
            continue
        before = settle(ray, held, before)
        held = list(needs(probe))
        out.append(run_one(ray, probe, task, ProbeActor))
    print("RTENV-PROBE " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
