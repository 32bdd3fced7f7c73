"""`rtenv.limits` without a cluster: the field, the worker's prefix, cgexec on this machine's
cgroups, the agent's sweep."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rtenv_cli.core.errors import ValidationError
from rtenv_cli.core.rayplugin import schema
from rtenv_cli.core.rayplugin.cgexec import oom_message
from rtenv_cli.core.rayplugin.engine import Engine
from rtenv_cli.core.rayplugin.limits import Guard, command_prefix
from rtenv_cli.core.spec.limits import MIN_CPUS, LimitsField, parse_limits
from rtenv_cli.core.store.cgroups import Cgroups
from tests.core.store.test_cgroups import needs_v1
from tests.support.cli import run_cli
from tests.support.wait import until


def test_limits_parse_like_rtenv_run_memory() -> None:
    assert parse_limits({"memory": "4GB", "cpus": 2}) == LimitsField(4 * 10**9, 2.0)
    assert parse_limits({"cpus": MIN_CPUS}) == LimitsField(None, 0.1)
    assert parse_limits({"memory": "512Mi"}) == LimitsField(512 * 2**20, None)
    assert parse_limits({"cpus": "0.5"}) == LimitsField(None, 0.5)
    assert parse_limits({"memory": 2**30}).memory_bytes == 2**30


@pytest.mark.parametrize(("value", "match"), [
    ({"memroy": "4GB"}, "unknown key 'memroy'"),
    ({"memory": "lots"}, "cannot read size"),
    ({"memory": "256"}, "below the 1 MiB minimum"),
    ({"cpus": 0}, "not a positive number"),
    ({"cpus": 1e-9}, "under rtenv's floor of 0.1 CPU"),  # red team 2: it never started
    ({"cpus": 0.09}, "under rtenv's floor of 0.1 CPU"),
    ({"cpus": True}, "not a positive number"),
    ({}, "must be a mapping"),
    ({"memory": None}, "neither"),
])
def test_bad_limits_name_the_field(value: dict, match: str) -> None:
    with pytest.raises(ValidationError, match=match) as info:
        parse_limits(value)
    assert "runtime_env['rtenv']['limits']" in info.value.message
    assert info.value.hint


def test_limits_come_with_pip_or_alone_and_leave_the_uri_alone() -> None:
    both = schema.parse({"pip": ["six"], "limits": {"memory": "4GB"}})
    assert (both.kind, both.limits) == ("pip", LimitsField(4 * 10**9, None))
    alone = schema.parse({"limits": {"cpus": 1}})
    assert (alone.kind, alone.limits) == (None, LimitsField(None, 1.0))
    engine = Engine()
    assert engine.uris({"rtenv": {"limits": {"cpus": 1}}}) == []  # nothing built, no ref
    assert engine.uris({"rtenv": {"pip": ["six"], "limits": {"cpus": 1}}}) == \
        engine.uris({"rtenv": {"pip": ["six"]}})  # the same venv, whatever the limits
    with pytest.raises(ValidationError, match="both `rtenv` and `container`"):
        schema.parse({"limits": {"cpus": 1}}, {"container": {"image": "x"}})
    assert schema.parse({"limits": {"cpus": 1}}, {"pip": ["six"]}).limits  # Ray's pip builds


def test_prefix_passes_the_worker_pid_and_the_limits() -> None:
    words = command_prefix(LimitsField(200 * 10**6, 1.5))
    assert words[1:] == ["-m", "rtenv_cli.core.rayplugin.cgexec", "--pid", "$$", "--memory",
                         "200000000", "--cpus", "1.5", "&&"]


@pytest.mark.cgroups
@needs_v1
def test_cgexec_puts_the_shell_and_what_it_execs_in_a_cgroup_the_sweep_removes() -> None:
    """As Ray runs it: `bash -c "<prefix> exec <worker>"`; the worker reads its own cgroup."""
    prefix = " ".join(command_prefix(LimitsField(64 * 2**20, 0.5)))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3]))
    worker = "exec cat /proc/self/cgroup"
    out = subprocess.run(["bash", "-c", f"{prefix} {worker}"], capture_output=True, text=True,
                         env=env, check=True, timeout=60).stdout
    mem = next(ln.split(":", 2)[2] for ln in out.splitlines() if ln.split(":")[1] == "memory")
    name = Path(mem).name
    assert name.startswith("rtenv-")
    parents = Cgroups().parents()
    groups = [p / name for p in parents if (p / name).is_dir()]
    assert len(groups) == 2  # cpu and memory (v1)
    limits = {f: (g / f).read_text().strip() for g in groups
              for f in ("memory.limit_in_bytes", "cpu.cfs_quota_us") if (g / f).exists()}
    assert limits == {"memory.limit_in_bytes": str(64 * 2**20), "cpu.cfs_quota_us": "50000"}
    # the worker (bash's pid) has exited; its watcher (`-w<pid>` in the name) ends after it
    assert _swept(groups)



def test_the_floor_holds_for_validate_and_run(tmp_path: Path) -> None:
    env = tmp_path / "runtime_env.yaml"
    env.write_text("rtenv: {limits: {cpus: 1e-9}}\n")
    found = run_cli(["validate", str(env)])
    assert found.exit_code == 1
    assert "under rtenv's floor of 0.1 CPU" in found.stdout
    ran = run_cli(["run", "--num-cpus", "0.001", "--", "true"])
    assert ran.exit_code == 2
    assert "--num-cpus 0.001 is under rtenv's floor of 0.1 CPU" in ran.stderr
    assert "hint: give at least 0.1 CPU" in ran.stderr


@pytest.mark.cgroups
@needs_v1
def test_an_oom_kill_is_told_on_the_workers_stderr() -> None:
    """What Ray streams to the driver (issue 22, L9: the job showed only "The worker died
    unexpectedly"). Ray runs `bash -c "<prefix> exec <worker>"` with the worker's stderr on its
    log file; here it is a pipe, read to its end: the watcher's line is in it when it closes."""
    limits = LimitsField(64 * 2**20, None)
    prefix = " ".join(command_prefix(limits))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3]))
    hog = f"exec {sys.executable} -c 'b = bytearray(400 << 20); b[::4096] = b\"x\" * (100 << 10)'"
    died = subprocess.run(["bash", "-c", f"{prefix} {hog}"], capture_output=True, text=True,
                          env=env, check=False, timeout=120)
    assert died.returncode == -9
    assert "rtenv: this worker was OOM-killed: it went past its rtenv.limits memory of 64 MiB " \
        "(67108864 bytes, cgroup /sys/fs/cgroup/memory/" in died.stderr
    assert "raise `rtenv.limits.memory` in the runtime_env" in died.stderr
    fine = subprocess.run(["bash", "-c", f"{prefix} exec {sys.executable} -c 'print(1)'"],
                          capture_output=True, text=True, env=env, check=True, timeout=120)
    assert (fine.stdout, fine.stderr) == ("1\n", "")
    assert _swept([Path(died.stderr.rsplit("cgroup ", 1)[1].split(")")[0])])


@pytest.mark.cgroups
@needs_v1
def test_an_oom_kill_is_told_in_the_ray_workers_stderr_log(tmp_path: Path) -> None:
    """A Ray worker's core worker points its stderr at `<temp-dir>/<session>/logs/
    worker-<id>-<job>-<pid>.err` after the exec: the line goes there, where Ray's log monitor
    reads it for the driver, found from the worker's own arguments."""
    logs = tmp_path / "session_x" / "logs"
    logs.mkdir(parents=True)
    prefix = " ".join(command_prefix(LimitsField(64 * 2**20, None)))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[3]))
    code = (f"import os; open(f'{logs}/worker-ab12-01000000-{{os.getpid()}}.err', 'w'); "
            "b = bytearray(400 << 20); b[::4096] = b'x' * (100 << 10)")
    worker = (f'exec {sys.executable} -c "{code}" --temp-dir={tmp_path} '
              "--session-name=session_x --worker-id=ab12")
    died = subprocess.run(["bash", "-c", f"{prefix} {worker}"], capture_output=True, text=True,
                          env=env, check=False, timeout=120)
    assert died.returncode == -9
    assert died.stderr == ""
    [log] = logs.glob("worker-ab12-01000000-*.err")
    said = log.read_text()
    assert "rtenv: this worker was OOM-killed" in said
    # and in the job's setup log, where the dashboard shows a job's runtime_env setup (the
    # agent's per-setup logger is closed by the time the worker dies: Ray 2.60)
    setup = (logs / "runtime_env_setup-01000000.log").read_text()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\tWARNING cgexec.py -- "
                        r"rtenv: this worker was OOM-killed: .*memory\n", setup), setup
    assert _swept([Path(said.rsplit("cgroup ", 1)[1].split(")")[0])])


def _swept(groups: list[Path]) -> bool:
    """Sweep until `groups` are gone: a sweep keeps each while its worker or its watcher runs
    (the watcher reads the OOM count after the worker ends, then exits)."""

    def sweep() -> bool:
        if any(g.exists() for g in groups):
            Guard().sweep()
        return not any(g.exists() for g in groups)

    return until(sweep, what=lambda: f"the sweep to remove {[str(g) for g in groups]}")


def test_the_oom_line_names_the_limit_and_what_to_do() -> None:
    line = oom_message(200 * 10**6, "/sys/fs/cgroup/memory/rtenv-1-abc")
    assert "190.735 MiB (200000000 bytes, cgroup /sys/fs/cgroup/memory/rtenv-1-abc)" in line
