"""A request body as a blocking file for a worker thread, pulled from the event loop chunk by
chunk: an upload is written straight into its destination files, never spooled first."""

from __future__ import annotations

from typing import Any


class BodyReader:
    """`read(n)` and `readline(limit)` over an ASGI request's `stream()`; use it only from a
    thread the event loop started (`run_in_threadpool`), which is what `from_thread` needs."""

    def __init__(self, stream: Any) -> None:
        self._chunks = stream.__aiter__()
        self._buf = bytearray()
        self._done = False

    def _fill(self) -> bool:
        if self._done:
            return False
        from anyio import from_thread

        try:
            chunk = from_thread.run(self._chunks.__anext__)
        except StopAsyncIteration:
            self._done = True
            return False
        self._buf += chunk
        return True

    def read(self, n: int = -1) -> bytes:
        while (n < 0 or len(self._buf) < n) and self._fill():
            pass
        n = len(self._buf) if n < 0 else min(n, len(self._buf))
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def readline(self, limit: int = -1) -> bytes:
        while True:
            end = self._buf.find(b"\n")
            if end >= 0 and (limit < 0 or end < limit):
                return self.read(end + 1)
            if 0 <= limit <= len(self._buf) or not self._fill():
                return self.read(limit)
