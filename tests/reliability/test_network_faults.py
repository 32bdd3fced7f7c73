"""`rtenv push` against misbehaving HTTP targets: every wait is bounded, every failure a
TransportError (exit 1) naming the target, nothing reported as pushed that is not there.

The targets are real sockets on 127.0.0.1 served from a thread; the client's timeouts are
shortened through `transport.http.DEFAULT_TIMEOUTS` so each test ends in seconds.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rtenv_cli.core.errors import TransportError
from rtenv_cli.core.transport import http
from rtenv_cli.core.transport.agent_http import AgentClient, AgentTarget
from rtenv_cli.core.transport.ray_dashboard import RayDashboardTarget
from tests.support.cli import run_cli
from tests.support.ports import free_port
from tests.support.wait import until

SHORT = http.Timeouts(connect=2.0, read=1.0, floor=3.0, min_rate=1 << 20, retries=4,
                      backoff=0.2)
BOUND = 60  # generous: proves "does not hang", not a speed
URI = "gcs://_ray_pkg_0123456789abcdef.zip"
AGENT_INFO = json.dumps({"agent": "rtenv", "version": "test"}).encode()

Handler = Callable[["Conn"], None]


class Conn:
    """One accepted connection: the request read, and helpers to answer (or not)."""

    def __init__(self, sock: socket.socket, stop: threading.Event) -> None:
        self.sock, self.stop = sock, stop
        self.method, self.path = self._read_request()

    def _read_request(self) -> tuple[str, str]:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.sock.recv(65536)
            if not chunk:
                return "", ""
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _v = lines[0].split(" ", 2)
        length = next((int(v) for k, _, v in (ln.partition(":") for ln in lines[1:])
                       if k.strip().lower() == "content-length"), 0)
        left = length - len(rest)
        while left > 0:
            chunk = self.sock.recv(min(left, 65536))
            if not chunk:
                break
            left -= len(chunk)
        return method, path

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def reply(self, status: int, body: bytes, ctype: str = "application/json",
              extra: str = "") -> None:
        self.send(f"HTTP/1.1 {status} X\r\nConnection: close\r\nContent-Type: {ctype}\r\n"
                  f"Content-Length: "
                  f"{len(body)}\r\n{extra}\r\n".encode() + body)

    def hang(self) -> None:
        self.stop.wait(BOUND)


class FakeServer:
    """Serves each connection on its own thread with `handler`; /api/agent answers like an
    agent when `agent` is set (the address probe), everything else goes to the handler."""

    def __init__(self, handler: Handler, *, agent: bool = True, port: int = 0) -> None:
        self.handler, self.agent = handler, agent
        self.stop = threading.Event()
        self.calls: list[tuple[str, str]] = []
        self.errors: list[BaseException] = []
        self.lsock = socket.create_server(("127.0.0.1", port))
        self.lsock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.lsock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                sock, _ = self.lsock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._one, args=(sock,), daemon=True).start()

    def _one(self, sock: socket.socket) -> None:
        with sock:
            try:
                conn = Conn(sock, self.stop)
                if not conn.method:
                    return
                self.calls.append((conn.method, conn.path))
                if self.agent and conn.path == "/api/agent":
                    conn.reply(200, AGENT_INFO)
                    return
                self.handler(conn)
            except OSError as exc:
                self.errors.append(exc)

    def close(self) -> None:
        self.stop.set()
        self.lsock.close()
        self.thread.join(5)


@pytest.fixture(autouse=True)
def short_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http, "DEFAULT_TIMEOUTS", SHORT)


@pytest.fixture
def serve() -> Iterator[Callable[..., FakeServer]]:
    servers: list[FakeServer] = []

    def start(handler: Handler, **kw: bool | int) -> FakeServer:
        servers.append(FakeServer(handler, **kw))  # type: ignore[arg-type] - agent: bool, port: int
        return servers[-1]

    yield start
    for s in servers:
        s.close()


@pytest.fixture
def pkg(tmp_path: Path) -> Path:
    p = tmp_path / "p.zip"
    p.write_bytes(b"z" * 4096)
    return p


@pytest.fixture
def src(tmp_path: Path) -> Path:
    d = tmp_path / "src"
    d.mkdir()
    (d / "main.py").write_text("print('hi')\n")
    return d


def bounded(fn: Callable[[], object]) -> tuple[TransportError, float]:
    start = time.monotonic()
    with pytest.raises(TransportError) as info:
        fn()
    took = time.monotonic() - start
    assert took < BOUND
    return info.value, took


def test_accepts_and_never_answers_is_a_read_timeout(serve: Callable[..., FakeServer],
                                                     src: Path) -> None:
    server = serve(lambda c: c.hang())
    res = run_cli(["push", str(src), "--to", server.url])
    assert res.exit_code == 1, res.stderr
    assert f"the rtenv agent at {server.url} accepted the connection but sent no reply" \
        in res.stderr
    assert "within 1 s (read timeout)" in res.stderr
    assert "Traceback" not in res.stderr


def test_dashboard_stall_is_not_retried(serve: Callable[..., FakeServer], pkg: Path) -> None:
    server = serve(lambda c: c.hang(), agent=False)
    err, _ = bounded(lambda: RayDashboardTarget(server.url).upload(URI, pkg))
    assert "Ray dashboard" in err.message
    assert "read timeout" in err.message
    assert err.hint
    assert [c for c in server.calls if c[0] == "PUT"] == [("PUT", f"/api/packages/gcs/{URI[6:]}")]


def test_headers_then_stalled_body(serve: Callable[..., FakeServer], pkg: Path) -> None:
    def handler(c: Conn) -> None:
        c.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
        c.hang()

    server = serve(handler)
    err, _ = bounded(lambda: AgentTarget(server.url).upload(URI, pkg))
    assert "stopped sending its reply to PUT /api/packages/gcs/" in err.message
    assert "(read timeout)" in err.message


def test_trickled_body_ends_at_the_deadline(serve: Callable[..., FakeServer]) -> None:
    def handler(c: Conn) -> None:
        c.send(b"HTTP/1.1 404 Not Found\r\nContent-Length: 100000\r\n\r\n")
        while not c.stop.wait(0.5):  # a byte at a time, each within the read timeout
            c.send(b".")

    server = serve(handler, agent=False)
    err, _ = bounded(lambda: RayDashboardTarget(server.url).exists(URI))
    assert "ran out (deadline)" in err.message
    assert server.url in err.message


def test_truncated_chunked_reply(serve: Callable[..., FakeServer], src: Path) -> None:
    def handler(c: Conn) -> None:
        c.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n5\r\n{\"mis\r\n")  # then the socket closes

    server = serve(handler)
    res = run_cli(["push", "--once", str(src), "--to", server.url])
    assert res.exit_code == 1, res.stderr
    assert "truncated reply" in res.stderr
    assert server.url in res.stderr
    assert "internal error" not in res.stderr.lower()


def test_redirect_loop(serve: Callable[..., FakeServer], pkg: Path) -> None:
    server = serve(lambda c: c.reply(302, b"", extra=f"Location: {c.path}\r\n"), agent=False)
    err, _ = bounded(lambda: RayDashboardTarget(server.url).exists(URI))
    assert f"the Ray dashboard at {server.url} redirected GET" in err.message
    assert "more than 5 times" in err.message
    # the auth probe and the package call, each followed at most MAX_REDIRECTS times
    assert len(server.calls) <= 2 * (http.MAX_REDIRECTS + 1)


def test_non_json_from_an_agent_on_push_once(serve: Callable[..., FakeServer],
                                             src: Path) -> None:
    server = serve(lambda c: c.reply(200, b"<html>not json</html>"))
    res = run_cli(["push", "--once", str(src), "--to", server.url])
    assert res.exit_code == 1, res.stderr
    assert "not JSON" in res.stderr
    assert server.url in res.stderr
    assert "internal error" not in res.stderr.lower()


def _flood(size: int, sent: list[int], status: int = 500) -> Handler:
    """A reply of `size` bytes streamed as fast as the socket takes it (counted as it goes)."""
    def handler(c: Conn) -> None:
        c.send(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
               f"Content-Length: {size}\r\n\r\n".encode())
        block, n = b"E" * 65536, 0
        try:
            while n < size:
                c.send(block)
                n += len(block)
        finally:
            sent.append(n)

    return handler


def test_huge_error_body_is_not_read(serve: Callable[..., FakeServer], pkg: Path) -> None:
    size = 50 * 2**20
    sent: list[int] = []
    server = serve(_flood(size, sent), agent=False)
    err, _ = bounded(lambda: RayDashboardTarget(server.url).upload(URI, pkg))
    assert "HTTP 500" in err.message
    assert len(err.message) < 1000
    until(lambda: server.errors, timeout=BOUND,
          what="the server cut off (else the client read the whole body)")
    assert sent
    assert sent[0] < size


def test_refused_then_accepted_is_retried(serve: Callable[..., FakeServer], pkg: Path) -> None:
    port = free_port()
    target = AgentTarget(f"http://127.0.0.1:{port}")
    starter = threading.Timer(0.5, lambda: serve(lambda c: c.reply(200, b"{}"), port=port))
    starter.start()
    try:
        sent: list[int] = []
        target.upload(URI, pkg, on_progress=sent.append)  # a package PUT is idempotent
    finally:
        starter.join()
    assert sent == [pkg.stat().st_size]


def test_refused_for_good_is_an_error_after_bounded_retries(pkg: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    err, _ = bounded(lambda: AgentTarget(url).exists(URI))
    assert f"cannot reach the rtenv agent at {url} (connection refused; GET /api/packages/gcs/" \
        in err.message


def test_503_then_200_on_an_agent_check(serve: Callable[..., FakeServer]) -> None:
    replies = [503, 503, 200]
    server = serve(lambda c: c.reply(replies.pop(0), b"{}"))
    assert AgentTarget(server.url).exists(URI) is True
    assert len([c for c in server.calls if c[0] == "GET"]) == 3


def test_an_environment_build_may_take_longer_than_the_read_timeout(
        serve: Callable[..., FakeServer]) -> None:
    handle = {"key": "k", "holder": "h", "working_dir": None, "py_modules": [], "venv": None,
              "env_vars": {}, "entries": []}

    def handler(c: Conn) -> None:
        c.stop.wait(2 * SHORT.read)  # silent while it "builds", longer than the read timeout
        c.reply(200, json.dumps(handle).encode())

    server = serve(handler)
    assert AgentClient(server.url).get_or_create({}, holder="h").key == "k"


# -- issue 22 M7: every request through the one client, the address probe included ------------
@pytest.mark.parametrize("status", [500, 200])
def test_a_huge_reply_is_cut_on_every_call_of_a_push(serve: Callable[..., FakeServer],
                                                     src: Path, status: int) -> None:
    """A target answering every call (the address probe first) with 300 MB: each reply is
    read to its cap and the connection dropped, none to its end."""
    size = 300 * 2**20
    sent: list[int] = []
    server = serve(_flood(size, sent, status), agent=False)
    res = run_cli(["push", "--once", str(src), "--to", server.url])
    assert res.exit_code == 1, res.stderr
    assert server.url in res.stderr
    assert "internal error" not in res.stderr.lower()
    until(lambda: len(sent) >= len(server.calls), timeout=BOUND,
          what="the server to finish every reply it started")
    assert ("GET", "/api/agent") in server.calls
    assert len(sent) == len(server.calls)
    assert max(sent) < size, "a reply was read to its end"


def test_a_trickled_probe_reply_ends_at_the_deadline(serve: Callable[..., FakeServer],
                                                     src: Path) -> None:
    """`GET /api/agent` answered a byte at a time, each within the read timeout: the probe
    gives up at its deadline (the test's is 3 s) with an error naming the target."""
    def handler(c: Conn) -> None:
        c.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
               b"Content-Length: 100000\r\n\r\n")
        for _ in range(120):  # at most a minute: the old probe read it all, then went on
            if c.stop.wait(0.5):
                return
            c.send(b" ")

    server = serve(handler, agent=False)
    res = run_cli(["push", "--once", str(src), "--to", server.url])
    assert res.exit_code == 1, res.stderr
    assert f"the server at {server.url} was still sending its reply to GET /api/agent" \
        in res.stderr
    assert "ran out (deadline)" in res.stderr
    assert server.calls == [("GET", "/api/agent")]  # nothing after a failed probe


NOT_AGENTS = {
    "empty object": (200, b"{}", "application/json"),  # the red team's squatter
    "wrong types": (200, b'{"entries": [{"kind": 5}]}', "application/json"),
    "a web page": (404, b"<html>not found</html>", "text/html"),
    "other JSON error": (500, b'{"detail": "boom"}', "application/json"),
}


@pytest.mark.parametrize("reply", NOT_AGENTS.values(), ids=NOT_AGENTS.keys())
def test_cache_ls_against_a_server_that_is_not_an_agent(serve: Callable[..., FakeServer],
                                                        reply: tuple[int, bytes, str]) -> None:
    status, body, ctype = reply
    server = serve(lambda c: c.reply(status, body, ctype), agent=False)
    res = run_cli(["cache", "ls", "--agent", server.url])
    assert res.exit_code == 1, res.stderr
    assert f"{server.url} does not answer as an rtenv agent (GET /api/cache" in res.stderr
    assert "hint:" in res.stderr
    assert "internal error" not in res.stderr.lower()


def test_every_agent_reply_is_checked_before_use(serve: Callable[..., FakeServer]) -> None:
    server = serve(lambda c: c.reply(200, b'{"key": "k"}'), agent=False)
    client = AgentClient(server.url)
    calls: list[Callable[[], object]] = [
        lambda: client.get_or_create({}, holder="h"), client.info, client.cache,
        lambda: client.release("k", "h"), lambda: client.gc(dry_run=True),
        lambda: AgentTarget(server.url).missing_blobs({"uri": URI}),
        lambda: AgentTarget(server.url).commit_manifest({"uri": 5})]
    for call in calls:
        err, _ = bounded(call)
        assert "does not answer as an rtenv agent" in err.message, err.message


# -- the agent's download of a client's http(s) archive: the same client, the same bounds -----
def test_a_download_is_capped_and_cut(serve: Callable[..., FakeServer], tmp_path: Path) -> None:
    size = 300 * 2**20
    sent: list[int] = []
    server = serve(_flood(size, sent, 200), agent=False)
    dest = tmp_path / "x.zip"
    err, _ = bounded(lambda: http.download(f"{server.url}/x.zip", dest, limit=2**20))
    assert f"the server at {server.url} answered GET /x.zip with more than 1048576 bytes" \
        in err.message
    assert dest.stat().st_size <= 2**20
    until(lambda: sent, timeout=BOUND, what="the server to finish its reply")
    assert sent[0] < size


def test_a_trickled_download_ends_at_its_deadline(serve: Callable[..., FakeServer],
                                                  tmp_path: Path) -> None:
    def handler(c: Conn) -> None:
        c.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
        for _ in range(120):
            if c.stop.wait(0.5):
                return
            c.send(b"P")

    server = serve(handler, agent=False)
    err, _ = bounded(lambda: http.download(f"{server.url}/x.zip", tmp_path / "x.zip",
                                           limit=1024))
    assert "ran out (deadline)" in err.message


def test_a_download_gets_the_bytes_or_names_the_status(serve: Callable[..., FakeServer],
                                                       tmp_path: Path) -> None:
    server = serve(lambda c: c.reply(200, b"PK-archive", "application/zip")
                   if c.path == "/ok.zip" else c.reply(404, b"no such file", "text/plain"),
                   agent=False)
    http.download(f"{server.url}/ok.zip", tmp_path / "ok.zip", limit=1024)
    assert (tmp_path / "ok.zip").read_bytes() == b"PK-archive"
    err, _ = bounded(lambda: http.download(f"{server.url}/gone.zip", tmp_path / "g.zip",
                                           limit=1024))
    assert f"{server.url}/gone.zip: HTTP 404 no such file" in err.message
