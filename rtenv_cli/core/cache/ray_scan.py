"""Runs ON a Ray cluster (as a job's driver or a driver connected to the GCS), stdlib + ray only:
one task pinned to each alive node reports what the node runs (`facts`: Ray, Python, the
RAY_RUNTIME_ENV_PLUGINS its `ray start` had and whether each class imports, free disk), and
unless the mode is `facts` scans that node's Ray temp dir, asks the node's runtime-env agent
what it holds (`/get_runtime_envs_info`), and optionally deletes old sessions' caches. This is
the one per-node probe: `rtenv doctor --address`, `rtenv ray-env --check` and `rtenv cache
ls|gc|purge --address` all read their nodes through it.

    python ray_scan.py facts|scan|clean OLDER_THAN_S|- [RTENV_GC_JSON|-]

Prints one line `RTENV_SCAN <json>` (a node that fails is one `error` line in it, the others
still report), or `RTENV_SCAN_ERROR <message>` when the cluster cannot be reached. The file is
sent as source text (the cluster need not have rtenv installed); it must therefore stay
self-contained.

Where rtenv is installed on the node (its runtime_env plugin runs there), the node's rtenv
store is reported too (`rtenv`: rtenv_cli.core.cache.ray_store, imported on the node), and with
RTENV_GC_JSON ({"purge", "older_than_s", "keep_storage", "kinds"}) its gc planned (scan) or run
(clean). A node without rtenv reports `rtenv: null`.

Deleting is safe when nodes share a temp dir (several raylets on one machine, a shared
filesystem) and resumable: see clean_session. Each session dir carries its folder identity
(`key`), so whoever joins the nodes' reports counts a shared folder once.
"""

import contextlib
import json
import logging
import os
import re
import shutil
import stat
import sys
import time

KINDS = {"working_dir_files": "working_dir", "py_modules_files": "py_modules", "pip": "pip",
         "uv": "uv", "conda": "conda", "java_jars_files": "java_jars"}
SESSION_RE = re.compile(r"session_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_\d+_\d+")
MARKER = "RTENV_SCAN "
ERROR_MARKER = "RTENV_SCAN_ERROR "
PLUGINS = ("WORKING_DIR", "PY_MODULES", "PIP", "UV", "CONDA", "JAVA_JARS")
log = logging.getLogger("rtenv.cache.ray_scan")


def du(path):
    """What `path` takes on disk, as `du -s --block-size=1`: allocated blocks, each inode once,
    links not followed. A copy of rtenv_cli.core.store.files.dir_size (this file runs where
    rtenv may not be installed); tests/core/store/test_dir_size.py checks they agree."""
    seen = set()

    def size(entry):
        try:
            st = os.lstat(entry)
        except OSError:  # removed meanwhile
            return 0, False
        if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
            if (st.st_dev, st.st_ino) in seen:
                return 0, False
            seen.add((st.st_dev, st.st_ino))
        return st.st_blocks * 512, stat.S_ISDIR(st.st_mode)

    total, is_dir = size(path)
    if not is_dir:
        return total
    for root, dirs, files in os.walk(path):
        total += sum(size(os.path.join(root, name))[0] for name in dirs + files)
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
    # ray's generated protobuf modules ship no stubs: their classes are made at import
    req = runtime_env_agent_pb2.GetRuntimeEnvsInfoRequest()  # type: ignore[attr-defined]
    headers = {"Content-Type": "application/octet-stream"}
    try:
        from ray._private.authentication.http_token_authentication import (
            get_auth_headers_if_auth_enabled,
        )

        headers = get_auth_headers_if_auth_enabled(headers)
    except Exception as exc:  # older Ray: no token auth helper
        log.debug("no Ray token auth helper, asking without a token: %r", exc)
    url = f"http://{node['NodeManagerAddress']}:{port}/get_runtime_envs_info"
    try:
        http_req = urllib.request.Request(url, data=req.SerializeToString(), headers=headers)
        with urllib.request.urlopen(http_req, timeout=10) as resp:  # noqa: S310 - http only
            reply = runtime_env_agent_pb2.GetRuntimeEnvsInfoReply.FromString(  # type: ignore[attr-defined] # generated, no stubs
                resp.read())
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
    except Exception as exc:  # a Ray without these helpers: no pip/uv mapping
        log.debug("no pip/uv URI from Ray's helpers: %r", exc)
    out = []
    for kind, uri in names:
        if not uri:
            continue
        base = uri.split("://", 1)[-1]
        for ext in (".zip", ".whl", ".tar.gz", ".tar.xz"):
            base = base.removesuffix(ext)
        out.append({"kind": kind, "uri": uri, "dir": base})
    return out


TOMB = ".rtenv-deleting-"  # runtime_resources renamed to this + a tag, then deleted


def _listdir(path):
    """Names in `path`; none when it is gone (another node sharing the dir deleted it)."""
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _mtime(path):
    try:
        return os.stat(path).st_mtime
    except FileNotFoundError:
        return None


def machine_id():
    """Nodes on one machine share it (and so their local filesystems' device numbers)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        import socket

        return socket.gethostname()


def folder_key(path):
    """Identity of a folder across nodes: two nodes sharing a temp dir see the same one."""
    st = os.stat(path)
    return f"{machine_id()}:{st.st_dev}:{st.st_ino}"


def cache_entries(rr):
    entries = []
    for sub, kind in KINDS.items():
        d = os.path.join(rr, sub)
        for child in _listdir(d):
            cpath = os.path.join(d, child)
            mtime = _mtime(cpath)
            if child.endswith(".lock") or mtime is None or not os.path.isdir(cpath):
                continue
            entries.append({"kind": kind, "name": child, "path": cpath,
                            "size_bytes": du(cpath), "mtime": mtime})
    return entries


def remove_tree(path):
    """Delete `path`; what another deleter removed first is not an error. Returns the first
    real failure as one line, or None."""
    failures = []

    def on_error(_func, failed, exc):
        exc = exc if isinstance(exc, BaseException) else exc[1]
        if not isinstance(exc, FileNotFoundError):
            failures.append(f"cannot delete {failed}: {exc.strerror or exc}")

    if sys.version_info >= (3, 12):  # onerror is deprecated there
        shutil.rmtree(path, onexc=on_error)
    else:
        shutil.rmtree(path, onerror=on_error)
    return failures[0] if failures else None


def clean_session(path, tag, *, condemn):
    """Delete a session's caches, resumably and alongside other deleters: rename
    runtime_resources to a tombstone first (nothing then sees a half-deleted cache; of two
    nodes sharing the dir one wins the rename), then delete every tombstone there, including
    those an interrupted earlier run left. Returns the failures (one line each)."""
    rr = os.path.join(path, "runtime_resources")
    if condemn:
        with contextlib.suppress(FileNotFoundError):  # another node sharing it renamed it first
            os.rename(rr, rr + TOMB + tag)
    errors = []
    for name in _listdir(path):
        if name.startswith("runtime_resources" + TOMB):
            err = remove_tree(os.path.join(path, name))
            if err:
                errors.append(err)
    return errors


def scan_session(path, name, *, live, mode, older_than_s, now, tag):
    """One session dir: its caches, leftover tombstones, and (clean) their deletion."""
    rr = os.path.join(path, "runtime_resources")
    mtime = _mtime(path)
    if mtime is None:
        return None, []
    key = folder_key(path)
    entries = cache_entries(rr) if os.path.isdir(rr) else []
    tombs = [{"path": os.path.join(path, t), "size_bytes": du(os.path.join(path, t))}
             for t in _listdir(path) if t.startswith("runtime_resources" + TOMB)]
    old_enough = older_than_s is None or now - mtime >= older_than_s
    condemn = not live and os.path.isdir(rr) and old_enough
    removable = condemn or (not live and bool(tombs))  # a tombstone was already condemned
    errors, removed = [], False
    if mode == "clean" and removable:
        errors = clean_session(path, tag, condemn=condemn)
        removed = not errors and not os.path.exists(rr)
    size = sum(e["size_bytes"] for e in entries) + sum(t["size_bytes"] for t in tombs)
    return {"name": name, "path": path, "key": key, "live": live, "mtime": mtime,
            "size_bytes": size, "entries": entries, "deleting": tombs,
            "removable": removable, "removed": removed}, errors


def scan_temp(temp, in_use, *, mode, older_than_s, tag, now=None):
    """Every `session_*` dir of a Ray temp dir; errors are one line each, never raised."""
    now = time.time() if now is None else now
    sessions, errors = [], []
    for name in _listdir(temp):
        path = os.path.join(temp, name)
        if not name.startswith("session_") or os.path.islink(path) or not os.path.isdir(path):
            continue
        try:
            session, errs = scan_session(path, name, live=name in in_use, mode=mode,
                                         older_than_s=older_than_s, now=now, tag=tag)
        except OSError as exc:
            session, errs = None, [f"{path}: {exc.strerror or exc}"]
        errors += errs
        if session is not None:
            sessions.append(session)
    return sessions, errors


PLUGINS_VAR = "RAY_RUNTIME_ENV_PLUGINS"


def _raylet_pid():
    """This worker's raylet: RAY_RAYLET_PID as Ray sets it in a worker, else the nearest
    ancestor process running the `raylet` binary."""
    named = os.environ.get("RAY_RAYLET_PID", "")
    if named.isdigit():
        return int(named)
    pid = os.getppid()
    for _ in range(8):  # a worker is the raylet's child, or its grandchild through a wrapper
        try:
            if os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "raylet":
                return pid
            with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        if pid <= 1:
            return None
    return None


def raylet_environ():
    """The environment `ray start` gave this node's raylet, which its runtime-env agent (the
    process that loads plugins) inherits; read from /proc (the agent's own cannot be: its
    process title overwrites it). None when it cannot be read."""
    pid = _raylet_pid()
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            pairs = fh.read().decode("utf-8", "replace").split("\0")
    except OSError:
        return None
    return dict(p.split("=", 1) for p in pairs if "=" in p)


def started_env():
    """(the node's `ray start` environment, where it was read: "raylet", or "worker" when the
    raylet's cannot be read and this worker's own, inherited from it, stands in)."""
    raylet_env = raylet_environ()
    if raylet_env is not None:
        return raylet_env, "raylet"
    return dict(os.environ), "worker"


def plugin_classes(text):
    """Each plugin class RAY_RUNTIME_ENV_PLUGINS names, and whether this Python can import it."""
    import importlib

    try:
        configs = json.loads(text) if text else []
    except ValueError as exc:
        return [{"class": None, "importable": False, "error": f"not JSON: {exc}"}]
    out = []
    for config in configs if isinstance(configs, list) else [configs]:
        path = config.get("class") if isinstance(config, dict) else None
        if not isinstance(path, str):
            out.append({"class": None, "importable": False, "error": f"no class in {config!r}"})
            continue
        module, _, attr = path.rpartition(".")
        try:
            getattr(importlib.import_module(module), attr)
            out.append({"class": path, "importable": True, "error": None})
        except Exception as exc:
            out.append({"class": path, "importable": False, "error": one_line(
                f"{type(exc).__name__}: {exc}")})
    return out


def node_facts(temp, env, env_from):
    """What this node runs, the one probe behind `rtenv doctor --address` and `rtenv ray-env
    --check` (rtenv_cli.core.rayplugin.nodes judges it): Ray, Python, the plugin setting of the
    node's `ray start` (ENV, read from ENV_FROM) and whether each class it names imports here,
    rtenv's settings and version, and the free disk of the temp dir."""
    import platform

    import ray

    try:
        import rtenv_cli

        rtenv = getattr(rtenv_cli, "__version__", "unknown")
    except ImportError:
        rtenv = None
    setting = env.get(PLUGINS_VAR)
    usage = shutil.disk_usage(temp)
    return {"ray_version": ray.__version__, "python": platform.python_version(),
            "python_executable": sys.executable, "raylet_pid": _raylet_pid(),
            "plugins_env": setting, "plugins_env_from": env_from,
            "plugins": plugin_classes(setting), "rtenv_version": rtenv,
            "rtenv_home": env.get("RTENV_HOME"),
            "rtenv_cache_size_gb": env.get("RAY_RUNTIME_ENV_RTENV_CACHE_SIZE_GB"),
            "disk": {"path": temp, "total_bytes": usage.total, "free_bytes": usage.free}}


def rtenv_store(mode, gc, env):
    """The node's rtenv store (RTENV_HOME of ENV, the node's `ray start` environment), or None
    when rtenv is not installed on the node or its Ray does not load rtenv's plugin (then no
    store is the node's: the one RTENV_HOME names is some user's own, e.g. this machine's)."""
    configured = plugin_classes(env.get(PLUGINS_VAR))
    if not any(str(p.get("class") or "").startswith("rtenv_cli.") for p in configured):
        return None
    try:
        from rtenv_cli.core.cache.ray_store import node_report
    except ImportError:
        return None
    try:
        return node_report(gc, clean=mode == "clean", env=env)
    except Exception as exc:  # one node's store failing is that node's error line
        return {"error": one_line(f"{type(exc).__name__}: {exc}"), "entries": []}


def scan_node(mode, older_than_s, node, gc=None):
    """This node's report: its facts, and unless MODE is `facts` (all `ray-env --check` needs)
    its Ray caches, the agent's references and the rtenv store (`scan`), or their gc
    (`clean`)."""
    try:
        from ray._private import worker

        ray_node = worker.global_worker.node
        if ray_node is None:  # ray.init ran in this worker's process, so this cannot happen
            raise RuntimeError("this Ray worker is not connected to its node")
        session = ray_node.get_session_dir_path()
        temp = os.path.dirname(session)
        env, env_from = started_env()
        report = {"node_id": node["NodeID"], "node_ip": node["NodeManagerAddress"],
                  "temp_dir": temp, "session": os.path.basename(session),
                  "facts": node_facts(temp, env, env_from), "sessions": [], "removed": [],
                  "errors": []}
        if mode == "facts":
            return report
        in_use = sessions_in_use() | {os.path.basename(session)}
        tag = f"{node['NodeID'][:8]}-{os.getpid()}"
        sessions, errors = scan_temp(temp, in_use, mode=mode, older_than_s=older_than_s,
                                     tag=tag)
        settings = {f"RAY_RUNTIME_ENV_{p}_CACHE_SIZE_GB":
                    env.get(f"RAY_RUNTIME_ENV_{p}_CACHE_SIZE_GB") for p in PLUGINS}
        return {**report, "sessions": sessions,
                "removed": [os.path.join(s["path"], "runtime_resources") for s in sessions
                            if s["removed"]],
                "errors": errors, "agent": agent_states(node), "settings": settings,
                "rtenv": rtenv_store(mode, gc, env)}
    except Exception as exc:
        return failed(node, f"{type(exc).__name__}: {exc}")


def failed(node, message):
    return {"node_id": node["NodeID"], "node_ip": node["NodeManagerAddress"],
            "error": one_line(message), "sessions": [], "removed": [], "errors": []}


def one_line(text):
    """The message of an exception's text (a Ray task error carries the whole traceback)."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return lines[-1][:500] if lines else "unknown error"


def main():
    mode = sys.argv[1]
    older = None if len(sys.argv) < 3 or sys.argv[2] == "-" else float(sys.argv[2])  # noqa: PLR2004 - argv: script, mode, age
    gc = None if len(sys.argv) < 4 or sys.argv[3] == "-" else json.loads(sys.argv[3])  # noqa: PLR2004 - argv: ..., rtenv gc
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray.init(logging_level=logging.ERROR, log_to_driver=False)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
    except Exception as exc:
        print(ERROR_MARKER + one_line(f"cannot connect to the cluster: {exc}"), flush=True)
        sys.exit(1)
    task = ray.remote(num_cpus=0)(scan_node)
    refs = [task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        n["NodeID"], soft=False)).remote(mode, older, n, gc) for n in nodes]
    ray.wait(refs, num_returns=len(refs), timeout=300)
    results = []
    for node, ref in zip(nodes, refs, strict=True):
        try:
            results.append(ray.get(ref, timeout=0))
        except ray.exceptions.GetTimeoutError:
            results.append(failed(node, "the node did not answer in 300 s"))
        except Exception as exc:  # the node died, or its worker did: say so, keep the others
            results.append(failed(node, f"{type(exc).__name__}: {exc}"))
    print(MARKER + json.dumps({"nodes": results}), flush=True)


if __name__ == "__main__":
    main()
