"""Trees (content-addressed working_dir/py_modules in the cluster's KV) on the real 2-node
Ray 2.60.0 cluster with rtenv's plugin (tests/core/rayplugin/conftest.py)."""

from __future__ import annotations

import json
import os
import textwrap
import time
from pathlib import Path

import pytest

from rtenv_cli.api import push
from rtenv_cli.core.transport.ray_kv import RayKV
from rtenv_cli.core.trees.cluster import readiness
from tests.core.rayplugin.conftest import PluginCluster

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
    deadline = time.monotonic() + timeout
    try:
        while not readiness(conn).ok:
            assert time.monotonic() < deadline, readiness(conn).why_not()
            time.sleep(0.2)
    finally:
        conn.close()


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
    monkeypatch.setenv("RTENV_HOME", str(tree_src.parent / "home"))
    wait_ready(c)
    pushed = push(tree_src, address=c.head.address, env={}, base_dir=tree_src.parent)
    assert pushed.path == "tree", pushed.notes
    env = pushed.runtime_env
    assert set(env) == {"rtenv"}, env
    assert env["rtenv"]["working_dir"].startswith("rtenv-tree://")
    zipped = push(tree_src, address=c.head.address, env={}, base_dir=tree_src.parent, via="zip")
    assert zipped.path == "zip" and zipped.runtime_env["working_dir"].startswith("gcs://")
    ours = on_both(c, env)
    ray_own = on_both(c, zipped.runtime_env)
    for got, want in zip(ours, ray_own, strict=True):
        assert got["cwd_files"] == want["cwd_files"]
        assert got["helper"] == want["helper"] == "helper v1"
    assert ours[0]["cwd_files"]["run.sh"][0] == "0o755"
    assert "empty/" in ours[0]["cwd_files"] and "debug.log" not in ours[0]["cwd_files"]
    assert {o["node"] for o in ours} == {c.head_node_id, c.worker.node_id}
