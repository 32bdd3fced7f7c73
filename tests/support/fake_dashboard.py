"""A stand-in for a Ray dashboard's node summary (`GET /nodes?view=summary`) on loopback: what
it answers is set per test, so a dashboard naming any GCS, or none, can be tried."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar


class SummaryDashboard(BaseHTTPRequestHandler):
    """`reply` (status, JSON body) to every GET; each path asked is noted in `seen`."""

    reply: ClassVar[tuple[int, object]] = (404, {})
    seen: ClassVar[list[str]] = []

    def log_message(self, *_a: object) -> None:
        pass

    def do_GET(self) -> None:
        self.seen.append(self.path)
        code, doc = self.reply
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def raylet(flags: str, *, head: bool = True) -> dict[str, object]:
    """One node of the summary: its raylet's argv (Ray's: one flag holds a worker command line
    with spaces, and the agents' `--cluster-id-hex` is not the raylet's `--cluster-id`)."""
    words = flags.split()
    return {"raylet": {"isHeadNode": head},
            "cmdline": ["raylet", f"--python_worker_command=python w.py {' '.join(words)}",
                        *words, "--cluster-id-hex=ffff"]}


def summary(*nodes: dict[str, object]) -> tuple[int, object]:
    return 200, {"result": True, "data": {"summary": list(nodes)}}


@contextmanager
def fake_dashboard() -> Iterator[str]:
    SummaryDashboard.reply, SummaryDashboard.seen = (404, {}), []
    server = ThreadingHTTPServer(("127.0.0.1", 0), SummaryDashboard)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
