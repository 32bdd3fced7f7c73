"""The resident rtenv's wire: length-prefixed frames on an AF_UNIX stream, with the caller's
standard streams passed as descriptors (SCM_RIGHTS), and the peer's uid (SO_PEERCRED)."""

from __future__ import annotations

import marshal
import os
import socket
import struct
import time

TYPE_CHECKING = False  # typing's import would cost every resident `rtenv` some ms
if TYPE_CHECKING:
    from typing import Any

MAX_FRAME = 4 << 20  # a request is argv, cwd and the environment: bounded all the same
_HEADER = struct.Struct(">I")
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class ProtocolError(Exception):
    """The other end sent something that is not a frame of this protocol."""


class ForeignPeer(ConnectionRefusedError):
    """The other end of the socket runs as another user: nothing goes to it or comes from it."""


def own_peer(sock: socket.socket) -> None:
    """Check that the process at the other end of the AF_UNIX socket SOCK runs as this user
    (SO_PEERCRED, from the kernel), or raise ForeignPeer. Both ends check, before any frame:
    a request carries the caller's environment (its tokens)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    uid = int(_UCRED.unpack(raw)[1])
    if uid != os.geteuid():
        raise ForeignPeer(f"the socket's other end runs as uid {uid}")


def connect_own(path: str, timeout: float) -> socket.socket:
    """A connection to the socket PATH (in TIMEOUT s) whose other end runs as this user: an
    OSError otherwise, ForeignPeer for another user's listener."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
        own_peer(sock)
    except OSError:
        sock.close()
        raise
    return sock


# Frames are marshal's, read only from a peer whose uid is this process's own (own_peer is
# checked first): such a peer can already do all this user can, and marshal costs no import
# (json's would cost re's, some 7 ms of every `rtenv` process).
def send_frame(sock: socket.socket, value: dict[str, Any], fds: list[int] | None = None) -> None:
    data = marshal.dumps(value)
    payload = _HEADER.pack(len(data)) + data
    if fds:
        sent = socket.send_fds(sock, [payload], fds)
        payload = payload[sent:]
    if payload:
        sock.sendall(payload)


def recv_frame(sock: socket.socket, *, max_fds: int = 0, within: float | None = None
               ) -> tuple[dict[str, Any] | None, list[int]]:
    """The next frame (None at a clean end of stream), and the descriptors sent with it. With
    WITHIN, the whole frame must arrive in that many seconds (socket.timeout otherwise), not
    each read: a peer that trickles bytes cannot hold the reader."""
    deadline = None if within is None else time.monotonic() + within
    _arm(sock, deadline)
    if max_fds:
        head, fds, _flags, _addr = socket.recv_fds(sock, _HEADER.size, max_fds)
    else:
        head, fds = sock.recv(_HEADER.size), []
    if not head:
        return None, fds
    head += _recv_exact(sock, _HEADER.size - len(head), deadline)
    (size,) = _HEADER.unpack(head)
    if size > MAX_FRAME:
        raise ProtocolError(f"a frame of {size} bytes (at most {MAX_FRAME})")
    try:
        value = marshal.loads(_recv_exact(sock, size, deadline))  # noqa: S302 - see above
    except (ValueError, EOFError, TypeError) as exc:
        raise ProtocolError(f"a frame that is not marshal data: {exc}") from None
    if not isinstance(value, dict):
        raise ProtocolError("a frame that is not a mapping")
    return value, fds


def _arm(sock: socket.socket, deadline: float | None) -> None:
    if deadline is not None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("a frame did not arrive in time")
        sock.settimeout(left)


def _recv_exact(sock: socket.socket, size: int, deadline: float | None) -> bytes:
    chunks = []
    while size:
        _arm(sock, deadline)
        chunk = sock.recv(min(size, 1 << 16))
        if not chunk:
            raise ProtocolError("the stream ended inside a frame")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)
