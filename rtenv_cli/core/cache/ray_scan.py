"""Runs ON a Ray cluster (as a job's driver or a driver connected to the GCS), stdlib + ray only:
one task pinned to each alive node scans that node's Ray temp dir, asks the node's runtime-env
agent what it holds (`/get_runtime_envs_info`), and optionally deletes old sessions' caches.

    python ray_scan.py scan|clean OLDER_THAN_S|-

Prints one line `RTENV_SCAN <json>`. The file is sent as source text (the cluster need not have
rtenv installed); it must therefore stay self-contained.
"""

import json
import os
import re
import shutil
import sys
import time

KINDS = {"working_dir_files": "working_dir", "py_modules_files": "py_modules", "pip": "pip",
         "uv": "uv", "conda": "conda", "java_jars_files": "java_jars"}
SESSION_RE = re.compile(r"session_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_\d+_\d+")
PLUGINS = ("WORKING_DIR", "PY_MODULES", "PIP", "UV", "CONDA", "JAVA_JARS")


def du(path):
    total = 0
    for root, dirs, files in os.walk(path):
        for name in files + dirs:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if not os.path.isdir(os.path.join(root, name)) or os.path.islink(
                    os.path.join(root, name)):
                total += st.st_blocks * 512
    return total


def sessions_in_use():
    """Session dirs named on any process's command line (a live raylet, agent or worker)."""
    used = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                args = fh.read().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        for arg in args:
            used.update(SESSION_RE.findall(arg))
    return used


def agent_states(node):
    """What the node's runtime-env agent reports (None if unreachable)."""
    import urllib.request

    from ray.core.generated import runtime_env_agent_pb2

    port = node.get("RuntimeEnvAgentPort")
    if not port:
        return None
    req = runtime_env_agent_pb2.GetRuntimeEnvsInfoRequest()
    headers = {"Content-Type": "application/octet-stream"}
    try:
        from ray._private.authentication.http_token_authentication import (
            get_auth_headers_if_auth_enabled,
        )

        headers = get_auth_headers_if_auth_enabled(headers)
    except Exception:  # noqa: S110 - older Ray: no token auth helper
        pass
    url = f"http://{node['NodeManagerAddress']}:{port}/get_runtime_envs_info"
    try:
        http_req = urllib.request.Request(url, data=req.SerializeToString(), headers=headers)
        with urllib.request.urlopen(http_req, timeout=10) as resp:  # noqa: S310 - http only
            reply = runtime_env_agent_pb2.GetRuntimeEnvsInfoReply.FromString(resp.read())
    except Exception as exc:
        return {"error": str(exc)}
    out = []
    for state in reply.runtime_env_states:
        env = json.loads(state.runtime_env or "{}")
        out.append({"runtime_env": env, "ref_cnt": state.ref_cnt,
                    "success": state.success if state.HasField("success") else None,
                    "uris": uris_of(env)})
    return {"states": out}


def uris_of(env):
    """Directory names Ray uses for each URI of a serialized runtime_env."""
    names = []
    for field in ("working_dir",):
        if isinstance(env.get(field), str):
            names.append(("working_dir", env[field]))
    for uri in env.get("py_modules") or []:
        names.append(("py_modules", uri))
    try:
        from ray._private.runtime_env import pip as ray_pip
        from ray._private.runtime_env import uv as ray_uv

        if env.get("pip"):
            names.append(("pip", ray_pip.get_uri(env)))
        if env.get("uv"):
            names.append(("uv", ray_uv.get_uri(env)))
    except Exception:  # noqa: S110 - a Ray without these helpers: no pip/uv mapping
        pass
    out = []
    for kind, uri in names:
        if not uri:
            continue
        base = uri.split("://", 1)[-1]
        for ext in (".zip", ".whl", ".tar.gz", ".tar.xz"):
            base = base.removesuffix(ext)
        out.append({"kind": kind, "uri": uri, "dir": base})
    return out


def scan_node(mode, older_than_s, node):
    from ray._private import worker

    session = worker.global_worker.node.get_session_dir_path()
    temp = os.path.dirname(session)
    in_use = sessions_in_use() | {os.path.basename(session)}
    now = time.time()
    sessions, removed = [], []
    for name in sorted(os.listdir(temp)):
        path = os.path.join(temp, name)
        if not name.startswith("session_") or os.path.islink(path) or not os.path.isdir(path):
            continue
        rr = os.path.join(path, "runtime_resources")
        live = name in in_use
        mtime = os.stat(path).st_mtime
        entries = []
        if os.path.isdir(rr):
            for sub, kind in KINDS.items():
                d = os.path.join(rr, sub)
                if not os.path.isdir(d):
                    continue
                for child in sorted(os.listdir(d)):
                    cpath = os.path.join(d, child)
                    if child.endswith(".lock") or not os.path.isdir(cpath):
                        continue
                    entries.append({"kind": kind, "name": child, "path": cpath,
                                    "size_bytes": du(cpath),
                                    "mtime": os.stat(cpath).st_mtime})
        size = sum(e["size_bytes"] for e in entries)
        old_enough = older_than_s is None or now - mtime >= older_than_s
        removable = not live and os.path.isdir(rr) and old_enough
        if mode == "clean" and removable:
            tomb = rr + f".rtenv-deleting-{os.getpid()}"
            os.rename(rr, tomb)  # tombstone first: nothing sees a half-deleted cache
            shutil.rmtree(tomb, ignore_errors=True)
            removed.append(rr)
        sessions.append({"name": name, "path": path, "live": live, "mtime": mtime,
                         "size_bytes": size, "entries": entries, "removable": removable})
    settings = {f"RAY_RUNTIME_ENV_{p}_CACHE_SIZE_GB":
                os.environ.get(f"RAY_RUNTIME_ENV_{p}_CACHE_SIZE_GB") for p in PLUGINS}
    return {"node_id": node["NodeID"], "node_ip": node["NodeManagerAddress"],
            "temp_dir": temp, "session": os.path.basename(session), "sessions": sessions,
            "removed": removed, "agent": agent_states(node), "settings": settings}


def main():
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    mode = sys.argv[1]
    older = None if len(sys.argv) < 3 or sys.argv[2] == "-" else float(sys.argv[2])  # noqa: PLR2004 - argv: script, mode, age
    ray.init(logging_level="ERROR", log_to_driver=False)
    task = ray.remote(num_cpus=0)(scan_node)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    refs = [task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        n["NodeID"], soft=False)).remote(mode, older, n) for n in nodes]
    results = ray.get(refs, timeout=300)
    print("RTENV_SCAN " + json.dumps({"nodes": results}), flush=True)


if __name__ == "__main__":
    main()
