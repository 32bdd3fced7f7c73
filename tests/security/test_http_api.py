"""The agent's HTTP API against abusive clients, on a real agent process on loopback: every
field of every route is checked (a client's mistake is a 4xx, never a 5xx), bodies over the
limits are refused before they are read, stalled connections are closed, and a flood of them
does not take the agent's file descriptors. The fuzzer draws request bodies from the agent's own
/openapi.json."""

from __future__ import annotations

import hashlib
import json
import resource
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests  # noqa: TID253 - tests are not on the CLI's startup path

from tests.support.agent import AgentProc, agent_process
from tests.support.ports import free_port, wait_for_port
from tests.support.procs import stop_group
from tests.support.wait import until

SHA = hashlib.sha256(b"x").hexdigest()
URI = "gcs://_ray_pkg_0123456789abcdef.zip"


def _deep(n: int) -> str:
    return '{"runtime_env": ' + "[" * n + "]" * n + ', "holder": "h"}'


def _env(**fields: Any) -> dict[str, Any]:
    return {"runtime_env": {}, "holder": "h", **fields}


def _entry(**fields: Any) -> dict[str, Any]:
    return {"uri": URI, "kind": "working_dir", "name": None,
            "entries": [{"path": "a.py", "is_dir": False, "mode": 0o644, "size": 1,
                         "sha256": SHA, **fields}]}


def _framed(manifest: dict[str, Any] | str) -> bytes:
    """`manifest` as POST /api/publish begins: its size, a newline, its JSON."""
    text = (manifest if isinstance(manifest, str) else json.dumps(manifest)).encode()
    return b"%d\n%s" % (len(text), text)


# (method, path, body): a dict is sent as JSON, a str or bytes as is; the status expected
ABUSE: list[tuple[str, str, Any, int]] = [
    # pid: only a positive int that fits is a pid (red-team 6)
    *[("POST", "/api/envs", _env(pid=pid), 400) for pid in ("abc", 1.5, 0, -1, 2**80, True)],
    *[("POST", "/api/envs", _env(lease_s=v), 400) for v in ("abc", 0, -5, [1])],
    ("POST", "/api/envs", '{"runtime_env": {}, "holder": "h", "lease_s": 1e400}', 400),
    ("POST", "/api/envs", _env(runtime_env={"env_vars": ["A=1"]}), 400),
    ("POST", "/api/envs", _env(runtime_env={"env_vars": "A=1"}), 400),
    ("POST", "/api/envs", _env(runtime_env={"env_vars": {"A": 1}}), 400),
    ("POST", "/api/envs", _env(runtime_env={"working_dir": 5}), 400),
    ("POST", "/api/envs", _env(runtime_env={"py_modules": "gcs://x.zip"}), 400),
    ("POST", "/api/envs", _env(runtime_env=[1]), 400),
    ("POST", "/api/envs", _env(holder=""), 400),
    ("POST", "/api/envs", _env(holder=5), 400),
    ("POST", "/api/envs", _env(extra=1), 400),
    ("POST", "/api/envs", {"holder": "h"}, 400),
    ("POST", "/api/envs", _deep(100_000), 400),
    ("POST", "/api/envs", _deep(40), 400),
    ("POST", "/api/envs", b"\xff\xfe not json", 400),
    ("POST", "/api/envs", "[]", 400),
    # what Ray's parsers refuse: 422, a ValidationError (red-team 17, code review section 1)
    ("POST", "/api/envs", _env(runtime_env={"pip": 5}), 422),
    ("POST", "/api/envs", _env(runtime_env={"pip": {"x": 1}}), 422),
    ("POST", "/api/envs", _env(runtime_env={"pip": {"packages": "six"}}), 422),
    # a file on the agent's machine: refused over HTTP (issue 17 hole 9, test_trust.py)
    ("POST", "/api/envs", _env(runtime_env={"pip": "requirements.txt"}), 403),
    ("POST", "/api/envs", _env(runtime_env={"pip": ["six"], "uv": ["six"]}), 422),
    ("POST", "/api/envs", _env(runtime_env={"uv": {"packages": ["six"],
                                                   "uv_pip_install_options": "-x"}}), 422),
    ("POST", "/api/envs", _env(runtime_env={"working_dir": "file:///etc"}), 403),
    ("POST", "/api/envs", _env(runtime_env={"working_dir": "gcs://_ray_pkg_00.zip"}), 422),
    # gc
    ("POST", "/api/gc", {"older_than_s": "abc"}, 400),
    ("POST", "/api/gc", {"keep_storage": "10GB"}, 400),
    ("POST", "/api/gc", {"keep_storage": -1}, 400),
    ("POST", "/api/gc", {"kinds": 5}, 400),
    ("POST", "/api/gc", {"kinds": [5]}, 400),
    ("POST", "/api/gc", {"purge": "yes"}, 400),
    ("POST", "/api/gc", '{"older_than_s": 1e400}', 400),
    ("POST", "/api/gc", "[" * 50_000 + "]" * 50_000, 400),
    # manifests, both routes
    *[(method, path, body, 400) for method, path in (("POST", "/api/manifests"),
                                                      ("POST", "/api/manifests/commit"))
      for body in (_entry(mode="x"), _entry(size="big"), _entry(mode=-1), _entry(path=5),
                   _entry(size=2**80), json.dumps(_entry(size=1)).replace('"size": 1',
                                                                          '"size": 1e400'),
                   {**_entry(), "entries": "x"}, {**_entry(), "uri": 5}, {"kind": "working_dir"},
                   "{" * 3000)],
    ("POST", "/api/manifests", {**_entry(), "kind": "zip"}, 400),
    # a save in one request: the same manifests, framed; then its blob records
    *[("POST", "/api/publish", _framed(body), 400)
      for body in (_entry(mode="x"), _entry(size=2**80), {**_entry(), "entries": "x"},
                   {"kind": "working_dir"}, "{" * 3000)],
    ("POST", "/api/publish", b"garbage\n{}", 400),
    ("POST", "/api/publish", b"-1\n", 400),
    ("POST", "/api/publish", b"%d\n" % (1 << 40), 413),
    ("POST", "/api/publish", _framed(_entry()) + b"garbage header\n", 422),
    ("POST", "/api/publish", _framed(_entry()) + f"{SHA} 99\nx".encode(), 422),
    ("POST", "/api/manifests", {**_entry(), "uri": "http://x"}, 422),
    # raw uploads and names
    ("PUT", "/api/packages/gcs/bad%20name%2A", b"zip", 422),
    ("PUT", "/api/blobs/nothex", b"x", 422),
    ("PUT", f"/api/blobs/{SHA}", b"not x", 422),
    ("POST", "/api/blobs", b"garbage header\n", 422),
    ("POST", "/api/blobs", f"{SHA} 99\nx".encode(), 422),
    ("GET", "/api/cache?kind=" + "k" * 500, None, 400),
    ("DELETE", "/api/envs/nokey/refs/job%2F42", None, 200),
    ("GET", "/download/nope/x.zip", None, 404),
]


# Every wrongly typed field of `pip`, `uv` and `conda` (issue 22 M6): Ray's parser refuses each
# (or, for a pip requirement that is not a string, `pip install` would), so the agent answers a
# 4xx naming the field, never a 500. None of these is valid: nothing is built.
_WRONG = {
    "packages": [5, 1.5, True, None, {"a": 1}, [5], [None], [["six"]], [{"a": 1}]],
    "check": [5, 1.5, "yes", None, [True], {"a": 1}],
    "version": [5, 1.5, True, None, ["1"], {"a": 1}],
    "install_options": [5, 1.5, True, "-x", None, {"a": 1}, [5], [None], [["-x"]], [True]],
}
_KEYS = {"pip": {"packages": "packages", "check": "pip_check", "version": "pip_version",
                 "install_options": "pip_install_options"},
         "uv": {"packages": "packages", "check": "uv_check", "version": "uv_version",
                "install_options": "uv_pip_install_options"}}
WRONG_TYPES: list[tuple[dict[str, Any], str]] = [
    *[({kind: {"packages": ["six"], key: value} if field != "packages" else {key: value}},
       key) for kind, keys in _KEYS.items() for field, key in keys.items()
      for value in _WRONG[field]],
    *[({kind: value}, kind) for kind in ("pip", "uv")
      for value in (5, 1.5, True, False, 0, {}, [5], [None], [["six"]], {"packages": ["six"],
                                                                            "other": 1})],
    *[({"conda": value}, "conda") for value in (5, 1.5, True, False, [1], ["x"])],
]


@pytest.mark.parametrize(("runtime_env", "field"), WRONG_TYPES,
                         ids=[json.dumps(r)[:60] for r, _f in WRONG_TYPES])
def test_a_wrongly_typed_requirement_field_is_a_4xx_naming_it(
        agent: AgentProc, runtime_env: dict[str, Any], field: str) -> None:
    for _ in range(2):  # the second time through the agent's memo of checked requests
        resp = _send(agent, "POST", "/api/envs", _env(runtime_env=runtime_env))
        assert resp.status_code in (400, 422), resp.text[:500]
        err = resp.json()["error"]
        assert field in err["message"] or field in (err.get("json_path") or []), err


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProc]:
    with agent_process(tmp_path_factory.mktemp("security") / "store") as proc:
        yield proc


def _send(agent: AgentProc, method: str, path: str, body: Any) -> requests.Response:
    kw: dict[str, Any] = {"json": body} if isinstance(body, dict | list) else {"data": body}
    return requests.request(method, agent.url + path, timeout=60, **kw)


@pytest.mark.parametrize(("method", "path", "body", "status"), ABUSE,
                         ids=[f"{m} {p[:40]} {str(b)[:40]}" for m, p, b, _s in ABUSE])
def test_abusive_request_is_a_client_error(agent: AgentProc, method: str, path: str, body: Any,
                                           status: int) -> None:
    resp = _send(agent, method, path, body)
    assert resp.status_code == status, resp.text[:500]
    if status >= 400:
        err = resp.json()["error"]
        assert err["code"]
        assert err["message"]


def test_a_poisoned_pid_is_refused_and_gc_keeps_working(agent: AgentProc) -> None:
    bad = _send(agent, "POST", "/api/envs", _env(pid="abc"))
    assert bad.status_code == 400
    assert "pid" in bad.json()["error"]["message"]
    assert _send(agent, "POST", "/api/gc", {"dry_run": True}).status_code == 200


def test_a_bad_pip_is_a_typed_422_that_the_client_decodes(agent: AgentProc) -> None:
    from rtenv_cli.core.errors import ValidationError
    from rtenv_cli.core.transport.agent_http import AgentClient

    resp = _send(agent, "POST", "/api/envs", _env(runtime_env={"pip": 5}))
    assert resp.status_code == 422
    err = resp.json()["error"]
    assert err["code"] == "invalid"
    assert err["python_type"] == "TypeError"  # Ray's exception type, in its own field
    with pytest.raises(ValidationError) as info:
        AgentClient(agent.url).get_or_create({"pip": 5}, holder="h")
    assert info.value.exit_code == 2


def test_bodies_over_the_limit_are_refused_before_they_are_read(agent: AgentProc) -> None:
    big = json.dumps(_env(runtime_env={"env_vars": {"A": "x" * (2 << 20)}}))
    assert _send(agent, "POST", "/api/envs", big).status_code == 413
    assert _send(agent, "POST", "/api/gc", big).status_code == 413
    # a declared length over the limit is answered at once, without sending the body
    host, port = agent.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"PUT /api/packages/gcs/_ray_pkg_0123456789abcdef.zip HTTP/1.1\r\n"
                     b"Host: x\r\nContent-Length: 9999999999\r\n\r\n")
        assert sock.recv(200).startswith(b"HTTP/1.1 413")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"POST /api/envs HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n")
        assert sock.recv(200).startswith(b"HTTP/1.1 413")

    def chunked() -> Iterator[bytes]:  # no Content-Length: counted while it streams
        yield b'{"runtime_env": {"env_vars": {"A": "'
        for _ in range(40):
            yield b"x" * 65536
        yield b'"}}, "holder": "h"}'

    assert requests.post(agent.url + "/api/envs", data=chunked(), timeout=60).status_code == 413
    assert [p for p in (agent.root / "tmp").iterdir() if p.name.startswith("upload.")] == []


def test_fuzzed_requests_from_the_openapi_schema_never_get_a_5xx(agent: AgentProc) -> None:
    import httpx
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tests.security.fuzz import requests_from_schema

    schema = httpx.get(agent.url + "/openapi.json", timeout=30).json()
    client = httpx.Client(base_url=agent.url, timeout=60)

    @settings(max_examples=300, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def run(data: st.DataObject) -> None:
        method, path, kw = data.draw(requests_from_schema(schema))
        resp = client.request(method, path, **kw)
        if resp.status_code == 501:
            assert resp.json()["error"]["code"] == "unsupported"
            return
        assert resp.status_code < 500, (method, path, kw, resp.text[:500])

    try:
        run()
    finally:
        client.close()


# -- slow and stalled clients -----------------------------------------------------------------
def _stalled(port: int, kind: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    if kind == "headers":
        sock.sendall(b"POST /api/envs HTTP/1.1\r\nHost: x\r\n")
    elif kind == "body":
        sock.sendall(b"POST /api/envs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    return sock


def _closed_by_peer(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except (TimeoutError, ConnectionError):
        return False


def test_stalled_connections_are_closed(tmp_path: Path) -> None:
    with agent_process(tmp_path / "s", "--read-timeout", "1") as agent:
        port = int(agent.url.rsplit(":", 1)[1])
        socks = [_stalled(port, kind) for kind in ("nothing", "headers", "body") * 5]
        try:
            assert all(_closed_by_peer(s, within=30) for s in socks)
            assert requests.get(agent.url + "/api/agent", timeout=30).status_code == 200
        finally:
            for s in socks:
                s.close()


def _limit_fds(n: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


def test_a_flood_of_stalled_connections_does_not_take_the_agent_s_descriptors(
        tmp_path: Path) -> None:
    """With 128 descriptors (hard limit), 150 silent connections and a read timeout longer
    than the test: the agent closes the longest-stalled ones to stay under its limit, and a
    client still gets answers."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "rtenv_cli", "agent", "--port", str(port),
                             "--root", str(tmp_path / "s"), "--read-timeout", "600",
                             "--no-token"],
                            preexec_fn=lambda: _limit_fds(128),  # noqa: PLW1509 - rlimit only
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    socks: list[socket.socket] = []
    try:
        wait_for_port(port, timeout=30)
        for _ in range(150):
            socks.append(_stalled(port, "nothing"))
        for _ in range(3):
            until(lambda: requests.get(f"http://127.0.0.1:{port}/api/agent",
                                       timeout=5).status_code == 200,
                  what="an answer from the flooded agent", retry_on=(requests.RequestException,))
        assert proc.poll() is None
    finally:
        for s in socks:
            s.close()
        stop_group(proc, timeout=20)
