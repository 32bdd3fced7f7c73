"""Trees (content-addressed working_dir/py_modules in the cluster's KV) on the real 2-node
Ray 2.60.0 cluster with rtenv's plugin (tests/core/rayplugin/conftest.py)."""

from __future__ import annotations

import json
import os
import re
import textwrap
import time
from pathlib import Path

import pytest

from rtenv_cli.api import push
from rtenv_cli.core.push import PushResult
from rtenv_cli.core.transport.ray_kv import RayKV
from rtenv_cli.core.trees.cluster import readiness
from tests.core.rayplugin.conftest import PluginCluster
from tests.support.wait import until

pytestmark = pytest.mark.ray

LISTING = '''
import hashlib, json, os, sys, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On
ray.init(log_to_driver=False)

def listing(root="."):
    out = {}
    for top, dirs, files in os.walk(root):
        for d in dirs:
            p = os.path.join(top, d)
            if not os.listdir(p):
                out[os.path.relpath(p, root) + "/"] = oct(os.stat(p).st_mode & 0o777)
        for f in files:
            p = os.path.join(top, f)
            with open(p, "rb") as fh:
                digest = hashlib.sha256(fh.read()).hexdigest()[:16]
            out[os.path.relpath(p, root)] = [oct(os.lstat(p).st_mode & 0o7777), digest,
                                             os.path.islink(p)]
    return out

@ray.remote(num_cpus=0.1)
def look(write=None):
    import helper
    if write:
        with open(write, "w") as fh:
            fh.write("changed by a worker")
    return {"cwd_files": listing(), "helper": helper.NAME, "node":
            ray.get_runtime_context().get_node_id(), "cwd": os.getcwd(),
            "pythonpath": os.environ.get("PYTHONPATH", "")}
'''


def make_tree(root: Path) -> Path:
    """A working_dir with what Ray's packaging cares about, and a py_module beside it."""
    wd = root / "wd"
    (wd / "pkg" / "sub").mkdir(parents=True)
    (wd / "main.py").write_text("print('hello from main')\n")
    (wd / "pkg" / "__init__.py").write_text("")
    (wd / "pkg" / "sub" / "data.txt").write_text("data\n" * 100)
    run = wd / "run.sh"
    run.write_text("#!/bin/sh\necho run\n")
    run.chmod(0o755)
    (wd / "empty").mkdir()
    (wd / "link.txt").symlink_to("main.py")  # Ray's zip stores a link as its target's content
    (wd / "linkdir").symlink_to("pkg/sub")
    (wd / ".gitignore").write_text("*.log\n")
    (wd / "debug.log").write_text("excluded\n")
    (wd / "__pycache__").mkdir()
    (wd / "__pycache__" / "x.pyc").write_bytes(b"\0")
    mod = root / "helper"
    mod.mkdir()
    (mod / "__init__.py").write_text("NAME = 'helper v1'\n")
    (root / "runtime_env.yaml").write_text("working_dir: wd\npy_modules: [helper]\n")
    return root / "runtime_env.yaml"


def kv(c: PluginCluster) -> RayKV:
    return RayKV.connect(c.head.address, env={})


def wait_ready(c: PluginCluster, timeout: float = 120) -> None:
    conn = kv(c)
    try:
        until(lambda: readiness(conn).ok, what=lambda: f"the cluster ready for trees: "
              f"{readiness(conn).why_not()}", timeout=timeout)
    finally:
        conn.close()


def push_tree(c: PluginCluster, src: Path, monkeypatch: pytest.MonkeyPatch,
              home: Path | None = None, **kwargs: object) -> PushResult:
    """`rtenv push` of `src` to the cluster once every node announced the plugin (its home:
    `home`, else beside `src`)."""
    monkeypatch.setenv("RTENV_HOME", str(home or src.parent / "home"))
    wait_ready(c)
    return push(src, address=c.head.address, env={}, base_dir=src.parent, **kwargs)  # type: ignore[arg-type]


def run(c: PluginCluster, env: dict, body: str, timeout: float = 240) -> object:
    code = LISTING + f"env = {json.dumps(env)!s}\n" + textwrap.dedent(body)
    proc = c.head.run_driver(code, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:] + c.setup_logs()[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def on_both(c: PluginCluster, env: dict, write: str | None = None) -> list[dict]:
    nodes = [c.head_node_id, c.worker.node_id]
    return run(c, env, f'''
        refs = [look.options(runtime_env=env, scheduling_strategy=On(n, soft=False))
                .remote({write!r}) for n in {nodes!r}]
        print(json.dumps(ray.get(refs)))
    ''')  # type: ignore[return-value]


@pytest.fixture(scope="module")
def tree_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tree(tmp_path_factory.mktemp("trees"))


def test_push_takes_the_tree_path_and_both_nodes_see_what_ray_would_unpack(
        plugin_cluster: PluginCluster, tree_src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = plugin_cluster
    pushed = push_tree(c, tree_src, monkeypatch)
    assert pushed.path == "tree", pushed.notes
    env = pushed.runtime_env
    assert set(env) == {"rtenv", "_nsight"}, env  # the guard: see the no-plugin test
    assert env["rtenv"]["working_dir"].startswith("rtenv-tree://")
    zipped = push(tree_src, address=c.head.address, env={}, base_dir=tree_src.parent, via="zip")
    assert zipped.path == "zip"
    assert zipped.runtime_env["working_dir"].startswith("gcs://")
    ours = on_both(c, env)
    ray_own = on_both(c, zipped.runtime_env)
    for got, want in zip(ours, ray_own, strict=True):
        assert got["cwd_files"] == want["cwd_files"]
        assert got["helper"] == want["helper"] == "helper v1"
    assert ours[0]["cwd_files"]["run.sh"][0] == "0o755"
    assert "empty/" in ours[0]["cwd_files"]
    assert "debug.log" not in ours[0]["cwd_files"]
    assert {o["node"] for o in ours} == {c.head_node_id, c.worker.node_id}


def node_tree(c: PluginCluster, which: str, uri: str) -> Path:
    home = c.head_home if which == "head" else c.worker_home
    node = c.head_node_id if which == "head" else c.worker.node_id
    return home / "store" / "trees" / "t" / node / uri.removeprefix("rtenv-tree://")


def sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def test_a_one_file_edit_sends_that_file_and_both_nodes_see_it(
        plugin_cluster: PluginCluster, tree_src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = plugin_cluster
    monkeypatch.setenv("RTENV_HOME", str(tree_src.parent / "home"))
    wait_ready(c)
    push(tree_src, address=c.head.address, env={}, base_dir=tree_src.parent)
    edited = tree_src.parent / "wd" / "pkg" / "sub" / "data.txt"
    edited.write_text("edited\n" * 1000)
    again = push(tree_src, address=c.head.address, env={}, base_dir=tree_src.parent)
    wd = next(p for p in again.packages if p.field == "working_dir")
    helper = next(p for p in again.packages if p.field != "working_dir")
    assert wd.tree is not None
    assert helper.tree is not None
    assert wd.tree["files_sent"] == 1, wd.tree
    assert wd.tree["delta"], wd.tree
    # the file's bytes, its pack's index and a manifest of changes: not the tree
    assert wd.tree["bytes_sent"] < edited.stat().st_size + 1500, wd.tree
    assert helper.tree["bytes_sent"] == 0  # unchanged: nothing sent
    seen = on_both(c, again.runtime_env)
    want = sha(edited.read_bytes())[:16]
    assert [s["cwd_files"]["pkg/sub/data.txt"][1] for s in seen] == [want, want]
    # and the next edit's tree is the last one's, patched (it was released: a spare)
    until(lambda: not node_tree(c, "worker", again.runtime_env["rtenv"]["working_dir"])
          .exists(), what="the edited tree to be released")
    edited.write_text("edited twice\n")
    third = push(tree_src, address=c.head.address, env={}, base_dir=tree_src.parent)
    uri = third.runtime_env["rtenv"]["working_dir"]
    seen = on_both(c, third.runtime_env)
    assert [s["cwd_files"]["pkg/sub/data.txt"][1] for s in seen] == \
        [sha(b"edited twice\n")[:16]] * 2
    assert seen[0]["cwd_files"] == first_listing(seen[0]["cwd_files"], tree_src)
    assert f"rtenv: tree {uri} materialized by patching a spare tree" in c.node_logs("worker")


def first_listing(listing: dict, tree_src: Path) -> dict:
    """What a fresh tree of `tree_src`'s working_dir lists (the local files, as Ray packs them)."""
    from rtenv_cli.core.packaging.walk import scan_package

    scan = scan_package(tree_src.parent / "wd", kind="working_dir", env={})
    want = {}
    for e in scan.entries:
        if e.special or not e.in_zip or e.relpath == ".":
            continue
        if e.is_dir:
            want[e.relpath + "/"] = listing.get(e.relpath + "/")
        else:
            want[e.relpath] = [oct(e.mode & 0o7777), sha(Path(e.fspath).read_bytes())[:16], False]
    return want


def test_a_worker_writing_its_working_dir_changes_neither_the_store_nor_the_next_job(
        plugin_cluster: PluginCluster, tree_src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = plugin_cluster
    pushed = push_tree(c, tree_src, monkeypatch)
    target = tree_src.parent / "wd" / "main.py"
    want = sha(target.read_bytes())[:16]
    first = on_both(c, pushed.runtime_env, write="main.py")
    assert all(f["cwd_files"]["main.py"][1] == sha(b"changed by a worker")[:16] for f in first)
    objects = c.head_home / "store" / "trees" / "objects"
    for obj in objects.glob("*/*"):
        assert sha(obj.read_bytes()) == obj.name, obj
    uri = pushed.runtime_env["rtenv"]["working_dir"]
    # the job ended: once its workers are gone, the plugin drops the tree and its reference
    until(lambda: not node_tree(c, "head", uri).exists()
          and not node_tree(c, "worker", uri).exists(), what="the trees to be released")
    second = on_both(c, pushed.runtime_env)
    assert [s["cwd_files"]["main.py"][1] for s in second] == [want, want]


def test_ray_job_submit_entrypoint_runs_in_the_tree_with_its_requirements(
        plugin_cluster: PluginCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    from tests.support.ray_head import ray_executable

    c = plugin_cluster
    monkeypatch.setenv("RTENV_HOME", str(tmp_path / "home"))
    wd = tmp_path / "job"
    wd.mkdir()
    (wd / "main.py").write_text("import os, six\nprint('first line', six.__version__, "
                                "os.path.basename(os.getcwd()) == os.environ['TREE'])\n")
    (wd / "requirements.txt").write_text("six==1.16.0\n")
    (tmp_path / "env.yaml").write_text(
        "working_dir: job\nrtenv:\n  pip: ${RAY_RUNTIME_ENV_CREATE_WORKING_DIR}/requirements.txt\n")
    wait_ready(c)
    pushed = push(tmp_path / "env.yaml", address=c.head.address, env={}, base_dir=tmp_path)
    env = pushed.runtime_env
    assert pushed.path == "tree"
    assert "working_dir" not in env
    env["env_vars"] = {"TREE": env["rtenv"]["working_dir"].removeprefix("rtenv-tree://")}
    proc = subprocess.run(
        [ray_executable(), "job", "submit", "--address", c.head.dashboard_url,
         "--runtime-env-json", json.dumps(env), "--", "python", "main.py"],
        env={**{k: v for k, v in os.environ.items() if not k.startswith("RAY_")},
             **c.head.client_env()}, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:] + c.setup_logs()[-3000:]
    assert "first line 1.16.0 True" in proc.stdout


def test_a_head_without_the_plugin_gets_the_zip_path_and_fails_a_tree_job_loudly(
        plugin_cluster: PluginCluster, tree_src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    from tests.support.ray_head import RayHead, ray_executable

    c = plugin_cluster
    tree_env = push_tree(c, tree_src, monkeypatch)
    assert tree_env.path == "tree"
    before_ms = time.time() * 1000
    bare = RayHead().start()
    try:
        conn = RayKV.connect(bare.address, env={})
        until(conn.alive_nodes, what="the bare head's node to register")
        # the node's start time (GcsNodeInfo.start_time_ms), by which a push waits for a node
        # still starting (cluster.settled): the push below came within its STARTING_S
        (started,) = (s for _address, s in conn.alive_node_starts().values())
        assert before_ms - 1000 <= started <= time.time() * 1000
        conn.close()
        zipped = push(tree_src, address=bare.address, env={}, base_dir=tree_src.parent)
        assert zipped.path == "zip"
        assert any("zip path: 1 of 1 nodes do not load rtenv's plugin" in n
                   for n in zipped.notes), zipped.notes
        assert zipped.runtime_env["working_dir"].startswith("gcs://_ray_pkg_")
        # through its dashboard: the same decision, the same note, Ray's same zip
        dash = push(tree_src, address=bare.dashboard_url, env={}, base_dir=tree_src.parent)
        assert dash.path == "zip"
        assert any("zip path: 1 of 1 nodes do not load rtenv's plugin" in n
                   for n in dash.notes), dash.notes
        assert dash.runtime_env == zipped.runtime_env
        proc = bare.run_driver(f"""
import ray
ray.init(log_to_driver=False)
@ray.remote
def f():
    return "ran in the base environment"
try:
    print(ray.get(f.options(runtime_env={json.dumps(tree_env.runtime_env)}).remote()))
except Exception as exc:
    print("FAILED", exc)
""", timeout=240)
        assert "FAILED" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "needs rtenv's Ray plugin" in proc.stdout
        assert re.search(r"\[Node [0-9.]+\] ", proc.stdout)  # Ray names the node
        job = subprocess.run(
            [ray_executable(), "job", "submit", "--address", bare.dashboard_url,
             "--runtime-env-json", json.dumps(tree_env.runtime_env), "--",
             "echo", "ran in the base environment"],
            env={**{k: v for k, v in os.environ.items() if not k.startswith("RAY_")},
                 **bare.client_env()}, capture_output=True, text=True, timeout=300, check=False)
        assert job.returncode != 0
        assert "needs rtenv's Ray plugin" in job.stdout + job.stderr
        assert "ran in the base environment" not in job.stdout
    finally:
        bare.stop()


def test_ten_runtime_envs_on_one_new_manifest_materialize_it_once_per_node(
        plugin_cluster: PluginCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = plugin_cluster
    monkeypatch.setenv("RTENV_HOME", str(tmp_path / "home"))
    (tmp_path / "wd").mkdir()
    (tmp_path / "wd" / "one.txt").write_text(f"{time.time_ns()}\n")  # a manifest never seen
    (tmp_path / "helper").mkdir()
    (tmp_path / "helper" / "__init__.py").write_text("NAME = 'ten'\n")
    (tmp_path / "env.yaml").write_text("working_dir: wd\npy_modules: [helper]\n")
    wait_ready(c)
    pushed = push(tmp_path / "env.yaml", address=c.head.address, env={}, base_dir=tmp_path)
    base = pushed.runtime_env
    envs = [{**base, "env_vars": {"I": str(i)}} for i in range(10)]  # 10 runtime_envs
    nodes = [c.head_node_id, c.worker.node_id]
    out = run(c, {"envs": envs}, f'''
        nodes = {nodes!r}
        refs = [look.options(runtime_env=e, scheduling_strategy=On(nodes[i % 2], soft=False))
                .remote() for i, e in enumerate(env["envs"])]
        print(json.dumps([r["helper"] for r in ray.get(refs)]))
    ''')
    assert out == ["ten"] * 10
    uri = base["rtenv"]["working_dir"]
    for which in ("head", "worker"):
        made = re.findall(rf"rtenv: tree {uri} materialized", c.node_logs(which))
        assert len(made) == 1, (which, c.node_logs(which)[-3000:])


def test_a_killed_pusher_leaves_no_manifest_naming_missing_contents(
        plugin_cluster: PluginCluster, tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    c = plugin_cluster
    big = tmp_path / "big"
    big.mkdir()
    for i in range(40):
        (big / f"f{i}.bin").write_bytes(os.urandom(3 << 20))
    conn = kv(c)
    wait_ready(c)
    before = set(conn.keys("x:"))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RAY_")},
           "RTENV_HOME": str(tmp_path / "home"), "PYTHONPATH": str(Path.cwd())}
    proc = subprocess.Popen([sys.executable, "-m", "rtenv_cli", "push", str(big), "--address",
                             c.head.address, "--via", "tree"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        until(lambda: set(conn.keys("x:")) - before or proc.poll() is not None,
              what="the first pack")
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the push ended before its first pack landed"
    packs = {k.removeprefix("x:") for k in conn.keys("x:")}
    contents = {k.removeprefix("p:") for k in conn.keys("p:")}
    assert packs <= contents  # an index only after its pack
    from rtenv_cli.core.trees.manifest import decode

    for key in conn.keys("m:"):
        raw = conn.get(key)
        assert raw is not None
        assert set(decode(raw)["packs"]) <= packs, key
    again = subprocess.run([sys.executable, "-m", "rtenv_cli", "push", str(big), "--address",
                            c.head.address, "--via", "tree", "--format", "json"], env=env,
                           capture_output=True, text=True, timeout=300, check=True)
    tree = json.loads(again.stdout)["packages"][0]["tree"]
    assert tree["files_sent"] < 40  # what the killed push sent is reused
    conn.close()


def test_gc_returns_the_kv_to_its_start_once_no_worker_holds_a_tree(
        plugin_cluster: PluginCluster, tree_src: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rtenv_cli.core.trees.gc import collect, held_manifests
    from rtenv_cli.core.trees.manifest import decode

    c = plugin_cluster
    pushed = push_tree(c, tree_src, monkeypatch)
    ours = {u.removeprefix("rtenv-tree://") for u in
            [pushed.runtime_env["rtenv"]["working_dir"],
             *pushed.runtime_env["rtenv"]["py_modules"]]}
    on_both(c, pushed.runtime_env)
    conn = kv(c)
    kept = collect(conn)  # within the grace period: everything stays
    assert not kept.manifests_removed
    assert not kept.packs_removed
    # the driver exited: once its workers are gone, no node holds its trees
    until(lambda: not ours & {k.split(":")[1] for k in conn.keys("r:")},
          what="the nodes to drop their references")
    done = collect(conn, grace_s=0)
    assert ours <= set(done.manifests_removed)
    assert done.packs_removed
    # what is left: the nodes' announcements, and what a node still holds (Ray's raylet can keep
    # a runtime_env reference after its workers exit: see trees/gc.py)
    held = held_manifests(conn, set(conn.alive_nodes()))
    assert {k.removeprefix("m:") for k in conn.keys("m:")} == set(held)
    packs = {p for m in held for p in decode(conn.get(f"m:{m}") or b"")["packs"]}
    assert {k.removeprefix("p:") for k in conn.keys("p:")} <= packs | {
        p for m in held for p in _chain_packs(conn, m)}
    assert {k.split(":", 1)[0] for k in conn.keys("")} <= {"n", "r", "m", "t", "p", "x"}
    if not held:
        assert {k.split(":", 1)[0] for k in conn.keys("")} <= {"n"}, conn.keys("")
    conn.close()


def _chain_packs(conn: RayKV, ident: str) -> set[str]:
    from rtenv_cli.core.trees.manifest import decode

    out: set[str] = set()
    cur: str | None = ident
    while cur:
        doc = decode(conn.get(f"m:{cur}") or b"")
        out |= set(doc["packs"])
        cur = doc.get("base")
    return out


def watched(c: PluginCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
            ) -> tuple[Path, object]:
    """(make_tree's runtime_env under `tmp_path`, the cluster's GCS as a watch's target), once
    every node announced the plugin."""
    from rtenv_cli.core.transport.resolve import resolve_target

    src = make_tree(tmp_path)
    monkeypatch.setenv("RTENV_HOME", str(tmp_path / "home"))
    wait_ready(c)
    return src, resolve_target(None, c.head.address, env={})


def test_push_watch_publishes_each_save_as_a_tree_delta_a_fresh_push_agrees_with(
        plugin_cluster: PluginCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.core.watch.helpers import Running

    c = plugin_cluster
    src, target = watched(c, tmp_path, monkeypatch)
    wd = tmp_path / "wd"
    with Running(src, target, base_dir=tmp_path, reconcile_s=3600) as w:
        first = w.events[0]
        assert first.uri.startswith("rtenv-tree://"), (first.uri, w.notices)
        assert set(first.runtime_env) == {"rtenv", "_nsight"}, first.runtime_env
        # a JetBrains safe-write: the new text written beside, then renamed over the file
        (wd / "main.py___jb_tmp___").write_text("print('edited by rename')\n")
        os.replace(wd / "main.py___jb_tmp___", wd / "main.py")
        saved = w.next_event(1, timeout=60)
        assert "main.py" in saved.modified, saved
        assert saved.uri.startswith("rtenv-tree://")
        # a delta: the one file's bytes and a manifest of changes, not the tree
        assert 0 < saved.bytes_sent < 1500, saved.bytes_sent
        (wd / "pkg" / "sub" / "data.txt").unlink()
        (wd / "new.py").write_text("NEW = 1\n")
        last = until(lambda: next((e for e in w.events if "new.py" in e.added), None),
                     what="the save that added new.py")
    assert not w.notices, w.notices  # the tree path: no "zip path" note
    assert w.events[-1] is last, w.events
    fresh = push(src, address=c.head.address, env={}, base_dir=tmp_path, via="tree")
    assert last.runtime_env == fresh.runtime_env, (last.runtime_env, fresh.runtime_env)
    assert last.uri == fresh.runtime_env["rtenv"]["working_dir"]
    seen = on_both(c, dict(last.runtime_env))
    for s in seen:
        files = s["cwd_files"]
        assert files["main.py"][1] == sha(b"print('edited by rename')\n")[:16]
        assert "new.py" in files
        assert "pkg/sub/data.txt" not in files


def _agent_pid(node: object) -> int:
    """The runtime_env agent of a node we started: a child of its raylet, in its process
    group (`ray start --block` leads the group)."""
    from tests.support.ray_head import _group_members

    pgid = node.proc.pid  # type: ignore[attr-defined]
    cmds = {}
    for pid in _group_members(pgid):
        try:
            cmds[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
    raylets = {p for p, cmd in cmds.items() if cmd[0].endswith(b"/raylet")}
    for pid, cmd in cmds.items():
        # it renames itself (setproctitle) once started
        if cmd[0] == b"ray::RuntimeEnvAgent" or any(
                a.endswith(b"runtime_env/agent/main.py") for a in cmd):
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            assert ppid in raylets, (pid, ppid, raylets)
            return pid
    raise AssertionError(f"no runtime_env agent in process group {pgid}: "
                         f"{[c[0] for c in cmds.values()]}")


def test_a_node_agent_killed_mid_materialization_leaves_no_partial_tree_in_use(
        plugin_cluster: PluginCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILL of a node's runtime_env agent (the process that materializes trees, in a thread)
    while it builds a tree: the build is held at one content, which is a named pipe in the
    node's store until the agent is killed (a condition, not a sleep). Killing the agent takes
    its raylet down (Ray 2.60), so the node is one this test starts, then starts again on the
    same store: its next job sees the whole, correct tree, and what the killed build left is
    removed, never used."""
    import signal
    import subprocess
    import sys

    from tests.core.rayplugin.conftest import plugin_env
    from tests.support.ray_head import RayWorkerNode

    c = plugin_cluster
    src = tmp_path / "src"
    (src / "wd" / "pkg").mkdir(parents=True)
    for i in range(20):
        (src / "wd" / "pkg" / f"m{i:02}.py").write_text(f"N = {i}  # {time.time_ns()}\n")
    (src / "wd" / "zz_last.txt").write_text(f"the content the build waits for {time.time_ns()}\n")
    (src / "helper").mkdir()
    (src / "helper" / "__init__.py").write_text("NAME = 'killed agent'\n")
    (src / "runtime_env.yaml").write_text("working_dir: wd\npy_modules: [helper]\n")
    home = tmp_path / "node-home"
    trees = home / "store" / "trees"
    node = RayWorkerNode(c.head, env=plugin_env(home)).start()
    driver = None
    try:
        pushed = push_tree(c, src / "runtime_env.yaml", monkeypatch)
        assert pushed.path == "tree", pushed.notes
        env = pushed.runtime_env
        ident = env["rtenv"]["working_dir"].removeprefix("rtenv-tree://")
        digest = sha((src / "wd" / "zz_last.txt").read_bytes())
        gate = trees / "objects" / digest[:2] / digest  # the node "has" it: never fetched
        gate.parent.mkdir(parents=True)
        os.mkfifo(gate)
        code = LISTING + f"env = {json.dumps(env)}\n" + textwrap.dedent(f'''
            ref = look.options(runtime_env=env, scheduling_strategy=On({node.node_id!r},
                               soft=False)).remote()
            print(ray.get(ref))
        ''')
        denv = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        denv.update({**c.head.client_env(), "RAY_ADDRESS": c.head.address})
        out = (tmp_path / "driver.log").open("wb")
        driver = subprocess.Popen([sys.executable, "-c", code], env=denv, stdout=out,
                                  stderr=subprocess.STDOUT)
        building = trees / "t" / node.node_id

        def logs() -> str:
            setup = (node.session_dir() / "logs").glob("runtime_env_setup-*.log")
            return ((tmp_path / "driver.log").read_text()[-3000:] +
                    "\n".join(p.read_text() for p in setup)[-3000:])

        def partial() -> list[Path]:
            if driver is not None and driver.poll() is not None:
                raise AssertionError(f"the driver ended before the build began:\n{logs()}")
            return list(building.glob(".tmp-*"))

        until(partial, what=lambda: f"the node's build to begin\n{logs()}")
        agent = _agent_pid(node)
        os.kill(agent, signal.SIGKILL)
        conn = kv(c)
        try:
            until(lambda: node.node_id not in conn.alive_nodes(), what="the node to go down")
        finally:
            conn.close()
        left = partial()
        assert left, "the build was not in progress when its agent was killed"
        assert not (building / ident).exists()  # never named as a ready tree
        assert not any(p.name == ident for p in trees.glob("t/*/*"))
        driver.kill()
        driver.wait()
        node.stop()
        gate.unlink()  # the test's stand-in for a slow content, not what a kill leaves
        node = RayWorkerNode(c.head, env=plugin_env(home)).start()
        wait_ready(c)
        seen = run(c, env, f'''
            refs = [look.options(runtime_env=env, scheduling_strategy=On(n, soft=False))
                    .remote() for n in {[c.head_node_id, node.node_id]!r}]
            print(json.dumps(ray.get(refs)))
        ''')
        assert seen[1]["node"] == node.node_id
        assert seen[1]["cwd_files"] == seen[0]["cwd_files"]  # the whole tree, as the head's
        assert seen[1]["cwd_files"]["zz_last.txt"][1] == digest[:16]
        assert seen[1]["helper"] == "killed agent"
        for obj in (trees / "objects").glob("*/*"):
            assert sha(obj.read_bytes()) == obj.name, obj
        # what the killed build left goes (the restarted agent's trees remove it, in a thread)
        until(lambda: not any(p.exists() for p in left), what="the partial tree to be removed")
        until(lambda: not any((trees / "trash").iterdir()), what="the trash to be emptied")
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
            driver.wait()
        node.stop()


def test_push_watch_moves_to_the_zip_path_when_a_node_without_the_plugin_joins_and_back(
        plugin_cluster: PluginCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node without rtenv's plugin joins while `push --watch` runs on the tree path: the watch
    says why, as `rtenv push` does, and publishes on the zip path at once (a job on that node
    then runs with the working_dir, and so do the next saves); when the node leaves, back to the
    tree path."""
    from rtenv_cli.core.watch.session import PushEvent
    from tests.core.watch.helpers import Running
    from tests.core.watch.helpers import wait_for as wait_until
    from tests.support.ray_head import RayWorkerNode

    c = plugin_cluster
    src, target = watched(c, tmp_path, monkeypatch)
    wd = tmp_path / "wd"

    def moved(n: int) -> PushEvent:
        """The `n`th push the cluster's nodes moved to another path."""
        return wait_until(lambda: next(iter([e for e in w.events if e.trigger == "nodes"][n:]),
                                       None), timeout=180)

    with Running(src, target, base_dir=tmp_path, reconcile_s=3600) as w:
        assert w.events[0].uri.startswith("rtenv-tree://"), (w.events[0], w.notices)
        bare = RayWorkerNode(c.head)  # no RAY_RUNTIME_ENV_PLUGINS: Ray's agent alone
        try:
            bare.start()
            zipped = moved(0)
            assert zipped.uri.startswith("gcs://_ray_pkg_"), zipped
            assert zipped.runtime_env["working_dir"] == zipped.uri
            assert "rtenv" not in zipped.runtime_env
            assert "_nsight" not in zipped.runtime_env
            why = [m for k, m, _h in w.notices if k == "note"]
            assert len(why) == 1, w.notices
            assert why[0].startswith("zip path: 1 of 3 nodes do not load rtenv's plugin: "
                                     f"{bare.node_id[:12]}"), why
            (wd / "main.py").write_text("print('edited on the zip path')\n")
            saved = wait_until(lambda: next((e for e in w.events if "main.py" in e.modified),
                                            None), timeout=60)
            assert saved.uri.startswith("gcs://_ray_pkg_"), saved
            seen = run(c, dict(saved.runtime_env), f'''
                ref = look.options(runtime_env=env, scheduling_strategy=On({bare.node_id!r},
                                   soft=False)).remote()
                print(json.dumps(ray.get(ref)))
            ''')
            assert seen["node"] == bare.node_id  # type: ignore[index]
            assert seen["cwd_files"]["main.py"][1] == \
                sha(b"print('edited on the zip path')\n")[:16]  # type: ignore[index]
            assert seen["helper"] == "helper v1"  # type: ignore[index]
        finally:
            bare.stop()
        back = moved(1)
        assert back.uri.startswith("rtenv-tree://"), back
        assert set(back.runtime_env) == {"rtenv", "_nsight"}, back.runtime_env
    notes = [m for k, m, _h in w.notices if k == "note"]
    assert notes[1:] == ["tree path: every node loads rtenv's plugin now"], w.notices
    assert not [n for n in w.notices if n[0] != "note"], w.notices
    fresh = push(src, address=c.head.address, env={}, base_dir=tmp_path, via="tree")
    assert back.runtime_env == fresh.runtime_env
