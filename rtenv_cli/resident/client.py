"""The caller's side of the resident rtenv: hand a command to the daemon, relay its end.

Imported by every `rtenv` process before typer (cli/main.py), so it imports nothing heavy and
costs one stat when no daemon runs.
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
START_S = 10.0  # nor one whose child has not started the command within this (a full box)
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run_resident(argv: list[str]) -> int | None:
    """Run ARGV in this user's daemon and return its exit code; None when it cannot run there
    (no daemon, another user's socket, a stale or busy daemon): the caller then runs it."""
    path = _socket(argv)
    sock = _connect(path) if path is not None else None
    if sock is None:
        return None
    from rtenv_cli.resident.wire import ProtocolError

    with sock:
        try:
            started = _start(sock, argv)
        except (OSError, ProtocolError):
            started = False
        # nothing ran yet when the child did not start: running it here is safe
        return _relay(sock) if started else None


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
    import socket

    from rtenv_cli.resident.wire import peer_uid

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(CONNECT_S)
    try:
        sock.connect(path)
        if peer_uid(sock) != os.geteuid():
            raise ConnectionRefusedError  # never hand this user's environment to another's
    except OSError:
        sock.close()
        return None
    return sock


def _start(sock: socket.socket, argv: list[str]) -> bool:
    """Send the request; True once the daemon's child has started the command."""
    from rtenv_cli.resident.wire import recv_frame, send_frame

    request: dict[str, Any] = {
        "op": "run", "fp": fingerprint(), "argv": argv, "cwd": os.getcwd(),
        "env": dict(os.environ), "umask": _umask(),
        "streams": [_stream_kind(s) for s in (sys.stdin, sys.stdout, sys.stderr)],
    }
    send_frame(sock, request, fds=[0, 1, 2])
    sock.settimeout(START_S)
    reply, _ = recv_frame(sock)
    return reply is not None and "pid" in reply


def _relay(sock: socket.socket) -> int:
    """Forward signals to the child until it reports its exit code."""
    from rtenv_cli.resident.wire import ProtocolError, recv_frame

    sock.settimeout(None)
    previous = {sig: signal.signal(sig, lambda n, _f: _forward(sock, n)) for sig in FORWARDED}
    try:
        while True:
            try:
                reply, _ = recv_frame(sock)
            except (OSError, ProtocolError):
                reply = None
            if reply is None:
                sys.stderr.write("error: the rtenv daemon's process for this command ended "
                                 "without an exit code (killed?)\nhint: run it again; "
                                 "`RTENV_DAEMON=0 rtenv ...` runs it without the daemon\n")
                return 1
            if "exit" in reply:
                return int(reply["exit"])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _forward(sock: socket.socket, signum: int) -> None:
    from rtenv_cli.resident.wire import send_frame

    with contextlib.suppress(OSError):  # the child is gone: _relay reports its end
        send_frame(sock, {"signal": int(signum)})


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
