"""A minimal gRPC client for unary calls over cleartext HTTP/2 (h2), streaming the request.

Why not grpcio: a unary call there takes the request as one `bytes` and copies it again into the
C core, so uploading a 90 MB package costs ~180 MB of memory (Ray's own `ray.init` upload does
exactly that); grpcio is also not a dependency of Ray's core package. Here the request is
framed by hand (gRPC's 5-byte length prefix, then the message) and its tail goes from the file
to the socket under HTTP/2 flow control, so memory stays flat whatever the size. `h2` (the
python-hyper project) does the HTTP/2 framing, flow control and HPACK; this module only drives a
socket, except for one thing: the tail's DATA frames. Through h2 each frame's bytes are copied
three times in Python (read, framed, buffered: benchmarks/results/
push.json: "ablation: GCS re-push without sendfile"); instead the 9-byte
frame header is written here and the payload goes by sendfile(2), straight from the page cache,
and h2's flow-control windows are debited by hand so that its view stays exact. A tail given as
a buffer (a tree's pack, read into memory) goes the same way, by sendmsg of the header and a view
of the buffer: no copy in Python either (its ablation row: cold.json "ablation: tree push with
packs framed by h2"). Messages are
encoded with the few protobuf primitives below: the GCS calls a push needs are three tiny
messages, and Ray's generated classes would mean importing Ray.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any, BinaryIO, TypedDict
from urllib.parse import unquote

Buffer = bytes | bytearray | memoryview  # a tail in memory

_CHUNK = 1 << 20
_FILE_FRAME = 1 << 22  # DATA payload per sendfile: the GCS takes frames up to 4 MiB
_WINDOW = 1 << 24  # our receive window: replies are small, never stall the server
# The sendfile path (see the module doc). False sends the tail through h2's own send_data: the
# push benchmark flips it for its ablation row, which shows what sendfile buys on its own.
SENDFILE = True
# A buffer tail's frames written here (see the module doc); False: through h2's send_data, for
# the ablation row of the cold tree push.
DIRECT_FRAMES = True


class _Stream(TypedDict, total=False):
    """One call's HTTP/2 stream as the events fill it in."""

    headers: dict[str, str]  # response headers, then trailers (header_encoding is utf-8)
    data: bytearray  # appended frame by frame (a reply of megabytes: no quadratic copies)
    done: bool
    reset: int  # the HTTP/2 error code, when the stream or connection was reset


class GrpcError(Exception):
    """A call that ended with a non-zero grpc-status (or a broken connection: code 14)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"gRPC status {code}: {message}")
        self.code = code
        self.message = message


class NotGrpcError(Exception):
    """The server at the address does not speak HTTP/2 (for instance a dashboard's HTTP/1.1)."""


# -- protobuf wire format --------------------------------------------------------------------------
def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def field_bytes(number: int, value: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(value)) + value


def field_varint(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def parse_fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) pairs of a message: ints for varints, bytes for length-delimited."""
    i = 0
    while i < len(data):
        key, i = _read_varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _read_varint(data, i)
            yield number, value
        elif wire == 2:  # noqa: PLR2004 - protobuf wire type: length-delimited
            size, i = _read_varint(data, i)
            yield number, data[i:i + size]
            i += size
        elif wire in (1, 5):  # fixed64 / fixed32: skipped
            i += 8 if wire == 1 else 4
        else:
            raise GrpcError(13, f"cannot parse a reply (wire type {wire})")


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(data):
            raise GrpcError(13, "truncated reply")
        b = data[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


# -- the channel -----------------------------------------------------------------------------------
class Channel:
    """One HTTP/2 connection to `host:port`; calls run one after another on it."""

    def __init__(self, host: str, port: int, *, metadata: Sequence[tuple[str, str]] = (),
                 timeout: float = 600.0, connect_timeout: float = 10.0) -> None:
        import h2.config
        import h2.connection

        self.authority = f"{host}:{port}"
        self.metadata = list(metadata)
        self._cancel: Any = None  # the current call's cancel event (see unary)
        self._streams: dict[int, _Stream] = {}
        try:
            self._sock = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as exc:
            raise GrpcError(14, f"cannot connect to {self.authority}: {exc}") from exc
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._conn = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self._conn.initiate_connection()
        self._conn.increment_flow_control_window(_WINDOW)
        self._flush()
        self._handshake()
        self._sock.settimeout(timeout)

    def _handshake(self) -> None:
        """Read the server's first bytes: an HTTP/2 SETTINGS frame, or not a gRPC server."""
        first = b""
        try:
            while len(first) < 9 and not first.startswith(b"HTTP/"):  # noqa: PLR2004 - a frame header
                more = self._sock.recv(65536)
                if not more:
                    break
                first += more
        except OSError as exc:
            self.close()
            raise NotGrpcError(f"{self.authority} did not answer an HTTP/2 preface") from exc
        if len(first) < 9 or first[3] != 4:  # noqa: PLR2004 - frame type 4 is SETTINGS
            self.close()
            raise NotGrpcError(f"{self.authority} does not speak HTTP/2")
        import h2.exceptions

        try:
            self._events(first)
        except h2.exceptions.H2Error as exc:
            self.close()
            raise NotGrpcError(f"{self.authority} does not speak HTTP/2: {exc}") from exc

    def close(self) -> None:
        with contextlib.suppress(OSError):  # shutdown wakes a thread blocked on this socket
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()

    # -- plumbing ------------------------------------------------------------------------------
    def _flush(self) -> None:
        out = self._conn.data_to_send()
        if out:
            try:
                self._sock.sendall(out)
            except OSError as exc:
                raise GrpcError(14, f"connection to {self.authority} lost: {exc}") from exc

    def _pump(self) -> None:
        try:
            data = self._sock.recv(65536)
        except TimeoutError as exc:
            raise GrpcError(4, f"{self.authority} did not answer in time") from exc
        except OSError as exc:
            raise GrpcError(14, f"connection to {self.authority} lost: {exc}") from exc
        if not data:
            raise GrpcError(14, f"{self.authority} closed the connection")
        self._events(data)

    def _events(self, data: bytes) -> None:
        import h2.events

        for ev in self._conn.receive_data(data):
            state = self._streams.get(getattr(ev, "stream_id", 0) or 0)
            if isinstance(ev, h2.events.ResponseReceived | h2.events.TrailersReceived):
                if state is not None:
                    state["headers"].update(
                        (_text(k), _text(v)) for k, v in ev.headers or ())
            elif isinstance(ev, h2.events.DataReceived):
                self._conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                if state is not None:
                    state["data"] += ev.data
            elif isinstance(ev, h2.events.StreamEnded | h2.events.StreamReset):
                if state is not None:
                    state["done"] = True
                    if isinstance(ev, h2.events.StreamReset):
                        state["reset"] = ev.error_code
            elif isinstance(ev, h2.events.ConnectionTerminated):
                for st in self._streams.values():
                    st["done"] = True
                    st.setdefault("reset", int(ev.error_code or 0))
        self._flush()

    def _send(self, sid: int, data: Buffer, *, end: bool) -> None:
        view = memoryview(data)
        while True:
            size = min(self._conn.local_flow_control_window(sid),
                       self._conn.max_outbound_frame_size, len(view))
            if size <= 0 and view:
                self._flush()
                self._pump()  # wait for a WINDOW_UPDATE
                if self._streams[sid].get("done"):
                    return  # the server answered early (an error): stop sending
                continue
            last = size == len(view)
            self._conn.send_data(sid, view[:size].tobytes(), end_stream=end and last)
            view = view[size:]
            self._flush()  # a frame at a time: h2 buffers what it frames until asked
            if last:
                return

    # -- calls ---------------------------------------------------------------------------------
    def unary(self, method: str, message: bytes, *, tail: BinaryIO | Buffer | None = None,
              tail_size: int = 0, on_progress: Callable[[int], None] | None = None,
              cancel: Any = None) -> bytes:
        """Call `method` (`/package.Service/Method`); the request is `message` followed by
        `tail_size` bytes of `tail`, a file or a buffer (the last field's value, already framed
        in `message`). `cancel` (a threading.Event): once set, the request is abandoned at its
        next frame (the stream is reset: the server drops what it got) and GrpcError 1 raised.
        Returns the reply message."""
        import h2.exceptions

        self._cancel = cancel
        try:
            return self._unary(method, message, tail, tail_size, on_progress)
        except h2.exceptions.H2Error as exc:  # e.g. the server went away between calls
            raise GrpcError(14, f"HTTP/2 connection to {self.authority} failed: {exc}") from exc

    def _unary(self, method: str, message: bytes, tail: BinaryIO | Buffer | None,
               tail_size: int, on_progress: Callable[[int], None] | None) -> bytes:
        sid = self._conn.get_next_available_stream_id()
        self._streams = {sid: {"headers": {}, "data": bytearray(), "done": False}}
        self._conn.send_headers(sid, [
            (":method", "POST"), (":scheme", "http"), (":path", method),
            (":authority", self.authority), ("content-type", "application/grpc"),
            ("te", "trailers"), ("user-agent", "rtenv"), *self.metadata])
        total = len(message) + tail_size
        self._send(sid, b"\x00" + struct.pack(">I", total) + message, end=not tail_size)
        if tail is not None and tail_size:
            try:
                buffer = isinstance(tail, bytes | bytearray | memoryview)
                stream = self._h2_stream(sid) if (DIRECT_FRAMES if buffer else SENDFILE) \
                    else None
                if stream is not None:
                    self._send_direct(sid, stream, tail, tail_size, on_progress)
                elif isinstance(tail, bytes | bytearray | memoryview):  # h2's framing, copying
                    self._send(sid, memoryview(tail)[:tail_size], end=True)
                else:  # an h2 without the stream object this relies on: the copying path
                    self._send_chunks(sid, tail, tail_size, on_progress)
            except BaseException:
                # the request is abandoned (its file failed, Ctrl-C): reset its stream, or the
                # server keeps a half-received message for as long as this connection lives
                with contextlib.suppress(Exception):
                    self._conn.reset_stream(sid, error_code=8)  # CANCEL
                    self._flush()
                raise
        self._flush()
        state = self._streams[sid]
        while not state["done"]:
            self._pump()
        return _reply(state, method)

    def _send_chunks(self, sid: int, tail: BinaryIO, tail_size: int,
                     on_progress: Callable[[int], None] | None) -> None:
        sent = 0
        while sent < tail_size and not self._streams[sid]["done"]:
            self._check_cancel(sid)
            chunk = tail.read(min(_CHUNK, tail_size - sent))
            if not chunk:
                raise GrpcError(13, f"the file shrank while sending ({sent} of {tail_size})")
            sent += len(chunk)
            self._send(sid, chunk, end=sent == tail_size)
            if on_progress is not None:
                on_progress(len(chunk))

    def _h2_stream(self, sid: int) -> Any:
        """h2's object for stream `sid`, whose send window `_send_direct` debits, or None when
        this h2 does not have it (a private API: the file then goes through h2's send_data)."""
        stream = getattr(self._conn, "_get_stream_by_id", lambda _sid: None)(sid)
        return stream if hasattr(stream, "outbound_flow_control_window") else None

    def _check_cancel(self, sid: int) -> None:
        if self._cancel is not None and self._cancel.is_set():
            raise GrpcError(1, "cancelled")  # the caller resets the stream

    def _send_direct(self, sid: int, stream: Any, tail: BinaryIO | Buffer,
                     tail_size: int, on_progress: Callable[[int], None] | None) -> None:
        """DATA frames written here, their payload by sendfile from a file or by sendmsg from
        a buffer (see the module doc); the stream ends with h2's own empty END_STREAM frame, so
        h2's stream state stays its own."""
        view, file = memoryview(b""), None  # the tail: a buffer's view, or a file
        if isinstance(tail, bytes | bytearray | memoryview):
            start, view = 0, memoryview(tail).cast("B")
            tail_size = min(tail_size, len(view))
        else:
            start, file = tail.tell(), tail
        sent = 0
        while sent < tail_size:
            if self._streams[sid]["done"]:
                return  # the server answered early (an error): stop sending
            size = min(self._conn.local_flow_control_window(sid),
                       self._conn.max_outbound_frame_size, _FILE_FRAME, tail_size - sent)
            if size <= 0:
                self._flush()
                self._pump()  # wait for a WINDOW_UPDATE
                continue
            self._check_cancel(sid)
            self._flush()  # anything h2 has framed (a SETTINGS ACK, a WINDOW_UPDATE) goes first
            header = struct.pack(">I", size)[1:] + b"\x00\x00" + struct.pack(">I", sid)
            try:
                if file is None:
                    self._sendmsg(header, view[sent:sent + size])
                    done = size
                else:
                    self._sock.sendall(header)
                    done = self._sock.sendfile(file, start + sent, size)
            except OSError as exc:
                raise GrpcError(14, f"connection to {self.authority} lost: {exc}") from exc
            if done != size:  # the frame header promised more: the connection is unusable
                self.close()
                raise GrpcError(13, f"the file shrank while sending ({sent + done} of "
                                f"{tail_size})")
            self._conn.outbound_flow_control_window -= size
            stream.outbound_flow_control_window -= size
            sent += size
            if on_progress is not None:
                on_progress(size)
        self._conn.end_stream(sid)

    def _sendmsg(self, header: bytes, payload: memoryview) -> None:
        """`header` then `payload`, whole, by sendmsg (no joined copy of them)."""
        parts = [memoryview(header), payload]
        while parts:
            n = self._sock.sendmsg(parts)
            while parts and n >= len(parts[0]):
                n -= len(parts[0])
                parts.pop(0)
            if parts:
                parts[0] = parts[0][n:]


def _text(value: str | bytes) -> str:
    """A header name or value as text (h2 gives str or bytes, by its header encoding setting)."""
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _reply(state: _Stream, method: str) -> bytes:
    headers = state["headers"]
    if "reset" in state and "grpc-status" not in headers:
        raise GrpcError(14, f"{method}: the server reset the stream (HTTP/2 error "
                        f"{state['reset']})")
    code = int(headers.get("grpc-status", "2"))
    if code:
        raise GrpcError(code, unquote(headers.get("grpc-message", "")) or "(no message)")
    data = state["data"]
    if len(data) < 5:  # noqa: PLR2004 - gRPC's length prefix
        return b""
    (size,) = struct.unpack(">I", data[1:5])
    return bytes(data[5:5 + size])
