"""rtenv's Ray plugin on a real 2-node Ray 2.60.0 cluster (tests/core/rayplugin/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rtenv_cli.core.rayplugin.nodes import plugin_status
from rtenv_cli.core.store.index import Entry
from rtenv_cli.core.store.store import Store
from tests.core.rayplugin.conftest import PluginCluster, plugin_env
from tests.support.ray_head import RayHead, RayWorkerNode, ray_executable
from tests.support.wait import until

pytestmark = pytest.mark.ray

PROBE = '''
import json, os, sys, time, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On
ray.init(log_to_driver=False)
@ray.remote(num_cpus=0.1)
def probe(sleep=0.0):
    import six, ray, sys, os, time
    time.sleep(sleep)
    return {"six": six.__version__, "ray": ray.__version__, "python": sys.executable,
            "venv": os.environ.get("VIRTUAL_ENV"), "node": ray.get_runtime_context().get_node_id()}
'''


def driver(cluster: PluginCluster, body: str, timeout: float = 240) -> list[dict]:
    proc = cluster.head.run_driver(PROBE + textwrap.dedent(body), timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def builds(cluster: PluginCluster, which: str, label: str) -> int:
    """Venvs of `label` in the node's store (a second build could not publish a second one,
    so the node's logs are counted too, below)."""
    return sum(1 for e in Store(home(cluster, which) / "store").index.all()
               if e.kind == "pip" and e.label == label)


def home(cluster: PluginCluster, which: str) -> Path:
    return cluster.head_home if which == "head" else cluster.worker_home


def test_tasks_on_both_nodes_import_the_requested_six_and_the_nodes_ray(
        plugin_cluster: PluginCluster) -> None:
    c = plugin_cluster
    out = driver(c, f'''
        env = {{"rtenv": {{"pip": ["six==1.16.0"]}}}}
        refs = [probe.options(runtime_env=env, scheduling_strategy=On(n, soft=False)).remote()
                for n in {[c.head_node_id, c.worker.node_id]!r}]
        print(json.dumps(ray.get(refs)))
    ''')
    import ray

    assert [r["six"] for r in out] == ["1.16.0", "1.16.0"]  # the node's own six is 1.17.0
    assert {r["ray"] for r in out} == {ray.__version__}
    assert out[0]["python"].startswith(str(c.head_home / "store" / "entries"))
    assert out[1]["python"].startswith(str(c.worker_home / "store" / "entries"))
    assert out[0]["venv"]
    assert out[0]["python"].startswith(out[0]["venv"])  # activate ran


def test_ten_concurrent_tasks_give_one_build_per_node(plugin_cluster: PluginCluster) -> None:
    c = plugin_cluster
    out = driver(c, f'''
        env = {{"rtenv": {{"pip": ["six==1.15.0"]}}}}
        nodes = {[c.head_node_id, c.worker.node_id]!r}
        refs = [probe.options(runtime_env=env,
                              scheduling_strategy=On(nodes[i % 2], soft=False)).remote(1.0)
                for i in range(10)]
        print(json.dumps(ray.get(refs)))
    ''')
    assert {r["six"] for r in out} == {"1.15.0"}
    assert len({r["node"] for r in out}) == 2  # both nodes ran tasks
    for which in ("head", "worker"):
        assert builds(c, which, "six==1.15.0") == 1
        logs = c.node_logs(which)
        key = next(e.key for e in Store(home(c, which) / "store").index.all()
                   if e.label == "six==1.15.0")
        assert logs.count(f"rtenv: built pip {key} ") == 1, logs[-3000:]


def test_job_submit_driver_and_its_tasks_get_the_env(plugin_cluster: PluginCluster) -> None:
    c = plugin_cluster
    script = ("import six, ray, sys; ray.init(); "
              "f = ray.remote(lambda: __import__('six').__version__); "
              "print('DRIVER', six.__version__, ray.__version__, sys.executable); "
              "print('TASK', ray.get(f.remote()))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(c.head.client_env())
    proc = subprocess.run(
        [ray_executable(), "job", "submit", "--address", c.head.dashboard_url,
         "--runtime-env-json", json.dumps({"rtenv": {"pip": ["six==1.16.0"]}}), "--",
         "python", "-c", script], env=env, capture_output=True, text=True, timeout=300,
        check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    import ray

    driver_line = next(ln for ln in out.splitlines() if ln.startswith("DRIVER"))
    assert driver_line.split()[1:3] == ["1.16.0", ray.__version__]
    assert "/store/entries/" in driver_line.split()[3]  # `python` resolved to the venv
    assert "TASK 1.16.0" in out


def test_failing_spec_is_a_runtime_env_setup_error_with_uvs_message(
        plugin_cluster: PluginCluster) -> None:
    proc = plugin_cluster.head.run_driver(PROBE + textwrap.dedent('''
        try:
            ray.get(probe.options(runtime_env={"rtenv": {"pip": ["rtenv-no-such-pkg==9.9"]}})
                    .remote())
        except Exception as exc:
            print(type(exc).__name__)
            print(str(exc))
    '''), timeout=240)
    assert proc.stdout.startswith("RuntimeEnvSetupError"), proc.stdout + proc.stderr[-2000:]
    assert "rtenv-no-such-pkg" in proc.stdout
    assert "No solution found" in proc.stdout
    assert "hint:" in proc.stdout


def test_a_spec_installing_ray_is_refused(plugin_cluster: PluginCluster) -> None:
    proc = plugin_cluster.head.run_driver(PROBE + textwrap.dedent('''
        try:
            ray.get(probe.options(runtime_env={"rtenv": {"pip": ["ray[default]==2.9.0"]}})
                    .remote())
        except Exception as exc:
            print(type(exc).__name__, str(exc))
    '''), timeout=240)
    assert "RuntimeEnvSetupError" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert "installs `ray[default]==2.9.0`" in proc.stdout


def _slow_package(root: Path, pids: Path) -> Path:
    pkg = root / "slowpkg"
    pkg.mkdir()
    (pkg / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "slowpkg"\nversion = "0.1"\n')
    (pkg / "setup.py").write_text(
        f"import os, time\nopen(os.path.join({str(pids)!r}, str(os.getpid())), 'w').close()\n"
        "time.sleep(120)\nfrom setuptools import setup\nsetup()\n")
    return pkg


def test_setup_timeout_leaves_no_process_and_no_partial_env(
        plugin_cluster: PluginCluster, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    pkg = _slow_package(tmp_path, pids)
    env = {"rtenv": {"pip": [f"slowpkg @ file://{pkg}"]}, "config": {"setup_timeout_seconds": 4}}
    proc = plugin_cluster.head.run_driver(PROBE + textwrap.dedent(f'''
        try:
            ray.get(probe.options(runtime_env={env!r}).remote())
        except Exception as exc:
            print(type(exc).__name__, str(exc)[:300])
    '''), timeout=240)
    assert "RuntimeEnvSetupError" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    started = [int(p.name) for p in pids.iterdir()]
    assert started, "the build never ran setup.py"
    for pid in started:  # the build backend (and uv around it) were killed
        assert not Path(f"/proc/{pid}").exists() or \
            Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    store = Store(plugin_cluster.head_home / "store")
    assert not [e for e in store.index.all() if "slowpkg" in e.label]
    assert not [p for p in (store.root / "tmp").iterdir() if p.name.startswith("pip")]
    assert not [p for p in (store.root / "entries").iterdir()
                if "slowpkg" in (p / "meta.json").read_text(errors="replace")]


def test_delete_uri_releases_the_reference_and_gc_then_removes_the_env(
        plugin_cluster: PluginCluster) -> None:
    c = plugin_cluster
    driver(c, f'''
        env = {{"rtenv": {{"pip": ["six==1.14.0"]}}}}
        r = probe.options(runtime_env=env, scheduling_strategy=On({c.head_node_id!r},
                          soft=False)).remote()
        print(json.dumps([ray.get(r)]))
    ''')
    store = Store(c.head_home / "store")

    def released() -> Entry | None:
        entry = next(e for e in store.index.all() if e.label == "six==1.14.0")
        return entry if entry.refs == 0 else None

    # the driver exited: its worker goes, Ray's ref too
    entry = until(released, what="delete_uri to release rtenv's reference")
    env = dict(os.environ, RTENV_HOME=str(c.head_home))
    proc = subprocess.run([sys.executable, "-m", "rtenv_cli", "cache", "gc", "--keep-storage",
                           "0", "--yes", "--kind", "pip", "--format", "json"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not [e for e in store.index.all() if e.label == "six==1.14.0"]
    assert not Path(c.head_home / "store" / entry.path).exists()


def test_a_new_ray_session_on_the_same_store_is_a_hit(plugin_cluster: PluginCluster) -> None:
    c = plugin_cluster
    driver(c, f'''
        env = {{"rtenv": {{"pip": ["six==1.16.0"]}}}}
        r = probe.options(runtime_env=env, scheduling_strategy=On({c.head_node_id!r},
                          soft=False)).remote()
        print(json.dumps([ray.get(r)]))
    ''')  # built on this store (or already)
    before = {e.key for e in Store(c.head_home / "store").index.all()}
    second = RayHead(env=plugin_env(c.head_home)).start()  # a new session, the same store
    try:
        proc = second.run_driver(PROBE + textwrap.dedent('''
            print(json.dumps(ray.get(probe.options(
                runtime_env={"rtenv": {"pip": ["six==1.16.0"]}}).remote())))
        '''), timeout=240)
        assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
        assert json.loads(proc.stdout.strip().splitlines()[-1])["six"] == "1.16.0"
        logs = "".join(p.read_text(errors="replace") for p in
                       (second.session_dir() / "logs").glob("runtime_env_setup-*.log"))
        assert "rtenv: cache hit pip" in logs
        assert "rtenv: built" not in logs
    finally:
        second.stop()
    assert {e.key for e in Store(c.head_home / "store").index.all()} == before


def test_plugin_status_reports_a_node_started_without_the_plugin(
        plugin_cluster: PluginCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    c = plugin_cluster
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("HOME", str(c.head.home))
    head_id = c.head_node_id
    bare = RayWorkerNode(c.head, num_cpus=1).start()  # no RAY_RUNTIME_ENV_PLUGINS
    try:
        status = plugin_status(c.head.address)
        by_id = {n["node_id"]: n for n in status.nodes}
        assert by_id[head_id]["loaded"]
        assert by_id[c.worker.node_id]["loaded"]
        assert not by_id[bare.node_id]["loaded"]
        assert "RAY_RUNTIME_ENV_PLUGINS is not set" in by_id[bare.node_id]["reason"]
        assert not status.ok
        assert [n["node_id"] for n in status.missing] == [bare.node_id]
        assert by_id[head_id]["source"] == "raylet"
        # the doctor reads the same probe and gives the same verdict per node
        from rtenv_cli.core.cache.ray_nodes import list_ray_nodes
        from rtenv_cli.core.doctor.plugin import plugin_status as doctor_plugin

        doctor = {n["node_id"]: doctor_plugin(n) for n in list_ray_nodes(c.head.address).nodes}
        assert {k: v.status.value for k, v in doctor.items()} == \
            {k: "ok" if n["loaded"] else "warn" for k, n in by_id.items()}
        assert doctor[bare.node_id].detail == f"not loaded: {by_id[bare.node_id]['reason']}"
    finally:
        bare.stop()
