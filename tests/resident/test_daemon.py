"""The resident rtenv as real processes: `rtenv daemon start|stop|status`, and `rtenv push`
handed to it (same output, exit code, cwd, environment and Ctrl-C as a push of its own)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rtenv_cli.resident import wanted
from tests.support.cli import CliResult, default_signals, run_process
from tests.support.packages import make_tree


@pytest.fixture
def home() -> Iterator[dict[str, str]]:
    """A short RTENV_HOME (AF_UNIX paths are at most 107 bytes) and the env that names it; a
    daemon started there is stopped afterwards."""
    path = tempfile.mkdtemp(prefix="rtd", dir="/tmp")
    env = {"RTENV_HOME": path, "RTENV_DAEMON": ""}
    try:
        yield env
    finally:
        state = run_process(["daemon", "stop", "-f", "json"], env=env)
        assert state.exit_code == 0, state.stderr
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def daemon(home: dict[str, str]) -> dict[str, str]:
    started = run_process(["daemon", "start", "-f", "json"], env=home)
    assert started.exit_code == 0, started.stderr
    assert started.json["running"]
    assert started.json["current"]
    return home


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = make_tree(tmp_path / "proj", {"main.py": "print('hi')\n", "pkg/mod.py": "X = 1\n",
                                         ".gitignore": "build/\n", "build/out.bin": "x"})
    return root


def _client(args: list[str], env: dict[str, str], *, cwd: Path | None = None) -> CliResult:
    """`rtenv ARGS` as a process started with -X importtime: its stderr lists the modules this
    process imported (the daemon's child imports nothing it prints), then the command's own."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "rtenv_cli", *args],
                          capture_output=True, text=True, env={**os.environ, **env},
                          cwd=cwd, timeout=120, check=False)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def _imports(result: CliResult) -> set[str]:
    return {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def _messages(result: CliResult) -> list[str]:
    return [line for line in result.stderr.splitlines() if not line.startswith("import time:")]


def test_a_push_runs_in_the_daemon_exactly_as_in_its_own_process(
        daemon: dict[str, str], project: Path) -> None:
    first = _client(["push", ".", "-f", "json"], daemon, cwd=project)
    assert first.exit_code == 0, first.stderr
    assert first.json["packages"][0]["uploaded"] is True
    assert "typer" not in _imports(first)
    # pushed again, by the daemon and by a process of its own: both find it uploaded
    resident = _client(["push", ".", "-f", "json"], daemon, cwd=project)
    alone = _client(["push", ".", "-f", "json"], {**daemon, "RTENV_DAEMON": "0"}, cwd=project)
    assert resident.exit_code == alone.exit_code == 0, resident.stderr
    assert resident.json == alone.json  # the same package, from the caller's directory
    assert resident.json["packages"][0]["source"] == str(project)
    assert _messages(resident) == _messages(alone)
    assert "typer" not in _imports(resident)  # handed over: this process built no CLI
    assert "typer" in _imports(alone)


def test_a_failing_push_gives_the_callers_exit_code_and_error(
        daemon: dict[str, str], tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    resident = _client(["push", str(missing)], daemon)
    alone = _client(["push", str(missing)], {**daemon, "RTENV_DAEMON": "0"})
    assert resident.exit_code == alone.exit_code == 2
    assert _messages(resident) == _messages(alone)
    assert any(str(missing) in line for line in _messages(resident))
    assert "typer" not in _imports(resident)


def test_the_child_has_the_callers_environment(daemon: dict[str, str], project: Path) -> None:
    # an address from RAY_ADDRESS (the caller's, not the daemon's): a port nobody serves
    env = {**daemon, "RAY_ADDRESS": "http://127.0.0.1:9"}
    resident = _client(["push", str(project)], env)
    alone = _client(["push", str(project)], {**env, "RTENV_DAEMON": "0"})
    assert resident.exit_code == alone.exit_code != 0
    assert _messages(resident) == _messages(alone)
    assert "127.0.0.1:9" in "\n".join(_messages(resident))


def test_a_watch_is_never_handed_over() -> None:
    assert wanted(["push", "."])
    assert wanted(["push", "-o", "wout.yaml", "."])
    for argv in (["push", "--watch"], ["push", "-w", "."], ["push", "-vw"], ["push", "--once"],
                 ["validate", "x.yaml"], ["-q", "push"], []):
        assert not wanted(argv), argv


@contextlib.contextmanager
def _stuck_push(env: dict[str, str], project: Path, stderr: Any = subprocess.PIPE
                ) -> Iterator[tuple[subprocess.Popen[str], socket.socket]]:
    """`rtenv push` (with -X importtime) to an agent URL whose listener accepts and never
    answers: (the caller's process, the connection its command made, once made)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "rtenv_cli", "push", str(project),
             "--address", f"http://127.0.0.1:{port}"], env={**os.environ, **env},
            stdout=subprocess.PIPE, stderr=stderr, text=True,
            preexec_fn=default_signals)  # noqa: PLW1509 - only signal() calls
        try:
            silent.settimeout(120)  # a bound for a failure
            conn, _ = silent.accept()  # the command runs, waiting on us
            with conn:
                yield proc, conn
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=120)


def _handed_over(err: str) -> bool:
    return "typer" not in _imports(CliResult(0, "", err))


def test_ctrl_c_reaches_the_command_in_the_daemon(daemon: dict[str, str],
                                                  project: Path) -> None:
    """Ctrl-C of the caller interrupts the command in the daemon's child (exit 130,
    `interrupted`), as it would in-process."""
    with _stuck_push(daemon, project) as (proc, _conn):
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert _handed_over(err)


def test_a_kill_ends_caller_and_command_as_it_would_one_process(
        daemon: dict[str, str], project: Path) -> None:
    """SIGTERM to the caller: the command in the daemon dies of it, and so does the caller
    (status -15 for `timeout`, a supervisor or `wait`), with no message of its own."""
    with _stuck_push(daemon, project) as (proc, conn):
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=120)
        conn.settimeout(120)
        while conn.recv(1 << 16):
            pass  # the request the push sent, then the end: the child is gone too
    assert proc.returncode == -signal.SIGTERM, err
    assert _handed_over(err)
    assert "ended without an exit code" not in err


def test_a_killed_caller_ends_its_command(daemon: dict[str, str], project: Path,
                                          tmp_path: Path) -> None:
    log = tmp_path / "stderr"
    with log.open("w") as sink, _stuck_push(daemon, project, stderr=sink) as (proc, conn):
        proc.kill()
        proc.wait(timeout=120)
        conn.settimeout(120)  # a bound for a failure: the child ends at once
        while conn.recv(1 << 16):
            pass  # the request the push sent, then the end: the child hung up
    assert _handed_over(log.read_text())


def test_a_wedged_daemon_is_passed_over(daemon: dict[str, str], project: Path) -> None:
    """A daemon that accepts but never answers (stopped here): the push runs in its own
    process after the hand-over's bound, and the daemon, woken, serves again."""
    server = run_process(["daemon", "status", "-f", "json"], env=daemon).json["pid"]
    os.kill(server, signal.SIGSTOP)
    try:
        result = _client(["push", str(project), "-f", "json"], daemon)
    finally:
        os.kill(server, signal.SIGCONT)
    assert result.exit_code == 0, result.stderr
    assert "typer" in _imports(result)
    again = _client(["push", str(project), "-f", "json"], daemon)
    assert again.exit_code == 0, again.stderr
    assert "typer" not in _imports(again)
    assert again.json["packages"][0]["uri"] == result.json["packages"][0]["uri"]


def test_a_module_in_the_starting_directory_is_not_imported(home: dict[str, str],
                                                            project: Path,
                                                            tmp_path: Path) -> None:
    """`daemon start` run in a directory holding a module that shadows one rtenv imports: the
    daemon runs from its private run directory, so the module never runs."""
    planted = tmp_path / "planted"
    planted.mkdir()
    marker = tmp_path / "ran"
    (planted / "yaml.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    started = subprocess.run([sys.executable, "-m", "rtenv_cli", "daemon", "start"],
                             env={**os.environ, **home}, cwd=planted, capture_output=True,
                             text=True, timeout=120, check=False)
    assert started.returncode == 0, started.stderr
    pushed = _client(["push", str(project)], home)
    assert pushed.exit_code == 0, pushed.stderr
    assert "typer" not in _imports(pushed)
    assert not marker.exists()


def test_two_starts_at_once_share_one_daemon(home: dict[str, str]) -> None:
    starts = [subprocess.Popen([sys.executable, "-m", "rtenv_cli", "daemon", "start", "-f",
                                "json"], env={**os.environ, **home}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in starts]
    assert [p.returncode for p in starts] == [0, 0], outs
    pids = {json.loads(out)["pid"] for out, _err in outs}
    assert len(pids) == 1


def test_start_status_stop(home: dict[str, str]) -> None:
    none = run_process(["daemon", "status", "-f", "json"], env=home)
    assert none.exit_code == 1
    assert none.json["running"] is False
    first = run_process(["daemon", "start", "-f", "json"], env=home)
    assert first.exit_code == 0, first.stderr
    again = run_process(["daemon", "start"], env=home)
    assert again.exit_code == 0
    assert f"already running, pid {first.json['pid']}" in again.stdout
    running = run_process(["daemon", "status", "-f", "json"], env=home)
    assert running.exit_code == 0
    assert running.json["pid"] == first.json["pid"]
    assert running.json["current"]
    sock = Path(home["RTENV_HOME"]) / "run" / "daemon.sock"
    assert sock.stat().st_mode & 0o777 == 0o600
    stopped = run_process(["daemon", "stop", "-f", "json"], env=home)
    assert stopped.exit_code == 0
    assert stopped.json["pid"] == first.json["pid"]
    assert not sock.exists()
    assert not _alive(first.json["pid"])


def test_another_install_runs_by_itself_and_leaves_the_daemon(
        daemon: dict[str, str], project: Path, tmp_path: Path) -> None:
    """A caller with another import path (another install or PYTHONPATH sharing this home)
    pushes by itself; the daemon, still current for its own install, keeps serving."""
    pid = run_process(["daemon", "status", "-f", "json"], env=daemon).json["pid"]
    result = _client(["push", str(project), "-f", "json"], _with_path(daemon, tmp_path))
    assert result.exit_code == 0, result.stderr
    assert "typer" in _imports(result)  # it ran here
    status = run_process(["daemon", "status", "-f", "json"], env=daemon)
    assert status.exit_code == 0
    assert status.json["pid"] == pid
    assert status.json["current"]


def test_an_upgrade_under_the_daemon_stops_it(home: dict[str, str], project: Path,
                                              tmp_path: Path) -> None:
    """The daemon's own install changed since it started (here: a directory on its import path
    gained a file, as an install does): the caller pushes by itself, and the daemon exits."""
    env = _with_path(home, tmp_path)
    started = run_process(["daemon", "start", "-f", "json"], env=env)
    assert started.exit_code == 0, started.stderr
    (tmp_path / "extra" / "site-packages" / "newly_installed.py").write_text("")
    result = _client(["push", str(project), "-f", "json"], env)
    assert result.exit_code == 0, result.stderr
    assert "typer" in _imports(result)
    _wait_gone(started.json["pid"])


def _with_path(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    extra = tmp_path / "extra" / "site-packages"  # an install's directory: its mtime counts
    extra.mkdir(parents=True, exist_ok=True)
    return {**env, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(extra), os.environ.get("PYTHONPATH", "")]))}


def test_idle_daemon_exits(home: dict[str, str]) -> None:
    started = run_process(["daemon", "start", "--idle", "1s", "-f", "json"], env=home)
    assert started.exit_code == 0, started.stderr
    _wait_gone(started.json["pid"])
    assert not (Path(home["RTENV_HOME"]) / "run" / "daemon.sock").exists()


def test_a_removed_socket_stops_the_daemon(daemon: dict[str, str]) -> None:
    pid = run_process(["daemon", "status", "-f", "json"], env=daemon).json["pid"]
    (Path(daemon["RTENV_HOME"]) / "run" / "daemon.sock").unlink()
    _wait_gone(pid)


def test_a_home_path_too_long_for_a_socket_is_refused(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 100)
    result = run_process(["daemon", "start"], env={"RTENV_HOME": str(deep)})
    assert result.exit_code == 2
    assert "longer than 107 bytes" in result.stderr
    assert "hint: set RTENV_HOME to a shorter directory" in result.stderr


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie has ended
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"


def _wait_gone(pid: int) -> None:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        ready, _, _ = select.select([fd], [], [], 120)
        assert ready, f"daemon {pid} still runs"
    finally:
        os.close(fd)
