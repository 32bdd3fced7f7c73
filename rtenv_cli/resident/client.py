"""The caller's side of the resident rtenv: hand a command to the daemon, relay its end.

Imported by `rtenv push` (launch.py) before typer, so it imports nothing heavy and costs one
stat when no daemon runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from rtenv_cli.resident import existing_socket, fingerprint, wanted

TYPE_CHECKING = False  # typing's import would cost every `rtenv` process some ms
if TYPE_CHECKING:
    import socket
    from typing import Any

CONNECT_S = 1.0  # a daemon that does not accept within this is skipped
START_S = 3.0  # nor one whose child has not answered within this (then it never runs it)
# the caller's signals, raised in the child: Ctrl-C, a kill, a hang-up, Ctrl-\. Not Ctrl-Z:
# a child stopped with its caller would stay stopped, holding the caller's terminal or pipe,
# if the caller were then killed (it could no longer hear the hang-up); a push goes on to its
# end instead, as a background job's output would.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def run_resident(argv: list[str]) -> int | None:
    """Run ARGV in this user's daemon and return its exit code; None when it cannot run there
    (no daemon, another user's socket, a stale or busy daemon): the caller then runs it."""
    path = _socket(argv)
    sock = _connect(path) if path is not None else None
    if sock is None:
        return None
    with sock:
        return _Handover(sock).run(argv)


def _socket(argv: list[str]) -> str | None:
    """The daemon's socket, if ARGV is for it and there is one in a home this user owns."""
    if not wanted(argv):
        return None
    try:
        return existing_socket()
    except Exception as exc:
        from rtenv_cli.core.errors import RtenvError

        if isinstance(exc, RtenvError):
            return None  # an untrusted home: the command itself says so
        raise


def _connect(path: str) -> socket.socket | None:
    from rtenv_cli.resident.wire import connect_own

    try:  # never hand this user's environment to another user's listener (ForeignPeer)
        return connect_own(path, CONNECT_S)
    except OSError:
        return None


class _Handover:
    """One command handed to the daemon: the request, the go-ahead with the standard streams
    and the cwd, then the caller's signals forwarded until the child's exit code (or its death
    by a forwarded signal) arrives.

    The child runs the command only after this side's `go`, sent once its pid arrived within
    START_S: a child that answers later finds the connection closed and runs nothing, so a
    command never runs both here and there. A signal that arrives before `go` is held, and
    then either forwarded or, when the command runs nowhere, acted on here."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.child: int | None = None
        self.pending: list[int] = []
        self.last: int | None = None  # the last signal forwarded

    def run(self, argv: list[str]) -> int | None:
        from rtenv_cli.resident.wire import ProtocolError, recv_frame, send_frame

        previous = {sig: signal.signal(sig, self._on_signal) for sig in FORWARDED}
        try:
            try:
                send_frame(self.sock, _request(argv))
                reply, _ = recv_frame(self.sock, within=START_S)
                if reply is None or "pid" not in reply:
                    return self._not_run()
                # the descriptors only now: a daemon that never answers holds none of them
                # (a pipe it held would keep `rtenv push | cat` waiting)
                cwd = _cwd_fd()
                try:
                    send_frame(self.sock, {"go": True}, fds=[0, 1, 2, cwd])
                finally:
                    os.close(cwd)
            except (OSError, ProtocolError):
                return self._not_run()
            self.child = int(reply["pid"])
            for signum in self.pending:
                self._forward(signum)
            return self._relay()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _not_run(self) -> int | None:
        """Nothing ran: the caller runs the command, unless a signal to end came meanwhile."""
        if not self.pending:
            return None
        signum = self.pending[-1]
        if signum == signal.SIGINT:
            sys.stderr.write("\ninterrupted\n")
            return 130
        return self._die_by(signum)

    def _relay(self) -> int | None:
        from rtenv_cli.resident.wire import ProtocolError, recv_frame

        self.sock.settimeout(None)
        while True:
            try:
                reply, _ = recv_frame(self.sock)
            except (OSError, ProtocolError):
                reply = None
            if reply is not None and "exit" in reply:
                return int(reply["exit"])
            if reply is not None and "fallback" in reply:
                return None  # the child could not become this process: nothing ran
            if reply is None:
                break
        if self.last is not None:  # it died of the signal it was sent: so does its caller
            return self._die_by(self.last)
        sys.stderr.write("error: the rtenv daemon's process for this command ended without an "
                         "exit code (killed?)\nhint: run it again; `RTENV_DAEMON=0 rtenv ...` "
                         "runs it without the daemon\n")
        return 1

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self.child is None:
            self.pending.append(signum)  # never a frame inside the request's frame
        else:
            self._forward(signum)

    def _forward(self, signum: int) -> None:
        from rtenv_cli.resident.wire import send_frame

        with contextlib.suppress(OSError):  # the child is gone: _relay reports its end
            send_frame(self.sock, {"signal": int(signum)})
        self.last = signum

    @staticmethod
    def _die_by(signum: int) -> int:
        """End as a process killed by SIGNUM (the exit status a shell or `timeout` reads)."""
        sys.stdout.flush()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return 128 + signum  # a signal whose default is not to end the process


def _request(argv: list[str]) -> dict[str, Any]:
    return {"op": "run", "fp": fingerprint(), "argv": argv, "env": dict(os.environ),
            "umask": _umask(),
            "streams": [_stream_kind(s) for s in (sys.stdin, sys.stdout, sys.stderr)]}


def _cwd_fd() -> int:
    """The working directory itself (O_PATH: no read permission needed), for the child's
    fchdir: the same directory even if its path changed or means another in the child's
    mount namespace."""
    return os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _stream_kind(stream: Any) -> dict[str, Any] | None:
    """How Python set up this standard stream (None: closed), for the child to do the same."""
    if stream is None:
        return None
    return {"encoding": getattr(stream, "encoding", None) or "utf-8",
            "errors": getattr(stream, "errors", None) or "strict"}
