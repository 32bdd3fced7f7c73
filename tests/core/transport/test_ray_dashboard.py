"""RayDashboardTarget against a real local HTTP server (retries, auth discovery, 413/500)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from rtenv_cli.core.errors import PackageTooLargeError, TransportError
from rtenv_cli.core.transport.http import Timeouts
from rtenv_cli.core.transport.ray_dashboard import RayDashboardTarget, load_token


class FakeDashboard(BaseHTTPRequestHandler):
    script: ClassVar[list[tuple[int, str]]] = []  # responses to package calls, in order
    seen: ClassVar[list[tuple[str, str, dict[str, str], int]]] = []
    mode = "disabled"

    def log_message(self, *_a: object) -> None:
        pass

    def _reply(self, code: int, body: str) -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        if self.path == "/api/authentication_mode":
            self._reply(200, json.dumps({"authentication_mode": self.mode}))
            return
        self.seen.append((self.command, self.path, dict(self.headers), len(body)))
        code, text = self.script.pop(0) if self.script else (200, "")
        self._reply(code, text)

    do_GET = do_PUT = _handle


@pytest.fixture
def dashboard() -> Iterator[str]:
    FakeDashboard.script, FakeDashboard.seen, FakeDashboard.mode = [], [], "disabled"
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeDashboard)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_exists_upload_and_retries(dashboard: str, tmp_path: Path) -> None:
    zip_path = tmp_path / "p.zip"
    zip_path.write_bytes(b"z" * 1000)
    FakeDashboard.script = [(404, "no"), (503, "busy"), (502, "busy"), (200, "")]
    t = RayDashboardTarget(dashboard, timeouts=Timeouts(backoff=0))  # retries at once
    assert t.exists("gcs://_ray_pkg_1.zip") is False
    sent: list[int] = []
    t.upload("gcs://_ray_pkg_1.zip", zip_path, on_progress=sent.append)
    assert sent == [1000]
    methods = [(m, p, size) for m, p, _h, size in FakeDashboard.seen]
    assert methods == [("GET", "/api/packages/gcs/_ray_pkg_1.zip", 0)] + \
        [("PUT", "/api/packages/gcs/_ray_pkg_1.zip", 1000)] * 3
    headers = FakeDashboard.seen[-1][2]
    assert "Origin" not in headers
    assert not headers.get("User-Agent", "").startswith("Mozilla")


def test_500_entity_too_large_maps_like_413(dashboard: str, tmp_path: Path) -> None:
    zip_path = tmp_path / "p.zip"
    zip_path.write_bytes(b"z")
    FakeDashboard.script = [(500, "aiohttp...HTTPRequestEntityTooLarge...")]
    with pytest.raises(PackageTooLargeError, match="upload limit"):
        RayDashboardTarget(dashboard).upload("gcs://_ray_pkg_2.zip", zip_path)


def test_precheck_names_offenders(tmp_path: Path) -> None:
    t = RayDashboardTarget("http://127.0.0.1:9")
    t.max_upload_bytes = 10
    t.offenders["gcs://_ray_pkg_3.zip"] = [("weights/", 2**30)]
    zip_path = tmp_path / "p.zip"
    zip_path.write_bytes(b"z" * 100)
    with pytest.raises(PackageTooLargeError) as info:
        t.upload("gcs://_ray_pkg_3.zip", zip_path)
    assert "weights/ (1024.0 MiB)" in info.value.message
    assert "--stage-to" in info.value.hint


def test_token_discovery_and_errors(dashboard: str, tmp_path: Path) -> None:
    FakeDashboard.mode = "token"
    with pytest.raises(TransportError, match="requires a token"):
        RayDashboardTarget(dashboard, env={"HOME": str(tmp_path)}).exists("gcs://x.zip")
    t = RayDashboardTarget(dashboard, env={"RAY_AUTH_TOKEN": "abc"})
    FakeDashboard.script = [(403, "Forbidden")]
    with pytest.raises(TransportError, match="403"):
        t.exists("gcs://x.zip")
    assert FakeDashboard.seen[-1][2]["Authorization"] == "Bearer abc"


def test_load_token_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "tok"
    f.write_text("from-file\nsecond line\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert load_token({"RAY_AUTH_TOKEN": " env ", "RAY_AUTH_TOKEN_PATH": str(f)}) == "env"
    assert load_token({"RAY_AUTH_TOKEN_PATH": str(f)}) == "from-file"
    assert load_token({}) is None
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("home-token\n")
    assert load_token({}) == "home-token"
