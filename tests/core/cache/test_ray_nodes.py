"""Ray nodes' caches against a real Ray head, with a fabricated old session beside the live one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rtenv_cli.core.cache.ray_nodes import clean_ray_nodes, list_ray_nodes
from tests.support.cli import run_cli
from tests.support.ray_head import RayHead

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
