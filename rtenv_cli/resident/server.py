"""The daemon's side of the resident rtenv: import once, fork a child per command.

Run as `python -m rtenv_cli.resident.server` by `rtenv daemon start` (cli/daemon.py). The
server is single-threaded and starts no thread before it forks (a fork copies only the calling
thread). It accepts on RTENV_HOME/run/daemon.sock, forks at once, and the child does the rest:
it checks the caller's uid, reads the request and compares the code fingerprints, reports its
pid, waits for the caller's go-ahead (which brings the standard streams and the cwd), becomes
the caller (cwd, umask, environment, standard streams, argv), runs the command through
cli.main.main exactly as a new process would, reports the exit code and ends as any rtenv
process ends (atexit handlers, such as the ignore cache's save, after the caller has its
answer). The server itself ends after `idle` seconds with no command
running, on `rtenv daemon stop`, on SIGTERM, or when its socket was removed or replaced.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import selectors
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rtenv_cli.resident import LOCK_NAME, bindable_socket, fingerprint
from rtenv_cli.resident.client import FORWARDED
from rtenv_cli.resident.wire import ProtocolError, own_peer, recv_frame, send_frame

# What a push imports, done once in the server: these packages whole, the modules of LAZY
# (imported inside functions), and the resident commands built (tests/resident/test_server.py
# checks that a push by each route imports none of rtenv's modules or of these afresh).
WARM = (
    "rtenv_cli.cli", "rtenv_cli.api", "rtenv_cli.render", "rtenv_cli.core.push",
    "rtenv_cli.core.push_carrier", "rtenv_cli.core.trees", "rtenv_cli.core.transport",
    "rtenv_cli.core.packaging", "rtenv_cli.core.spec", "rtenv_cli.core.rayplugin",
    "rtenv_cli.core.lint", "rtenv_cli.core.config", "rtenv_cli.core.store",
    "rtenv_cli.core.cache", "rtenv_cli.core.run",
)
LAZY = ("yaml", "h2.connection", "requests", "platformdirs", "tomllib", "zipfile", "tempfile",
        "sqlite3")
MAX_CHILDREN = 16  # commands running at once; one more is refused and runs in its caller
REQUEST_S = 5.0  # a caller has this long to send its request, and then its go-ahead
STREAMS = (0, 1, 2)  # stdin, stdout, stderr: passed by the caller, in this order


def warm() -> None:
    """Import the resident commands' code (and what it imports lazily), and build each one's
    click command (commands.build keeps it: every child runs that one)."""
    import pkgutil

    from rtenv_cli.cli.commands import build
    from rtenv_cli.cli.group import use_rtenv_context
    from rtenv_cli.resident import RESIDENT_COMMANDS

    for name in WARM:
        module = importlib.import_module(name)
        for info in pkgutil.walk_packages(getattr(module, "__path__", []), f"{name}."):
            with contextlib.suppress(ImportError):  # an optional dependency's module
                importlib.import_module(info.name)
    for name in RESIDENT_COMMANDS:
        build(name, use_rtenv_context)  # the root group's: what a child's run looks up
    for name in LAZY:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def serve(*, idle: float, ready_fd: int | None = None) -> socket.socket | None:
    """Serve until stopped or idle; return None in the server, and the caller's connection in
    each child (which then runs `become`)."""
    server = _Server.bind(idle)
    try:
        if ready_fd is not None:
            os.write(ready_fd, f"{server.pid}\n".encode())
            os.close(ready_fd)
        return server.loop()
    finally:
        server.close()


class _Server:
    """The listening socket, the lock that makes it the only one, and the children running."""

    def __init__(self, listener: socket.socket, lock_fd: int, path: Path, idle: float) -> None:
        self.listener, self.lock_fd, self.path, self.idle = listener, lock_fd, path, idle
        self.ident = os.stat(path)
        self.pid = os.getpid()
        self.started = time.time()
        self.stamp = fingerprint()
        self.children: set[int] = set()

    @classmethod
    def bind(cls, idle: float) -> _Server:
        from rtenv_cli.core.errors import UsageError
        from rtenv_cli.core.fsutil import flock

        path = bindable_socket()
        home = path.parent
        lock_fd = os.open(home / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        if not flock(lock_fd, wait=0):
            os.close(lock_fd)
            raise UsageError("another rtenv daemon already serves this RTENV_HOME",
                             path=str(path), hint="`rtenv daemon stop` stops it")
        os.ftruncate(lock_fd, 0)
        os.write(lock_fd, f"{os.getpid()}\n".encode())  # who holds it: `daemon stop` reads it
        warm()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a socket left by a server that died: the lock says none runs now
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket is made 0600
        try:
            listener.bind(str(path))
        finally:
            os.umask(old)
        listener.listen(64)
        gc.freeze()  # what warm() made stays shared with each child, unwalked by its collections
        return cls(listener, lock_fd, path, idle)

    def loop(self) -> socket.socket | None:
        """Accept and fork until stopped; in a child, its connection."""
        me, stopping = self.pid, []

        def stop(_signum: int, _frame: Any) -> None:
            if os.getpid() == me:  # a flag, never an exception: it may land inside a fork
                stopping.append(True)

        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w)  # a signal wakes the select below at once
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, stop)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        last = time.monotonic()
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(self.listener, selectors.EVENT_READ)
                sel.register(wake_r, selectors.EVENT_READ)
                while not stopping and _still_ours(self.path, self.ident):
                    ready = {key.fileobj for key, _ in sel.select(timeout=1.0)}
                    _reap(self.children)
                    if wake_r in ready:
                        with contextlib.suppress(BlockingIOError):
                            os.read(wake_r, 512)
                    if self.listener in ready and not stopping:
                        last = time.monotonic()
                        conn = self._fork(self.listener.accept()[0])
                        if conn is not None:  # the child: the server's loop is not its own
                            signal.set_wakeup_fd(-1)
                            return conn
                    elif not self.children and time.monotonic() - last > self.idle:
                        break
        finally:
            if os.getpid() == me:
                signal.set_wakeup_fd(-1)
            os.close(wake_r)
            os.close(wake_w)
        return None

    def _fork(self, conn: socket.socket) -> socket.socket | None:
        """A child for CONN (in the child: CONN; here: None)."""
        if len(self.children) >= MAX_CHILDREN:
            conn.close()  # the caller runs the command itself
            return None
        pid = os.fork()
        if pid == 0:
            self.listener.close()
            os.close(self.lock_fd)
            _CONTEXT.update(server=self.pid, started=self.started, fp=self.stamp, idle=self.idle)
            return conn
        self.children.add(pid)
        conn.close()
        return None

    def close(self) -> None:
        if os.getpid() != self.pid:
            return  # a child leaves the server's socket and lock alone
        self.listener.close()
        if _still_ours(self.path, self.ident):
            self.path.unlink()
        os.close(self.lock_fd)


_CONTEXT: dict[str, Any] = {}  # the server's facts, for the child that answers `status`


def _reap(children: set[int]) -> None:
    for pid in list(children):
        with contextlib.suppress(ChildProcessError):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if not done:
                continue
        children.discard(pid)


def _still_ours(path: Path, ident: os.stat_result) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (ident.st_dev, ident.st_ino)


def become(conn: socket.socket) -> int:
    """In a child: serve the one request on CONN; the exit code of this process."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        own_peer(conn)  # another user's process (ForeignPeer) gets nothing, not even an answer
        request, _ = recv_frame(conn, within=REQUEST_S)
    except (OSError, ProtocolError):
        return 2
    fds: list[int] = []  # the caller's, once it says go
    try:
        return _answer(conn, request, fds)
    except (OSError, ProtocolError):  # the caller went away, or spoke no protocol of ours,
        return 2  # before its command began: there is nothing left to tell it
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _answer(conn: socket.socket, request: dict[str, Any] | None, fds: list[int]) -> int:
    op = (request or {}).get("op")
    if op == "status":
        send_frame(conn, {"pid": _CONTEXT["server"], "started": _CONTEXT["started"],
                          "fp": _CONTEXT["fp"], "idle": _CONTEXT["idle"]})
        return 0
    if op == "stop":
        os.kill(_CONTEXT["server"], signal.SIGTERM)
        send_frame(conn, {"stopping": _CONTEXT["server"]})
        return 0
    if op != "run" or request is None:
        send_frame(conn, {"refused": "not a request of this protocol"})
        return 2
    return _run(conn, request, fds)


def _run(conn: socket.socket, request: dict[str, Any], fds: list[int]) -> int:
    """Run the caller's command here, once it is the caller's code and the caller says go."""
    if request.get("fp") != _CONTEXT["fp"]:
        # the caller runs other code: an upgrade or an edit since the daemon started (then it
        # stops: the next start loads the code of now), or another install sharing this home
        # (which leaves this daemon to its own)
        stale = fingerprint() != _CONTEXT["fp"]
        send_frame(conn, {"stale" if stale else "other": "the caller runs other code"})
        if stale:
            os.kill(_CONTEXT["server"], signal.SIGTERM)
        return 0
    send_frame(conn, {"pid": os.getpid()})
    # the go-ahead brings the caller's streams and cwd; a caller that gave up sends none, and
    # then nothing runs
    go, got = recv_frame(conn, max_fds=len(STREAMS) + 1, within=REQUEST_S)
    fds.extend(got)
    conn.settimeout(None)
    if not (go or {}).get("go") or len(fds) != len(STREAMS) + 1:
        return 0
    try:
        _take_over(request, fds)
    except (OSError, ValueError, TypeError, KeyError) as exc:  # before the command: the
        send_frame(conn, {"fallback": f"{type(exc).__name__}: {exc}"})  # caller runs it
        return 0
    finished = threading.Event()
    threading.Thread(target=_signals, args=(conn, finished), daemon=True).start()
    from rtenv_cli.cli.main import main

    code = 1
    try:
        code = main(list(request["argv"]))
    except KeyboardInterrupt:  # a Ctrl-C before the CLI's own handling began
        sys.stderr.write("\ninterrupted\n")
        code = 130
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        finished.set()  # the caller's end from now on is no hang-up
        with contextlib.suppress(OSError):
            send_frame(conn, {"exit": code})
    return code


def _take_over(request: dict[str, Any], fds: list[int]) -> None:
    """Become the caller: its cwd, umask, environment, standard streams and argv; and trust
    no directory checked before (paths.private_dir checks again, as a new process would)."""
    from rtenv_cli.core import paths

    os.fchdir(fds[len(STREAMS)])
    os.umask(int(request["umask"]))
    paths.forget_trusted()
    env = request["env"]
    if not isinstance(env, dict):
        raise TypeError("env is not a mapping")
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in env.items()})
    for target, fd in zip(STREAMS, fds, strict=False):
        os.dup2(fd, target)
    for fd in fds:  # the caller's descriptors now live on as 0, 1, 2 and the cwd
        os.close(fd)
    fds.clear()
    kinds = request["streams"]
    sys.stdin = sys.__stdin__ = _stream(0, "r", kinds[0])  # type: ignore[misc]
    sys.stdout = sys.__stdout__ = _stream(1, "w", kinds[1])  # type: ignore[misc]
    sys.stderr = sys.__stderr__ = _stream(2, "w", kinds[2])  # type: ignore[misc]
    sys.argv = ["rtenv", *request["argv"]]


def _stream(fd: int, mode: str, kind: dict[str, Any] | None) -> Any:
    """A standard stream on FD as Python's start-up makes one (line-buffered on a terminal,
    stderr always), with the caller's encoding and error handler."""
    if kind is None:
        return None
    line = fd == STREAMS[-1] or os.isatty(fd)
    return open(fd, mode, buffering=1 if line else -1, encoding=kind["encoding"],
                errors=kind["errors"], closefd=False)


def _signals(conn: socket.socket, finished: threading.Event) -> None:
    """The caller's signals, raised here; its end (killed) before the command's ends this
    command as a hang-up would."""
    while True:
        try:
            frame, _ = recv_frame(conn)
        except (OSError, ProtocolError):
            frame = None
        if frame is None:
            if not finished.is_set():
                os.kill(os.getpid(), signal.SIGHUP)
            return
        signum = frame.get("signal")
        if signum in FORWARDED:  # what a caller forwards, nothing else
            os.kill(os.getpid(), signum)


def main(argv: list[str] | None = None) -> int:
    """`python -m rtenv_cli.resident.server [--idle S] [--ready-fd FD]`."""
    import argparse

    parser = argparse.ArgumentParser(prog="rtenv-daemon")
    parser.add_argument("--idle", type=float, default=1800.0)
    parser.add_argument("--ready-fd", type=int, default=None)
    args = parser.parse_args(argv)
    from rtenv_cli.core.errors import RtenvError

    try:
        conn = serve(idle=args.idle, ready_fd=args.ready_fd)
    except RtenvError as exc:  # read from the log by `rtenv daemon start`
        sys.stderr.write(f"error: {exc.message}\n" + (f"hint: {exc.hint}\n" if exc.hint else ""))
        return 2
    if conn is None:
        return 0
    with conn:
        return become(conn)


if __name__ == "__main__":
    raise SystemExit(main())
