"""Ray nodes' caches against a real Ray head, with a fabricated old session beside the live one."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rtenv_cli.core.cache.ray_nodes import clean_ray_nodes, list_ray_nodes
from tests.support.cli import run_cli
from tests.support.ports import free_ports
from tests.support.ray_head import RayHead, ray_executable, worker_port_base
from tests.support.wait import until

OLD = "session_2020-01-01_00-00-00_000000_1"


def _fabricate_old_session(head: RayHead) -> Path:
    live = Path(head.session_dir())
    old = live.parent / OLD
    venv = old / "runtime_resources" / "pip" / ("a" * 40) / "virtualenv"
    venv.mkdir(parents=True, exist_ok=True)
    (venv / "big.bin").write_bytes(b"\1" * 300_000)
    wd = old / "runtime_resources" / "working_dir_files" / "_ray_pkg_0123456789abcdef"
    wd.mkdir(parents=True, exist_ok=True)
    (wd / "main.py").write_text("print(1)\n")
    (old / "logs").mkdir(exist_ok=True)
    (old / "logs" / "keep.log").write_text("logs are not caches")
    os.utime(old, (1_600_000_000, 1_600_000_000))
    return old


@pytest.mark.ray
@pytest.mark.slow
def test_ls_and_gc_against_a_real_head(ray_cluster: RayHead, tmp_path: Path) -> None:
    # a live-session entry, held by nothing once the driver exits
    (tmp_path / "wd").mkdir()
    (tmp_path / "wd" / "x.txt").write_text("x")
    driver = ray_cluster.run_driver(
        "import ray\n"
        f"ray.init(runtime_env={{'working_dir': {str(tmp_path / 'wd')!r}}})\n"
        "@ray.remote\ndef f():\n    return open('x.txt').read()\n"
        "print(ray.get(f.remote()))\n")
    assert driver.returncode == 0, driver.stderr[-2000:]
    old = _fabricate_old_session(ray_cluster)
    live_name = Path(ray_cluster.session_dir()).name

    listing = list_ray_nodes(ray_cluster.dashboard_url).to_dict()
    (node,) = listing["nodes"]
    sessions = {s["name"]: s for s in node["sessions"]}
    assert sessions[live_name]["live"] is True
    assert sessions[OLD]["live"] is False
    assert sessions[OLD]["size_bytes"] >= 300_000
    live_kinds = {e["kind"] for e in sessions[live_name]["entries"]}
    assert "working_dir" in live_kinds
    assert {e["state"] for e in sessions[OLD]["entries"]} == {"old session (orphaned)"}

    text = run_cli(["cache", "ls", "--address", ray_cluster.dashboard_url])
    assert text.exit_code == 0, text.stderr
    assert OLD in text.stdout
    assert "old session" in text.stdout

    dry = clean_ray_nodes(ray_cluster.dashboard_url, dry_run=True)
    assert [r["session"] for r in dry.removable] == [OLD]
    assert (old / "runtime_resources").exists()

    res = run_cli(["cache", "gc", "--address", ray_cluster.dashboard_url, "--yes"])
    assert res.exit_code == 0, res.stderr
    assert "RAY_RUNTIME_ENV_PIP_CACHE_SIZE_GB=10 (default)" in res.stdout
    assert not (old / "runtime_resources").exists()
    assert (old / "logs" / "keep.log").exists()  # only the caches go
    live_rr = Path(ray_cluster.session_dir()) / "runtime_resources" / "working_dir_files"
    assert any(live_rr.iterdir())  # the live session is never touched


def _alive(head: RayHead) -> int:
    with urllib.request.urlopen(f"{head.dashboard_url}/api/v0/nodes", timeout=10) as resp:  # noqa: S310 - the head's URL
        nodes = json.load(resp)["data"]["result"]["result"]
    return sum(1 for n in nodes if n["state"] == "ALIVE")


def _wait_alive(head: RayHead, count: int, proc: subprocess.Popen[bytes]) -> None:
    def alive() -> bool:
        if _alive(head) == count:
            return True
        assert proc.poll() is None, f"the node exited ({proc.returncode}) before {count} alive"
        return False

    until(alive, what=f"{count} alive nodes")


@contextlib.contextmanager
def second_node(head: RayHead) -> Iterator[None]:
    """A worker node on this machine joining `head` with the SAME temp dir (two raylets
    sharing it, as on a multi-GPU box running one raylet per GPU group); stopped by its
    process group, and waited out of the cluster so later tests see one node."""
    assert head.temp_dir is not None
    ports = free_ports(6)
    workers = worker_port_base(ports)
    args = [ray_executable(), "start", "--block", f"--address={head.address}",
            "--node-ip-address=127.0.0.1", "--disable-usage-stats", "--num-cpus=1",
            f"--object-manager-port={ports[0]}", f"--node-manager-port={ports[1]}",
            f"--dashboard-agent-listen-port={ports[2]}", f"--dashboard-agent-grpc-port={ports[3]}",
            f"--runtime-env-agent-port={ports[4]}", f"--metrics-export-port={ports[5]}",
            f"--min-worker-port={workers}", f"--max-worker-port={workers + 200}",
            f"--temp-dir={head.temp_dir / 'ray'}", "--object-store-memory=100000000"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "CUDA_VISIBLE"))}
    env.update({"HOME": str(head.home), "RAY_USAGE_STATS_ENABLED": "0",
                "RAY_AUTH_MODE": "disabled"})
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        _wait_alive(head, 2, proc)
        yield
    finally:
        # the raylet leaves the cluster on SIGTERM; `ray start --block` itself needs SIGKILL
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(AssertionError):  # the node exited first: kill its group
            _wait_alive(head, 1, proc)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.mark.ray
@pytest.mark.slow
def test_two_nodes_sharing_a_temp_dir(ray_cluster: RayHead) -> None:
    old = _fabricate_old_session(ray_cluster)
    # and a gc that was killed mid-delete: its tombstone must be listed and finished
    tomb = old / "runtime_resources.rtenv-deleting-99999"
    (tomb / "pip" / ("b" * 40)).mkdir(parents=True, exist_ok=True)
    (tomb / "pip" / ("b" * 40) / "left.bin").write_bytes(b"\2" * 200_000)
    with second_node(ray_cluster):
        listed = run_cli(["cache", "ls", "--address", ray_cluster.dashboard_url, "-f", "json"])
        assert listed.exit_code == 0, listed.stderr
        data = listed.json
        assert len(data["nodes"]) == 2
        reports = [s for n in data["nodes"] for s in n["sessions"] if s["name"] == OLD]
        assert len(reports) == 2  # reported by each node where it lives ...
        assert sorted(reports[0]["nodes"]) == sorted(n["node_id"] for n in data["nodes"])
        size = reports[0]["size_bytes"]
        assert size >= 500_000  # the tombstone's bytes count, it is not 0 B
        assert data["totals"]["old_sessions_bytes"] == size  # ... and counted once
        assert [t["path"] for t in reports[0]["deleting"]] == [str(tomb)]

        res = run_cli(["cache", "gc", "--address", ray_cluster.address, "--yes", "-f", "json"])
        assert res.exit_code == 0, res.stdout + res.stderr
        assert res.json["errors"] == []
        assert [r["session"] for r in res.json["removable"]] == [OLD]
        assert res.json["freed_bytes"] == size
        assert sorted(p.name for p in old.iterdir()) == ["logs"]
