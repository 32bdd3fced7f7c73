"""cgroup limits: v1 for real on this machine (root, writable cpu+memory), v2 on a fake cgroupfs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rtenv_cli.core.store.cgroups import Cgroups, CgroupUnavailable, Limits

V1 = Path("/sys/fs/cgroup")


def _v1_writable() -> bool:
    import os

    return (V1 / "memory").is_dir() and os.access(V1 / "memory", os.W_OK)


needs_v1 = pytest.mark.skipif(not _v1_writable(), reason="needs writable cgroup v1 (root)")


@pytest.mark.cgroups
@needs_v1
def test_v1_limits_applied_read_back_and_removed() -> None:
    group = Cgroups(V1).create(Limits(cpus=0.5, memory_bytes=256 * 2**20))
    try:
        limits = group.read_limits()
        assert limits["cpu.cfs_quota_us"] == "50000"
        assert limits["cpu.cfs_period_us"] == "100000"
        assert limits["memory.limit_in_bytes"] == str(256 * 2**20)
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"],
                                preexec_fn=group.join)  # noqa: PLW1509 - the code under test
        pids = [d / "cgroup.procs" for d in group.dirs]
        assert all(str(proc.pid) in p.read_text().split() for p in pids)
        proc.wait(timeout=10)
    finally:
        group.remove()
    assert all(not d.exists() for d in group.dirs)


@pytest.mark.cgroups
@needs_v1
def test_v1_memory_hog_is_oom_killed() -> None:
    group = Cgroups(V1).create(Limits(memory_bytes=64 * 2**20))
    try:
        proc = subprocess.run(
            [sys.executable, "-c", "b = bytearray(400 * 2**20); b[::4096] = b'x' * len(b[::4096])"],
            preexec_fn=group.join, check=False, capture_output=True)
        assert proc.returncode == -9
        assert group.oom_killed()
    finally:
        group.remove()


def _fake_v2(tmp_path: Path, controllers: str = "cpu memory pids") -> Path:
    root = tmp_path / "cg2"
    (root / "user.slice/me").mkdir(parents=True)
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "user.slice/me/cgroup.subtree_control").write_text("")
    return root


def test_v2_writes_cpu_max_and_memory_max(tmp_path: Path) -> None:
    root = _fake_v2(tmp_path)
    cg = Cgroups(root, proc_cgroup="0::/user.slice/me\n")
    assert cg.version() == 2
    group = cg.create(Limits(cpus=1.5, memory_bytes=2**30), name="job")
    d = root / "user.slice/me/job"
    assert group.dirs == [d]
    assert (d / "cpu.max").read_text() == "150000 100000\n"
    assert (d / "memory.max").read_text() == f"{2**30}\n"
    assert set((root / "user.slice/me/cgroup.subtree_control").read_text().split()) == {
        "+cpu", "+memory"}
    (d / "cgroup.procs").write_text("")
    group.join(4242)
    assert (d / "cgroup.procs").read_text() == "4242\n"
    group.remove()
    assert not d.exists()


def test_v2_missing_controller_is_reported(tmp_path: Path) -> None:
    root = _fake_v2(tmp_path, controllers="pids")
    with pytest.raises(CgroupUnavailable, match="memory"):
        Cgroups(root, proc_cgroup="0::/user.slice/me\n").create(Limits(memory_bytes=1 << 20))


def test_no_cgroupfs_is_reported(tmp_path: Path) -> None:
    with pytest.raises(CgroupUnavailable, match="no cgroup filesystem"):
        Cgroups(tmp_path, proc_cgroup="").create(Limits(cpus=1))


def test_unwritable_is_reported(tmp_path: Path) -> None:
    root = tmp_path / "v1"
    (root / "memory").mkdir(parents=True)
    (root / "memory").chmod(0o500)
    try:
        if _v1_writable():  # root ignores permission bits: use a file where a dir must go
            (root / "memory").chmod(0o700)
            (root / "memory" / "blocked").write_text("")
            cg = Cgroups(root, proc_cgroup="4:memory:/blocked\n")
        else:
            cg = Cgroups(root, proc_cgroup="4:memory:/\n")
        with pytest.raises(CgroupUnavailable, match="cannot create a cgroup"):
            cg.create(Limits(memory_bytes=1 << 20))
    finally:
        (root / "memory").chmod(0o700)


def test_stale_cgroups_of_dead_owners_are_swept(tmp_path: Path) -> None:
    root = _fake_v2(tmp_path)
    parent = root / "user.slice/me"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = parent / f"rtenv-{dead.pid}-abc"
    stale.mkdir()
    (stale / "cgroup.procs").write_text("")
    busy = parent / f"rtenv-{dead.pid}-def"
    busy.mkdir()
    (busy / "cgroup.procs").write_text("12345\n")  # still holds a process: kept
    mine = parent / f"rtenv-{os.getpid()}-ghi"
    mine.mkdir()
    (mine / "cgroup.procs").write_text("")
    Cgroups(root, proc_cgroup="0::/user.slice/me\n").create(Limits(cpus=1), name="new")
    assert not stale.exists()
    assert busy.exists()
    assert mine.exists()
