"""The doctor's checks of this machine: the real machine where it can, NVML behind a fake module
(no NVIDIA driver here), a store with a budget from a real config file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rtenv_cli.core.doctor import local
from rtenv_cli.core.doctor.model import Status
from rtenv_cli.core.doctor.service import run_doctor
from tests.core.explain.test_nvml import GPUS, fake_pynvml
from tests.support.cli import run_cli

NAMES = ["rtenv", "python", "ray", "uv", "nvml", "cgroup v1", "cgroup v2", "inotify", "store",
         "disk"]


def _by_name(checks: object) -> dict[str, object]:
    return {c.name: c for c in checks}  # type: ignore[attr-defined]


def test_this_machine_reports_every_check_and_nothing_fails() -> None:
    report = run_doctor()
    checks = _by_name(report.checks)
    assert list(checks) == NAMES
    assert report.exit_code == 0, [c for c in report.checks if c.status is Status.FAIL]
    assert f"Python {'.'.join(map(str, sys.version_info[:3]))}" in checks["python"].detail
    from uv import find_uv_bin

    uv = subprocess.run([find_uv_bin(), "--version"], capture_output=True, text=True,
                        check=True).stdout.strip()
    assert checks["uv"].detail.startswith(uv)


def test_no_nvidia_driver_here_is_said_and_is_not_a_problem() -> None:
    if any(os.path.exists(p) for p in ("/dev/nvidiactl", "/proc/driver/nvidia")):
        pytest.fail("this test describes the CI machine, which has no NVIDIA driver")
    (check,) = local.check_gpus()
    assert check.status is Status.OK
    assert "no NVIDIA driver" in check.detail


def test_gpus_are_listed_with_index_uuid_and_mig() -> None:
    checks = local.check_gpus(fake_pynvml(GPUS))
    assert [c.name for c in checks] == ["nvml", "gpu 0", "gpu 1", "gpu 2"]
    assert checks[0].detail == "NVIDIA driver 550.54, 3 GPU(s)"
    assert "GPU-aaa" in checks[1].detail
    assert "MIG n/a" in checks[1].detail
    assert "GPU-bbb" in checks[2].detail
    assert "MIG on, 2 instance(s): MIG-111, MIG-222" in checks[2].detail


def _mounted(fstype: str) -> list[str]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[0] == fstype:
            out.append(left.split()[4])
    return out


def test_cgroups_on_this_machine_v1_writable_v2_not() -> None:
    """This machine: cgroup v1 controllers writable (root), v2 absent or without controllers."""
    v1 = Path("/sys/fs/cgroup/memory")
    if not (v1.is_dir() and os.access(v1, os.W_OK)):
        pytest.fail("this test describes the CI machine: writable cgroup v1")
    checks = _by_name(local.check_cgroups())
    assert checks["cgroup v1"].status is Status.OK
    assert checks["cgroup v1"].detail.startswith("writable at /sys/fs/cgroup")
    v2 = _mounted("cgroup2")
    if v2:
        controllers = (Path(v2[0]) / "cgroup.controllers").read_text().split()
        assert not {"cpu", "memory"} <= set(controllers)  # what makes v2 unusable here
        assert "not writable" in checks["cgroup v2"].detail
        assert "cpu, memory are not available" in checks["cgroup v2"].detail  # not a repr
    else:
        assert checks["cgroup v2"].detail.startswith("not mounted")
    assert checks["cgroup v2"].status is Status.OK  # rtenv uses v1 here: nothing is missing


def test_cgroup_roots_read_from_mountinfo() -> None:
    info = "\n".join([
        "30 25 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755",
        "31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw",
        "33 30 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct",
        "34 30 0:30 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory",
    ])
    assert local.cgroup_roots(info) == {1: Path("/sys/fs/cgroup"),
                                        2: Path("/sys/fs/cgroup/unified")}
    assert local.cgroup_roots("36 25 0:31 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw") == \
        {1: None, 2: Path("/sys/fs/cgroup")}


def test_unwritable_hierarchy_in_use_is_a_warning_with_the_fix(tmp_path: Path) -> None:
    fake = tmp_path / "cg"
    (fake / "memory").mkdir(parents=True)
    (fake / "cpu").mkdir()
    os.chmod(fake / "memory", 0o500)
    os.chmod(fake / "cpu", 0o500)
    try:
        if os.access(fake / "memory", os.W_OK):  # root ignores modes: make it a file instead
            os.chmod(fake / "memory", 0o700)
            os.rmdir(fake / "memory")
            (fake / "memory").write_text("")
        checks = _by_name(local.check_cgroups(fake, {1: fake, 2: None}))
    finally:
        for sub in ("memory", "cpu"):
            if (fake / sub).is_dir():
                os.chmod(fake / sub, 0o700)
    assert checks["cgroup v1"].status is Status.WARN
    assert "runs without limits" in checks["cgroup v1"].detail
    assert "Delegate=yes" in (checks["cgroup v1"].fix or "")
    assert checks["cgroup v2"].detail == "not mounted (rtenv uses v1 here)"


def test_inotify_counts_every_directory_of_the_working_dir(tmp_path: Path) -> None:
    wd = tmp_path / "wd"
    for sub in ("a/b", "c", ".git/objects"):  # ignored ones are watched too (watchdog)
        (wd / sub).mkdir(parents=True)
    (tmp_path / "runtime_env.yaml").write_text(f"working_dir: {wd}\n")
    sources, label = local.watched_sources(None, cwd=tmp_path)
    assert sources == [wd]
    assert label == "runtime_env.yaml"
    assert local.count_dirs(sources) == 6
    check = local.check_inotify(sources, label)
    assert check.status is Status.OK
    assert "`push --watch runtime_env.yaml` needs 6 (one per directory)" in check.detail
    limit = int(Path("/proc/sys/fs/inotify/max_user_watches").read_text())
    assert f"of {limit:,} watches free" in check.detail


def test_inotify_limit_below_the_tree_is_a_warning_naming_the_sysctl(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    limit = int(Path("/proc/sys/fs/inotify/max_user_watches").read_text())
    monkeypatch.setattr(local, "count_dirs", lambda _roots: limit + 1)
    check = local.check_inotify([tmp_path], "wd")
    assert check.status is Status.WARN
    assert "fall back to polling" in check.detail
    assert (check.fix or "").startswith("sudo sysctl fs.inotify.max_user_watches=")


def test_store_size_and_budget_from_the_config(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (store,) = [c for c in local.check_store() if c.name == "store"]
    assert store.detail.startswith("not created yet")
    assert "no budget" in store.detail
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("print('x')\n" * 2000)
    assert run_cli(["push", "src"]).exit_code == 0  # one package in the embedded store
    (tmp_path / "rtenv.toml").write_text('[agent]\nmax-size = "100B"\nmax-age = "7d"\n')
    (store,) = [c for c in local.check_store() if c.name == "store"]
    assert store.status is Status.WARN
    count = run_cli(["cache", "ls", "--format", "json"]).json["totals"]["count"]
    assert f"in {count} entries (uv cache included)" in store.detail
    assert "budget max-size 100 B, max-age 7d" in store.detail
    assert store.fix == "rtenv cache gc --keep-storage 100B"


def test_a_bad_budget_in_the_config_fails_naming_it(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rtenv.toml").write_text('[agent]\nmax-size = "lots"\n')
    (store,) = local.check_store()
    assert store.status is Status.FAIL
    assert "[agent] max-size" in store.detail


def test_uv_not_installed_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uv", None)  # what `import uv` meets without the package
    check = local.check_uv()
    assert check.status is Status.FAIL
    assert check.fix == "pip install uv (in rtenv's environment)"
