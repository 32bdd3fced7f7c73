"""The agent over HTTP, as a real process: Ray's package protocol, delta uploads, environments,
tokens, tampered uploads, one build for concurrent creates, SIGKILL mid-build."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests  # noqa: TID253 - tests are not on the CLI's startup path

from rtenv_cli.core.agent.hits import create_app
from rtenv_cli.core.agent.openapi import SCHEMA
from rtenv_cli.core.agent.server import AgentConfig
from rtenv_cli.core.errors import TransportError
from rtenv_cli.core.transport.agent_http import AgentClient, AgentTarget
from tests.support.agent import AgentProc, agent_process
from tests.support.packages import make_tree, ray_package
from tests.support.wait import until

TOKEN = "s3cret-token"  # noqa: S105 - a test token


def test_ray_package_protocol(agent: AgentProc, tmp_path: Path) -> None:
    uri, zpath = ray_package(make_tree(tmp_path / "wd", {"a.py": "1"}), tmp_path)
    name = uri.removeprefix("gcs://")
    assert requests.get(f"{agent.url}/api/packages/gcs/{name}", timeout=10).status_code == 404
    assert requests.head(f"{agent.url}/api/packages/gcs/{name}", timeout=10).status_code == 404
    put = requests.put(f"{agent.url}/api/packages/gcs/{name}", data=zpath.read_bytes(),
                       timeout=10)
    assert put.status_code == 200
    assert requests.get(f"{agent.url}/api/packages/gcs/{name}", timeout=10).status_code == 200
    got = requests.get(f"{agent.url}/api/packages/gcs/{name}?download=1", timeout=10)
    assert got.content == zpath.read_bytes()
    target = AgentTarget(agent.url)
    assert target.exists(uri)


def test_tampered_and_truncated_uploads_are_rejected(agent: AgentProc, tmp_path: Path) -> None:
    uri, zpath = ray_package(make_tree(tmp_path / "wd", {"a.py": "x = 1\n" * 500}), tmp_path)
    name = uri.removeprefix("gcs://")
    data = bytearray(zpath.read_bytes())
    other_uri, other_zip = ray_package(make_tree(tmp_path / "o", {"a.py": "evil()\n"}), tmp_path)
    bad = requests.put(f"{agent.url}/api/packages/gcs/{name}", data=other_zip.read_bytes(),
                       timeout=10)
    assert bad.status_code == 422
    assert "does not match" in bad.json()["error"]["message"]
    # truncated on the wire: the client promises more bytes than it sends, then hangs up
    host, port = agent.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"PUT /api/packages/gcs/{name} HTTP/1.1\r\nHost: x\r\n"
                     f"Content-Length: {len(data)}\r\n\r\n".encode() + bytes(data[:100]))
        sock.shutdown(socket.SHUT_WR)
        sock.recv(1000)
    # a blob whose bytes do not hash to its name
    sha = hashlib.sha256(b"good").hexdigest()
    assert requests.put(f"{agent.url}/api/blobs/{sha}", data=b"evil",
                        timeout=10).status_code == 422
    # the hung-up upload's temp file goes once the agent sees the connection close
    until(lambda: not any((agent.root / "tmp").iterdir()),
          what="the truncated upload's temp file removed")
    assert requests.get(f"{agent.url}/api/packages/gcs/{name}", timeout=10).status_code == 404
    assert not (agent.root / "blobs" / sha[:2] / sha).exists()
    assert not (agent.root / "packages" / other_uri.removeprefix("gcs://")).exists()
    assert [p for p in (agent.root / "tmp").iterdir()] == []


def test_a_name_that_holds_a_package_refuses_other_bytes(agent: AgentProc,
                                                        tmp_path: Path) -> None:
    """A second PUT of a name with other bytes is a 409, and an environment made from the name
    has the first bytes; the same bytes again are a 200. For Ray's hash names, other bytes are
    refused by the hash (422), as on a first upload (issue 22 M6)."""
    import zipfile

    def zipped(name: str, text: str) -> Path:
        path = tmp_path / name
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("main.py", text)
        return path

    other = zipped("other.zip", "VALUE = 'other'\n")
    first, second = zipped("first.zip", "VALUE = 1\n").read_bytes(), other.read_bytes()
    url = f"{agent.url}/api/packages/gcs/my_pkg.zip"
    assert requests.put(url, data=first, timeout=30).status_code == 200
    assert requests.put(url, data=first, timeout=30).status_code == 200  # the same: idempotent
    again = requests.put(url, data=second, timeout=30)
    assert again.status_code == 409, again.text
    err = again.json()["error"]
    assert err["code"] == "package-conflict"
    assert "gcs://my_pkg.zip" in err["message"]
    assert "new name" in err["hint"]
    from rtenv_cli.core.errors import PackageConflictError

    with pytest.raises(PackageConflictError, match="already stored with other content"):
        AgentTarget(agent.url).upload("gcs://my_pkg.zip", other)
    handle = AgentClient(agent.url).get_or_create({"working_dir": "gcs://my_pkg.zip"},
                                                  holder="h")
    assert (Path(handle.working_dir) / "main.py").read_text() == "VALUE = 1\n"
    assert requests.get(url + "?download=1", timeout=30).content == first
    # a hash name: the same tree zipped again passes; another tree is refused by its hash
    uri, zpath = ray_package(make_tree(tmp_path / "wd", {"a.py": "1"}), tmp_path)
    named = f"{agent.url}/api/packages/gcs/{uri.removeprefix('gcs://')}"
    assert requests.put(named, data=zpath.read_bytes(), timeout=30).status_code == 200
    assert requests.put(named, data=zpath.read_bytes(), timeout=30).status_code == 200
    assert requests.put(named, data=second, timeout=30).status_code == 422


def test_an_http_working_dir_is_fetched_by_the_bounded_client(agent: AgentProc,
                                                              tmp_path: Path) -> None:
    """The agent downloads a client's http(s) archive through transport.http.download (a
    deadline and a size cap, tests/reliability/test_network_faults.py): the archive arrives,
    and a missing one is a 422 naming the URL and its status."""
    import http.server
    import threading

    from tests.support.packages import crafted_zip

    site = tmp_path / "site"
    site.mkdir()
    crafted_zip(site / "proj.zip", [("proj-main/app.py", b"print('remote')\n")])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a, **kw:
                                             http.server.SimpleHTTPRequestHandler(
                                                 *a, directory=str(site), **kw))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        handle = AgentClient(agent.url).get_or_create({"working_dir": f"{base}/proj.zip"},
                                                      holder="h")
        assert (Path(handle.working_dir) / "app.py").read_text() == "print('remote')\n"
        gone = requests.post(f"{agent.url}/api/envs", timeout=60, json={
            "runtime_env": {"working_dir": f"{base}/gone.zip"}, "holder": "h"})
        assert gone.status_code == 422, gone.text  # the request's archive: a client error
        assert f"cannot fetch {base}/gone.zip: " in gone.json()["error"]["message"]
        assert f"{base}/gone.zip: HTTP 404" in gone.json()["error"]["message"]
    finally:
        server.shutdown()
        server.server_close()


def test_delta_protocol_over_http(agent: AgentProc, tmp_path: Path) -> None:
    src = make_tree(tmp_path / "wd", {"a.py": "a\n", "s/b.py": "b\n"})
    uri, _zip = ray_package(src, tmp_path)
    entries = [{"path": rel, "is_dir": False, "mode": 0o644, "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest()}
               for rel, data in (("a.py", b"a\n"), ("s/b.py", b"b\n"))]
    manifest = {"uri": uri, "kind": "working_dir", "name": None, "entries": entries}
    target = AgentTarget(agent.url)
    missing = target.missing_blobs(manifest)
    assert len(missing) == 2
    for entry, rel in zip(entries, ("a.py", "s/b.py"), strict=True):
        target.put_blob(entry["sha256"], src / rel)
    assert target.missing_blobs(manifest) == []
    assert target.commit_manifest(manifest)["uri"] == uri
    assert target.exists(uri)


def manifest_of(src: Path, uri: str) -> dict:
    entries = []
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        data = path.read_bytes()
        entries.append({"path": path.relative_to(src).as_posix(), "is_dir": False,
                        "mode": 0o644, "size": len(data),
                        "sha256": hashlib.sha256(data).hexdigest()})
    return {"uri": uri, "kind": "working_dir", "name": None, "entries": entries}


def _zip_members(data: bytes | Path) -> dict[str, bytes]:
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(data) if isinstance(data, bytes) else data) as zf:
        return {i.filename: zf.read(i) for i in zf.infolist()}


def test_a_save_is_published_in_one_request(agent: AgentProc, tmp_path: Path) -> None:
    """POST /api/publish: the manifest, then the blobs, stored and committed in one request;
    a manifest the agent refuses stores nothing, a bad record commits nothing."""
    from rtenv_cli.core.watch.delta import relative_manifest

    src = make_tree(tmp_path / "wd", {"a.py": "A = 1\n", "b.py": "B = 1\n"})
    for path in src.iterdir():
        path.chmod(0o644)
    uri1, _ = ray_package(src, tmp_path)
    first = manifest_of(src, uri1)
    target = AgentTarget(agent.url)
    calls: list[str] = []
    real_call = target.http.call
    target.http.call = lambda method, path, **kw: calls.append(path) or real_call(  # type: ignore[method-assign]
        method, path, **kw)
    blobs = [(e["sha256"], src / e["path"]) for e in first["entries"]]
    assert target.publish(first, blobs)["uri"] == uri1
    (src / "a.py").write_text("A = 'edited'\n")
    uri2, ray_zip = ray_package(src, tmp_path)
    body = relative_manifest(first, manifest_of(src, uri2))
    assert target.publish(body, [(body["upsert"][0]["sha256"], src / "a.py")])["uri"] == uri2
    assert calls == ["/api/publish", "/api/publish"]
    got = requests.get(f"{agent.url}/api/packages/gcs/{uri2.removeprefix('gcs://')}"
                       "?download=1", timeout=30)
    assert _zip_members(got.content) == _zip_members(ray_zip)

    blob = b"C = 1\n"
    sha = hashlib.sha256(blob).hexdigest()
    record = f"{sha} {len(blob)}\n".encode() + blob
    manifest = json.dumps({**first, "uri": "gcs://_ray_pkg_0123456789abcdef.zip"}).encode()
    for raw, status in ((b"5\n{not}" + record, 400),  # not JSON
                        (b"%d\n" % (1 << 40) + record, 413),  # over the manifest limit
                        (b"99\n{}", 400),  # cut short
                        (b"%d\n" % len(manifest) + manifest + record[:-2], 422)):  # truncated
        reply = requests.post(f"{agent.url}/api/publish", data=raw, timeout=30)
        assert reply.status_code == status, (raw[:40], reply.text)
        assert reply.json()["error"]["message"]
    assert AgentTarget(agent.url).missing_blobs({**first, "entries": [
        {"path": "c.py", "is_dir": False, "mode": 0o644, "size": len(blob), "sha256": sha}]}
    ) == [sha]  # nothing stored by the refused requests
    assert not target.exists("gcs://_ray_pkg_0123456789abcdef.zip")


def test_a_save_to_an_agent_without_the_one_request_route_takes_two(tmp_path: Path) -> None:
    """An older agent answers 404 to POST /api/publish: the blobs and the commit go as two
    requests, and go so from then on."""
    import http.server
    import threading

    seen: list[str] = []

    class Older(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.path)
            if self.headers.get("Transfer-Encoding") == "chunked":
                while (size := int(self.rfile.readline(), 16)):
                    self.rfile.read(size + 2)
                self.rfile.readline()
            else:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
            found = self.path != "/api/publish"
            body = (json.dumps({"uri": "gcs://_ray_pkg_0123456789abcdef.zip"}).encode()
                    if found else b"Not Found")
            self.send_response(200 if found else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Older)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        (tmp_path / "a.py").write_text("A = 1\n")
        blob = [(hashlib.sha256(b"A = 1\n").hexdigest(), tmp_path / "a.py")]
        target = AgentTarget(f"http://127.0.0.1:{server.server_address[1]}")
        for _ in range(2):
            assert target.publish({"uri": "gcs://_ray_pkg_0123456789abcdef.zip",
                                   "entries": []}, blob)["uri"]
    finally:
        server.shutdown()
        server.server_close()
    assert seen == ["/api/publish", "/api/blobs", "/api/manifests/commit",
                    "/api/blobs", "/api/manifests/commit"]


def test_delta_batch_and_relative_commit_over_http(agent: AgentProc, tmp_path: Path) -> None:
    from rtenv_cli.core.watch.delta import relative_manifest

    src = make_tree(tmp_path / "wd", {f"m{i}.py": f"X = {i}\n" for i in range(50)})
    for path in src.iterdir():
        path.chmod(0o644)
    uri1, _ = ray_package(src, tmp_path)
    first = manifest_of(src, uri1)
    target = AgentTarget(agent.url)
    missing = target.missing_blobs(first)
    target.put_blobs([(sha, src / next(e["path"] for e in first["entries"]
                                       if e["sha256"] == sha)) for sha in missing])
    assert target.missing_blobs(first) == []
    target.commit_manifest(first)
    (src / "m7.py").write_text("X = 'edited'\n")
    (src / "m8.py").unlink()
    uri2, ray_zip = ray_package(src, tmp_path)
    body = relative_manifest(first, manifest_of(src, uri2))
    assert len(body["upsert"]) == 1
    assert body["remove"] == ["m8.py"]
    target.put_blobs([(body["upsert"][0]["sha256"], src / "m7.py")])
    assert target.commit_manifest(body)["uri"] == uri2
    got = requests.get(f"{agent.url}/api/packages/gcs/{uri2.removeprefix('gcs://')}"
                       "?download=1", timeout=30)
    assert got.status_code == 200
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(got.content)) as theirs, zipfile.ZipFile(ray_zip) as ray:
        assert {i.filename: theirs.read(i) for i in theirs.infolist()} == \
            {i.filename: ray.read(i) for i in ray.infolist()}


def test_envs_cache_hit_release_and_gc(agent: AgentProc) -> None:
    client = AgentClient(agent.url)
    first = client.get_or_create({"pip": ["six==1.16.0"]}, holder="job-1")
    assert first.built
    second = client.get_or_create({"pip": ["six==1.16.0"]}, holder="job-2")
    assert second.built == ()  # a hit: nothing rebuilt (its latency is the benchmark's)
    assert second.venv == first.venv
    listing = client.cache()
    assert [e["refs"] for e in listing["entries"]] == [2]
    envs = requests.get(f"{agent.url}/api/envs", timeout=10).json()["envs"]
    assert [(e["key"], e["holders"]) for e in envs] == [(first.key, 2)]
    client.release(first.key, "job-1")
    client.release(second.key, "job-2")
    assert [e["refs"] for e in client.cache()["entries"]] == [0]
    dry = client.gc(purge=True, dry_run=True)
    assert len(dry["plan"]["remove"]) == 1
    assert client.cache()["entries"]
    done = client.gc(purge=True)
    assert len(done["removed"]) == 1
    assert client.cache()["entries"] == []
    unsupported = requests.post(f"{agent.url}/api/envs", timeout=10,
                                json={"runtime_env": {"conda": "x"}, "holder": "h"})
    assert unsupported.status_code == 501
    assert "not supported by the rtenv agent" in unsupported.json()["error"]["message"]


def test_concurrent_identical_creates_build_once(agent: AgentProc) -> None:
    client = AgentClient(agent.url)

    def create(i: int) -> tuple[str, ...]:
        return client.get_or_create({"uv": ["six==1.17.0"]}, holder=f"h{i}").built

    with ThreadPoolExecutor(16) as pool:
        built = list(pool.map(create, range(16)))
    assert sum(1 for b in built if b) == 1
    assert client.cache()["entries"][0]["refs"] == 16


def test_several_worker_processes_share_the_store_and_build_once(tmp_path: Path) -> None:
    uri, zpath = ray_package(make_tree(tmp_path / "wd", {"a.py": "A = 1\n"}), tmp_path)
    with agent_process(tmp_path / "store", "--workers", "2") as agent:
        AgentTarget(agent.url).upload(uri, zpath)
        client = AgentClient(agent.url)

        def create(i: int) -> tuple[tuple[str, ...], str]:
            session = requests.Session()  # a connection each: requests spread over workers
            resp = session.post(f"{agent.url}/api/envs", timeout=60, json={
                "runtime_env": {"working_dir": uri, "pip": ["six==1.17.0"]},
                "holder": f"h{i}"}).json()
            return tuple(resp["built"]), str(resp["key"])

        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(create, range(16)))
        built = [b for b, _k in results]
        assert sum(len(b) for b in built) == 2  # the unpacked working_dir and the venv, once
        assert len({k for _b, k in results}) == 1
        assert {e["refs"] for e in client.cache()["entries"] if e["kind"] != "package"} == {16}
        children = subprocess.run(["pgrep", "-P", str(agent.proc.pid)], capture_output=True,
                                  text=True, check=False).stdout.split()
        assert len(children) >= 2  # uvicorn's supervisor and its workers


def test_token_required_and_constant_time_checked(tmp_path: Path) -> None:
    with agent_process(tmp_path / "s", token=TOKEN) as agent:
        url = f"{agent.url}/api/agent"
        assert requests.get(url, timeout=10).status_code == 401
        assert requests.get(url, headers={"Authorization": "Bearer nope"},
                            timeout=10).status_code == 403
        ok = requests.get(url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        assert ok.json()["agent"] == "rtenv"
        with pytest.raises(TransportError, match="refused the token"):
            AgentClient(agent.url, token=TOKEN[::-1]).info()
        assert AgentClient(agent.url, token=TOKEN).info()["agent"] == "rtenv"


def test_non_loopback_bind_needs_a_token(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "rtenv_cli", "agent", "--host", "0.0.0.0",
                           "--root", str(tmp_path)], capture_output=True, text=True, timeout=30,
                          check=False)
    assert proc.returncode == 2
    assert "without a token" in proc.stderr


_SLOW_BACKEND = '''
import time
def get_requires_for_build_wheel(config_settings=None):
    return []
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    open(__file__ + ".started", "w").close()
    time.sleep(120)
'''


def test_sigkill_during_build_then_restart(tmp_path: Path) -> None:
    slow = tmp_path / "slowpkg"
    slow.mkdir()
    (slow / "pyproject.toml").write_text(
        '[project]\nname = "slowpkg"\nversion = "1"\n'
        '[build-system]\nrequires = []\nbuild-backend = "slow_backend"\nbackend-path = ["."]\n')
    (slow / "slow_backend.py").write_text(_SLOW_BACKEND)
    root = tmp_path / "store"
    # a local sdist is named by file://: the agent reads only what it was told to share
    with agent_process(root, "--allow-file-root", str(slow)) as agent:
        client = AgentClient(agent.url)
        client.get_or_create({"pip": ["six==1.16.0"]}, holder="kept")
        pool = ThreadPoolExecutor(1)
        pending = pool.submit(client.get_or_create, {"pip": [f"slowpkg @ file://{slow}"]},
                              holder="slow")
        until((slow / "slow_backend.py.started").exists, what="the slow build to start")
        assert list((root / "tmp").iterdir())  # mid-build: only in tmp/
        agent.kill()
        with pytest.raises(TransportError):
            pending.result(timeout=30)
        pool.shutdown()
    with agent_process(root) as again:
        assert list((root / "tmp").iterdir()) == []
        entries = AgentClient(again.url).cache()["entries"]
        assert [e["label"] for e in entries] == ["six==1.16.0"]  # published survives, no partial
        handle = AgentClient(again.url).get_or_create({"pip": ["six==1.16.0"]}, holder="x")
        assert handle.built == ()
        assert Path(handle.venv, "bin", "python").exists()  # type: ignore[arg-type]


def test_budget_enforced_after_create(tmp_path: Path) -> None:
    with agent_process(tmp_path / "s", "--max-size", "1B") as agent:
        client = AgentClient(agent.url)
        a = client.get_or_create({"pip": ["six==1.16.0"]}, holder="a")
        client.release(a.key, "a")
        client.get_or_create({"pip": ["six==1.17.0"]}, holder="b")
        labels = [e["label"] for e in client.cache()["entries"]]
        assert labels == ["six==1.17.0"]  # the unreferenced one went; the held one stays


def test_openapi_schema_matches_routes(tmp_path: Path) -> None:
    from starlette.routing import Route

    app = create_app(AgentConfig(root=tmp_path / "s"))
    routes: dict[str, set[str]] = {}
    for route in app.routes:
        assert isinstance(route, Route)
        path = route.path.replace(":path}", "}")  # a convertor is not part of the OpenAPI path
        routes.setdefault(path, set()).update(m.lower() for m in route.methods or ())
    documented = {path: {m for m in ops if m != "parameters"}
                  for path, ops in SCHEMA["paths"].items()}
    assert set(routes) == set(documented)
    for path, methods in routes.items():
        assert methods - {"head"} <= documented[path] | {"head"}, path
    with agent_process(tmp_path / "s2") as agent:
        assert requests.get(f"{agent.url}/openapi.json", timeout=10).json() == SCHEMA


def test_a_put_declares_the_hashed_dirs_its_zip_cannot_show(agent: AgentProc,
                                                           tmp_path: Path) -> None:
    """A folder whose files are all ignored is hashed by Ray but absent from its zip: rtenv's
    client names it in X-Rtenv-Hashed-Dirs; a client that does not (Ray's own) is refused
    with a 422 that says why, since the agent cannot verify the package."""
    src = make_tree(tmp_path / "wd", {"main.py": "print(1)\n", ".gitignore": "/data/\n",
                                      "data/x": "x\n"})
    uri, zpath = ray_package(src, tmp_path)
    name = uri.removeprefix("gcs://")
    bare = requests.put(f"{agent.url}/api/packages/gcs/{name}", data=zpath.read_bytes(),
                        timeout=10)
    assert bare.status_code == 422
    assert "all excluded" in bare.json()["error"]["message"]
    assert "X-Rtenv-Hashed-Dirs" in bare.json()["error"]["hint"]
    bad = requests.put(f"{agent.url}/api/packages/gcs/{name}", data=zpath.read_bytes(),
                       headers={"X-Rtenv-Hashed-Dirs": "data"}, timeout=10)
    assert bad.status_code == 422
    AgentTarget(agent.url).upload(uri, zpath, hashed_dirs=["data"])
    got = requests.get(f"{agent.url}/api/packages/gcs/{name}?download=1", timeout=10)
    assert got.content == zpath.read_bytes()


def test_a_holder_with_a_slash_can_be_released(agent: AgentProc, tmp_path: Path) -> None:
    uri, zpath = ray_package(make_tree(tmp_path / "wd", {"a.py": "A = 1\n"}), tmp_path)
    AgentTarget(agent.url).upload(uri, zpath)
    client = AgentClient(agent.url)
    handle = client.get_or_create({"working_dir": uri}, holder="job/42")
    assert client.release(handle.key, "job/42") == 1
    assert client.release(handle.key, "job/42") == 0
