"""Start, stop and ask the resident rtenv (the work behind `rtenv daemon start|stop|status`)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass, replace
from typing import Any

from rtenv_cli.core.errors import RtenvError, UsageError
from rtenv_cli.resident import (
    LOCK_NAME,
    bindable_socket,
    fingerprint,
    run_dir,
    served,
    socket_path,
)
from rtenv_cli.resident.wire import (
    ForeignPeer,
    ProtocolError,
    connect_own,
    recv_frame,
    send_frame,
)

START_S = 60.0  # the server's imports on a loaded box
STOP_S = 60.0  # a server ends within a second: this bounds a wedged one
ASK_S = 5.0  # a status or stop request and its answer
LOG_NAME = "daemon.log"
SERVER_MODULE = "rtenv_cli.resident.server"
START_LOCK = "start.lock"


@dataclass(frozen=True)
class DaemonState:
    """What `rtenv daemon status` reports (and start/stop, of the daemon they acted on)."""

    running: bool
    socket: str
    pid: int | None = None
    started: float | None = None  # epoch seconds
    idle_exit_s: float | None = None  # how long it stays with nothing to run
    current: bool | None = None  # runs the code this process would run
    log: str | None = None
    stopped: bool | None = None  # after a stop: whether it has ended

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def status() -> DaemonState:
    """The daemon serving this RTENV_HOME, if one answers."""
    path = socket_path()
    reply = _ask({"op": "status"}, str(path))
    if reply is None or "pid" not in reply:
        return DaemonState(running=False, socket=str(path))
    return DaemonState(running=True, socket=str(path), pid=int(reply["pid"]),
                       started=float(reply["started"]), idle_exit_s=float(reply["idle"]),
                       current=reply.get("fp") == fingerprint(),
                       log=str(run_dir() / LOG_NAME))


def start(*, idle: float) -> tuple[DaemonState, bool]:
    """Start a daemon unless a current one runs; (its state, whether this started it). A stale
    one (other code) is stopped first. Two starts at once: the second waits for the first and
    finds its daemon running."""
    from rtenv_cli.core.fsutil import LockFile

    with LockFile(run_dir() / START_LOCK, wait=START_S + STOP_S):
        state = status()
        if state.running and state.current:
            return state, False
        if state.running:
            stop()
        return _spawn(idle), True


def _spawn(idle: float) -> DaemonState:
    home = bindable_socket().parent
    log = home / LOG_NAME
    read_fd, write_fd = os.pipe()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with open(fd, "wb") as sink:  # this daemon's log alone: an error read below is its own
        proc = subprocess.Popen(
            [sys.executable, "-m", SERVER_MODULE, "--idle", str(idle),
             "--ready-fd", str(write_fd)],
            stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, pass_fds=(write_fd,),
            # the private run directory: `-m` puts the cwd first on the import path, and a
            # module planted in the directory `daemon start` ran in would run as this user
            cwd=home,
            start_new_session=True)  # not in the caller's job: its Ctrl-C is not the server's
    os.close(write_fd)
    try:
        ready, _, _ = select.select([read_fd], [], [], START_S)
        line = os.read(read_fd, 64) if ready else b""
    finally:
        os.close(read_fd)
    if not line.strip().isdigit():
        if proc.poll() is None:
            proc.terminate()
        raise RtenvError(f"the rtenv daemon did not start: {_last_line(log)}", path=str(log),
                         hint=f"see {log}")
    return status()


def stop() -> DaemonState:
    """Stop the daemon: the state it had, with `stopped` saying whether it is gone (a daemon
    that has not ended within STOP_S is still stopping). One that does not answer (another
    version's protocol, a wedged server) is found by its lock and sent SIGTERM."""
    state = status()
    if state.running and state.pid is not None:
        _ask({"op": "stop"}, state.socket)
        return replace(state, stopped=_wait_gone(state.pid))
    pid = _lock_holder()
    if pid is None:
        return state
    os.kill(pid, signal.SIGTERM)
    return DaemonState(running=True, socket=state.socket, pid=pid, current=False,
                       stopped=_wait_gone(pid))


def _wait_gone(pid: int) -> bool:
    """Whether process PID has ended within STOP_S (a pidfd turns readable when it does)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], STOP_S)[0])
    finally:
        os.close(fd)


def _lock_holder() -> int | None:
    """The pid of the daemon holding RTENV_HOME/run's lock: a process of this user that runs
    the server module, or None (no daemon, or a pid that is no longer it)."""
    from rtenv_cli.core.fsutil import flock, unflock

    try:
        fd = os.open(run_dir() / LOCK_NAME, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        if flock(fd, wait=0):
            unflock(fd)
            return None  # nobody holds it
        text = os.read(fd, 32).decode(errors="replace").strip()
    finally:
        os.close(fd)
    if not text.isdigit():
        return None
    pid = int(text)
    try:
        owner = os.stat(f"/proc/{pid}").st_uid
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return None
    return pid if owner == os.geteuid() and SERVER_MODULE.encode() in argv else None


def _ask(request: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The daemon's answer to REQUEST on its socket PATH, or None (none answers)."""
    if not served(path):
        return None
    try:
        sock = connect_own(path, ASK_S)
    except ForeignPeer:
        raise UsageError(f"{path} is served by another user's process", path=path,
                         hint="remove the socket; check who can write RTENV_HOME/run") from None
    except OSError:
        return None
    with sock:
        try:
            send_frame(sock, request)
            reply, _ = recv_frame(sock)
        except (OSError, ProtocolError):
            return None
    return reply


def _last_line(log: os.PathLike[str]) -> str:
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - 4096))
            lines = [line for line in fh.read().decode(errors="replace").splitlines() if line]
    except OSError:
        return "(no log)"
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or ["it exited without a word"])[-1]
