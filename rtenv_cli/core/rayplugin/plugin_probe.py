"""Runs ON a Ray cluster (as a job's driver or a driver connected to the GCS), stdlib + ray only:
one task pinned to each alive node reports whether that node's runtime-env agent was started
with rtenv's plugin.

    python plugin_probe.py CLASS_PATH

The raylet starts its runtime-env agent (the process Ray loads plugins into) with its own
environment, so the raylet's `RAY_RUNTIME_ENV_PLUGINS` (read from /proc/<RAY_RAYLET_PID>/environ)
is what the agent read; the agent's own /proc environ is unusable (setproctitle writes its
`ray::RuntimeEnvAgent` title over it). A worker's environment, inherited from the raylet, is
the fallback. The node's Python must also import the class path.

Prints one line `RTENV_PLUGIN <json>`, or `RTENV_PLUGIN_ERROR <message>`. Sent as source text:
it must stay self-contained.
"""

import importlib
import json
import logging
import os
import sys

MARKER = "RTENV_PLUGIN "
ERROR_MARKER = "RTENV_PLUGIN_ERROR "
PLUGINS_ENV = "RAY_RUNTIME_ENV_PLUGINS"


def environ_of(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def listed(value, class_path):
    try:
        configs = json.loads(value) if value else []
    except ValueError:
        return False, f"{PLUGINS_ENV} is not JSON"
    if not isinstance(configs, list):
        return False, f"{PLUGINS_ENV} is not a JSON list"
    found = any(isinstance(c, dict) and c.get("class") == class_path for c in configs)
    return found, None if found else f"{PLUGINS_ENV} does not list {class_path}"


def check_node(class_path, node):
    raylet = os.environ.get("RAY_RAYLET_PID") or os.getppid()
    started = environ_of(raylet)
    source = "raylet" if started is not None else "worker (inherited from the raylet)"
    env = started if started is not None else dict(os.environ)
    value = env.get(PLUGINS_ENV)
    loaded, reason = listed(value, class_path)
    if value is None:
        reason = f"{PLUGINS_ENV} is not set on this node's `ray start`"
    importable = True
    module, _, attr = class_path.rpartition(".")
    try:
        getattr(importlib.import_module(module), attr)
    except Exception as exc:  # ImportError, AttributeError, Ray missing: say which
        importable = False
        if loaded:
            loaded, reason = False, f"{class_path} does not import here: {exc}"
    return {"node_id": node["NodeID"], "node_ip": node.get("NodeManagerAddress", ""),
            "loaded": loaded, "importable": importable, "reason": reason, "source": source,
            "plugins": value, "cache_size_gb": env.get("RAY_RUNTIME_ENV_RTENV_CACHE_SIZE_GB"),
            "rtenv_home": env.get("RTENV_HOME"), "python": sys.executable,
            "raylet_pid": str(raylet)}


def main():
    class_path = sys.argv[1]
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray.init(logging_level=logging.ERROR, log_to_driver=False)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
    except Exception as exc:
        print(ERROR_MARKER + f"cannot connect to the cluster: {exc}", flush=True)
        sys.exit(1)
    task = ray.remote(num_cpus=0)(check_node)
    refs = [task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        n["NodeID"], soft=False)).remote(class_path, n) for n in nodes]
    ray.wait(refs, num_returns=len(refs), timeout=120)
    results = []
    for node, ref in zip(nodes, refs, strict=True):
        try:
            results.append(ray.get(ref, timeout=0))
        except Exception as exc:  # the node did not answer: not loaded as far as we know
            results.append({"node_id": node["NodeID"],
                            "node_ip": node.get("NodeManagerAddress", ""), "loaded": False,
                            "importable": None, "reason": f"{type(exc).__name__}: {exc}"})
    print(MARKER + json.dumps({"nodes": results}), flush=True)


if __name__ == "__main__":
    main()
