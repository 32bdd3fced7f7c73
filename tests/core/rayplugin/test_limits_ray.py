"""`rtenv.limits` on the real 2-node cluster (tests/core/rayplugin/conftest.py): each worker in its
own cgroup with the limits, OOM past the memory limit without harm to its neighbours, and no
cgroup left once the workers are gone."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from rtenv_cli.core.store.cgroups import Cgroups
from tests.core.rayplugin.conftest import PluginCluster
from tests.core.store.test_cgroups import needs_v1
from tests.support.wait import until

pytestmark = [pytest.mark.ray, pytest.mark.cgroups, needs_v1]

DRIVER = '''
import json, os, ray
ray.init(log_to_driver=False)

@ray.remote(num_cpus=0.1, max_retries=0)
def hog(mb):
    b = bytearray(mb * 2**20)
    b[::4096] = b"x" * len(b[::4096])
    return len(b)

@ray.remote(num_cpus=0.1)
def where():
    lines = dict(l.split(":", 2)[1:] for l in open("/proc/self/cgroup").read().splitlines())
    mem, cpu = lines["memory"], lines["cpu"]
    read = lambda c, p, f: open(f"/sys/fs/cgroup/{c}{p}/{f}").read().strip()
    try:
        import six
        six_version = six.__version__
    except ImportError:
        six_version = None
    return {"memory": mem, "cpu": cpu, "pid": os.getpid(), "six": six_version,
            "limit": read("memory", mem, "memory.limit_in_bytes"),
            "quota": read("cpu", cpu, "cpu.cfs_quota_us"),
            "period": read("cpu", cpu, "cpu.cfs_period_us")}

LIM = {"rtenv": {"limits": {"memory": "200MB", "cpus": 0.5}}}
out = {"where": ray.get(where.options(runtime_env=LIM).remote()),
       "with_pip": ray.get(where.options(runtime_env={"rtenv": {
           "pip": ["six==1.16.0"], "limits": {"memory": "300MB"}}}).remote()),
       "plain": ray.get(where.remote())}
try:
    ray.get(hog.options(runtime_env=LIM).remote(400))
    out["hog"] = "succeeded"
except Exception as exc:
    out["hog"] = type(exc).__name__ + ": " + str(exc)
out["small"] = ray.get(hog.options(runtime_env=LIM).remote(50))  # a new worker, same limits
out["neighbour"] = ray.get(hog.remote(400))  # no limits
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def limited(plugin_cluster: PluginCluster) -> dict[str, Any]:
    proc = plugin_cluster.head.run_driver(DRIVER, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_worker_with_limits_runs_in_its_own_cgroup_with_them(limited: dict[str, Any]) -> None:
    w = limited["where"]
    assert Path(w["memory"]).name.startswith(f"rtenv-{w['pid']}-")
    assert Path(w["cpu"]).name == Path(w["memory"]).name
    assert int(w["limit"]) == 200 * 10**6 // 4096 * 4096  # the kernel keeps whole pages
    assert (w["quota"], w["period"]) == ("50000", "100000")  # cpus 0.5
    assert not Path(limited["plain"]["memory"]).name.startswith("rtenv-")


def test_limits_with_pip_get_both_the_venv_and_the_cgroup(limited: dict[str, Any]) -> None:
    w = limited["with_pip"]
    assert w["six"] == "1.16.0"
    assert Path(w["memory"]).name.startswith(f"rtenv-{w['pid']}-")
    assert int(w["limit"]) == 300 * 10**6 // 4096 * 4096
    assert w["quota"] == "-1"  # no cpus limit


def test_a_task_past_its_memory_limit_fails_and_its_neighbours_do_not(
        limited: dict[str, Any], plugin_cluster: PluginCluster) -> None:
    assert limited["hog"].startswith(("WorkerCrashedError", "RayTaskError")), limited["hog"]
    assert "SIGKILL" in limited["hog"] or "OOM" in limited["hog"] or \
        "died" in limited["hog"], limited["hog"]
    assert limited["small"] == 50 * 2**20
    assert limited["neighbour"] == 400 * 2**20
    # where the user looks (issue 22, L9): the worker's stderr log, which Ray streams to the
    # driver, and the job's runtime_env_setup log; cgexec's watcher writes both
    said = "rtenv: this worker was OOM-killed: it went past its rtenv.limits memory of " \
        f"{200 * 10**6 / 2**20:g} MiB ({200 * 10**6} bytes"
    until(lambda: said in _worker_stderr(plugin_cluster), what="the OOM line in a worker's stderr")
    until(lambda: said in plugin_cluster.setup_logs(),
          what=lambda: "the OOM line in the setup log; lines on it in any log: "
          + _said_anywhere(plugin_cluster, ("OOM", "cgroup", "sweep"))
          + "\nrtenv cgroups: " + _rtenv_cgroups())


def _said_anywhere(cluster: PluginCluster, words: tuple[str, ...]) -> str:
    """Each log line of both nodes with one of WORDS, after its file's name (for a failure's
    message)."""
    return "\n".join(f"{p.name}: {line[:300]}"
                     for node in (cluster.head, cluster.worker)
                     for pattern in ("*.log", "*.err")
                     for p in sorted((node.session_dir() / "logs").glob(pattern))
                     for line in p.read_text(errors="replace").splitlines()
                     if any(w in line for w in words))[-6000:]


def _rtenv_cgroups() -> str:
    """Each rtenv cgroup left, with its processes and OOM count (for a failure's message)."""
    def read(p: Path) -> str:
        try:
            return p.read_text().replace("\n", " ")[:200]
        except OSError as exc:
            return repr(exc)

    return "\n".join(f"{g}: procs [{read(g / 'cgroup.procs')}] "
                     f"oom [{read(g / 'memory.oom_control')}]"
                     for parent in Cgroups().parents() for g in parent.glob("rtenv-*"))


def _worker_stderr(cluster: PluginCluster) -> str:
    """Every worker's stderr log (what Ray's log monitor sends to drivers) on both nodes."""
    return "\n".join(p.read_text(errors="replace")
                     for node in (cluster.head, cluster.worker)
                     for p in sorted((node.session_dir() / "logs").glob("**/worker-*.err")))


def test_no_rtenv_cgroup_is_left_after_the_workers_exit(
        limited: dict[str, Any], plugin_cluster: PluginCluster) -> None:
    names = {Path(limited[k]["memory"]).name for k in ("where", "with_pip")}
    logs = plugin_cluster.setup_logs()
    names |= {Path(m).name for m in re.findall(r"OOM-killed: .*cgroup (\S+?)\)", logs)}
    parents = Cgroups().parents()

    def left() -> set[str]:
        return {n for n in names for p in parents if (p / n).exists()}

    # the driver is gone: Ray ends its workers, the agent sweeps
    until(lambda: not left(),
          what=lambda: "the cgroups swept: " + textwrap.shorten(str(left()), 300))
