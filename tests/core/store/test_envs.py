"""Environments with real uv: cache hits, one build for concurrent creates, failures, refs, gc."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rtenv_cli.core.cache.gc import plan_gc, run_gc
from rtenv_cli.core.cache.ls import list_store
from rtenv_cli.core.errors import AgentError, UnsupportedError
from rtenv_cli.core.store.envs import Environments
from rtenv_cli.core.store.index import pid_start_time
from rtenv_cli.core.store.store import Store
from tests.support.packages import make_tree, ray_package

SIX = {"pip": ["six==1.16.0"]}


def test_venv_created_then_cache_hit(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    envs = Environments(store)
    first = envs.get_or_create(SIX, holder="a", pid=os.getpid())
    assert len(first.built) == 1
    assert first.venv is not None
    out = subprocess.run([f"{first.venv}/bin/python", "-c",
                          "import six, ray; print(six.__version__)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1.16.0"  # and the node's ray stays importable
    second = envs.get_or_create(SIX, holder="b", pid=os.getpid())
    assert second.built == ()  # a hit: nothing rebuilt (its latency is the benchmark's)
    assert second.venv == first.venv
    entry = next(e for e in list_store(store).entries if e.kind == "pip")
    assert entry.refs == 2
    assert entry.size_bytes < 5 * 2**20  # no clone of the base environment


def test_working_dir_and_py_modules_from_store(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    wd_uri, wd_zip = ray_package(make_tree(tmp_path / "wd", {"data.txt": "hi"}), tmp_path)
    mod_uri, mod_zip = ray_package(make_tree(tmp_path / "mymod", {"__init__.py": "X = 1\n"}),
                                   tmp_path, py_module=True)
    store.put_package(wd_uri.removeprefix("gcs://"), wd_zip)
    store.put_package(mod_uri.removeprefix("gcs://"), mod_zip)
    handle = Environments(store).get_or_create(
        {"working_dir": wd_uri, "py_modules": [mod_uri], "env_vars": {"A": "1"}}, holder="h")
    assert Path(handle.working_dir, "data.txt").read_text() == "hi"  # type: ignore[arg-type]
    assert Path(handle.py_modules[0], "mymod", "__init__.py").exists()
    assert handle.env_vars == {"A": "1"}


def test_missing_package_and_file_uri(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    uri, zpath = ray_package(make_tree(tmp_path / "wd", {"a": "b"}), tmp_path)
    envs = Environments(store)
    with pytest.raises(Exception, match="not in the store"):
        envs.get_or_create({"working_dir": uri}, holder="h")
    handle = envs.get_or_create({"working_dir": f"file://{zpath}"}, holder="h")
    assert Path(handle.working_dir, "a").read_text() == "b"  # type: ignore[arg-type]


def test_file_uri_zip_loses_its_single_top_level_dir_like_ray(tmp_path: Path) -> None:
    """Ray treats file:// as a remote protocol: download, unzip, strip one top-level dir."""
    import zipfile

    from ray._private.runtime_env.packaging import unzip_package

    zpath = tmp_path / "proj.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("proj-main/", "")
        zf.writestr("proj-main/main.py", "print(1)")
        zf.writestr("proj-main/pkg/mod.py", "x = 1")
    ray_copy = tmp_path / "ray-copy.zip"
    ray_copy.write_bytes(zpath.read_bytes())
    unzip_package(package_path=str(ray_copy), target_dir=str(tmp_path / "ray"),
                  remove_top_level_directory=True, unlink_zip=True)
    handle = Environments(Store(tmp_path / "s")).get_or_create(
        {"working_dir": f"file://{zpath}"}, holder="h")
    ours = sorted(str(p.relative_to(handle.working_dir))  # type: ignore[arg-type]
                  for p in Path(handle.working_dir).rglob("*"))  # type: ignore[arg-type]
    rays = sorted(str(p.relative_to(tmp_path / "ray")) for p in (tmp_path / "ray").rglob("*"))
    assert ours == rays == ["main.py", "pkg", "pkg/mod.py"]
    assert zpath.exists()  # the shared file is read, never consumed


def test_hits_record_references_always_and_last_use_to_the_second(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rtenv_cli.core.store import envs as envs_mod

    store = Store(tmp_path / "store")
    _uri, zpath = ray_package(make_tree(tmp_path / "wd", {"a": "b"}), tmp_path)
    envs = Environments(store)
    spec = {"working_dir": f"file://{zpath}"}
    first = envs.get_or_create(spec, holder="a")
    (key,) = first.entries
    used = store.index.get(key).last_used_at  # type: ignore[union-attr]
    envs.get_or_create(spec, holder="b")  # within the second: references only
    assert store.index.get(key).last_used_at == used  # type: ignore[union-attr]
    monkeypatch.setattr(envs_mod, "_TOUCH_EVERY_S", 0.0)
    time.sleep(0.01)
    envs.get_or_create(spec, holder="c")
    assert store.index.get(key).last_used_at > used  # type: ignore[union-attr]
    [env] = envs.list_envs()
    assert env["holders"] == 3


def test_try_hits_answers_each_request_in_one_transaction(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    _uri, zpath = ray_package(make_tree(tmp_path / "wd", {"a": "b"}), tmp_path)
    envs = Environments(store)
    spec = {"working_dir": f"file://{zpath}"}
    built = envs.get_or_create(spec, holder="a")
    hit, miss, bad = envs.try_hits([
        {"runtime_env": spec, "holder": "b", "pid": None, "lease_s": None},
        {"runtime_env": {"working_dir": f"file://{tmp_path}/absent.zip"}, "holder": "c",
         "pid": None, "lease_s": None},
        {"runtime_env": {"conda": "x"}, "holder": "d", "pid": None, "lease_s": None},
    ])
    assert hit is not None
    assert (hit.key, hit.working_dir, hit.built) == (built.key, built.working_dir, ())
    assert miss is None  # not built yet: the caller builds it
    assert bad is None  # an error: the caller's slow path reports it
    [env] = envs.list_envs()
    assert env["holders"] == 2


@pytest.mark.parametrize("field", ["conda", "container", "image_uri"])
def test_unsupported_fields_are_refused(tmp_path: Path, field: str) -> None:
    with pytest.raises(UnsupportedError, match="not supported by the rtenv agent"):
        Environments(Store(tmp_path / "s")).get_or_create({field: "x"}, holder="h")


def test_failed_build_reports_uv_error_and_leaves_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    with pytest.raises(AgentError, match="uv pip install failed") as info:
        Environments(store).get_or_create({"pip": ["rtenv-no-such-package-xyz==9.9"]},
                                          holder="h")
    assert "rtenv-no-such-package-xyz" in info.value.message
    assert list_store(store).entries == ()
    assert list((store.root / "tmp").iterdir()) == []
    assert list((store.root / "entries").iterdir()) == []


_CREATE = """
import json, sys
from pathlib import Path
from rtenv_cli.core.store.envs import Environments
from rtenv_cli.core.store.index import pid_start_time
from rtenv_cli.core.store.store import Store
h = Environments(Store(Path(sys.argv[1]))).get_or_create({"uv": ["six==1.16.0"]},
                                                          holder=sys.argv[2])
print(json.dumps(h.to_dict()))
"""


@pytest.mark.slow
def test_concurrent_identical_creates_across_processes_build_once(tmp_path: Path) -> None:
    root = tmp_path / "store"
    Store(root)
    procs = [subprocess.Popen([sys.executable, "-c", _CREATE, str(root), f"p{i}"],
                              stdout=subprocess.PIPE, text=True) for i in range(12)]
    handles = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(1 for h in handles if h["built"]) == 1
    assert len({h["venv"] for h in handles}) == 1


def test_release_keeps_entry_and_gc_under_size_budget(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    envs = Environments(store)
    a = envs.get_or_create({"pip": ["six==1.16.0"]}, holder="h1")
    b = envs.get_or_create({"pip": ["six==1.17.0"]}, holder="h2")
    assert envs.release(a.key, "h1") == 1
    entries = list_store(store).entries
    assert {e.refs for e in entries} == {0, 1}
    # a budget of 0 bytes: everything unreferenced goes, the referenced one stays
    result = run_gc(store, plan_gc(entries, keep_storage=0))
    assert [e.key for e in result.removed] == list(a.entries)
    assert [e.key for e in list_store(store).entries] == list(b.entries)
    assert Path(b.venv).exists()  # type: ignore[arg-type]
    assert not Path(a.venv).exists()  # type: ignore[arg-type]


def test_dead_holder_is_released(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    Environments(store).get_or_create(SIX, holder="dead", pid=proc.pid)
    assert [e.refs for e in list_store(store).entries] == [0]
    leased = Environments(store).get_or_create(SIX, holder="lease", lease_s=0.01)
    time.sleep(0.05)
    assert [e.refs for e in list_store(store).entries] == [0]
    assert leased.venv


def test_gc_racing_creates_never_breaks_a_handle(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    envs = Environments(store)
    uri, zpath = ray_package(make_tree(tmp_path / "wd", {"f.txt": "x"}), tmp_path)
    store.put_package(uri.removeprefix("gcs://"), zpath)
    stop = threading.Event()
    errors: list[str] = []

    def creator(n: int) -> None:
        for i in range(40):
            h = envs.get_or_create({"working_dir": uri}, holder=f"c{n}-{i}")
            if not Path(h.working_dir, "f.txt").exists():  # type: ignore[arg-type]
                errors.append(f"handle {h.key} points at a removed entry")
            envs.release(h.key, f"c{n}-{i}")

    def collector() -> None:
        while not stop.is_set():
            run_gc(store, plan_gc(store.index.all(), purge=True, kinds=("working_dir",)))

    threads = [threading.Thread(target=creator, args=(n,)) for n in range(3)]
    gc_thread = threading.Thread(target=collector)
    gc_thread.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    gc_thread.join()
    assert errors == []


def test_https_working_dir_strips_top_level_dir(tmp_path: Path) -> None:
    import http.server
    import threading as th

    from tests.support.packages import crafted_zip

    site = tmp_path / "site"
    site.mkdir()
    crafted_zip(site / "proj.zip", [("proj-main/app.py", b"print('remote')\n")])
    handler = lambda *a, **kw: http.server.SimpleHTTPRequestHandler(  # noqa: E731
        *a, directory=str(site), **kw)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = th.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        uri = f"http://127.0.0.1:{server.server_address[1]}/proj.zip"
        handle = Environments(Store(tmp_path / "store")).get_or_create({"working_dir": uri},
                                                                       holder="h")
        assert Path(handle.working_dir, "app.py").exists()  # type: ignore[arg-type]
    finally:
        server.shutdown()
        server.server_close()


def test_crafted_package_with_a_valid_name_is_refused_at_upload_and_unpack(
        tmp_path: Path) -> None:
    from rtenv_cli.core.errors import PackagingError
    from tests.security.crafted import ray_hash_name
    from tests.support.packages import crafted_zip

    files = {"ok.txt": b"x", "../escaped.txt": b"pwned"}
    evil = crafted_zip(tmp_path / "evil.zip", list(files.items()))
    name = ray_hash_name(files)  # its name matches its content...
    store = Store(tmp_path / "store")
    with pytest.raises(PackagingError, match="escapes"):  # ...but the upload is refused
        store.put_package(name, evil)
    assert not store.has_package(name)
    store.put_package("evil.zip", evil)  # a free name is kept unverified, as Ray's GCS does...
    with pytest.raises(PackagingError, match="escapes"):  # ...and never unpacked
        Environments(store).get_or_create({"working_dir": "gcs://evil.zip"}, holder="h")
    assert not any(store.root.rglob("escaped.txt"))
    assert not (tmp_path / "escaped.txt").exists()
    assert list((store.root / "entries").iterdir()) == []


def test_uv_check_runs_uv_pip_check(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    broken = {"uv": {"packages": ["requests==2.32.3"], "uv_pip_install_options": ["--no-deps"],
                     "uv_check": True}}
    with pytest.raises(AgentError, match="uv pip check failed"):
        Environments(store).get_or_create(broken, holder="h")
    unchecked = {"uv": {**broken["uv"], "uv_check": False}}
    assert Environments(store).get_or_create(unchecked, holder="h").venv


def test_a_remembered_plan_is_not_taken_for_another_runtime_env(tmp_path: Path) -> None:
    """The hit path remembers a runtime_env's plan by its JSON; a value JSON cannot tell from
    it (a tuple for a list) is still worked out on its own."""
    store = Store(tmp_path / "store")
    _uri, zpath = ray_package(make_tree(tmp_path / "wd", {"a": "b"}), tmp_path)
    envs = Environments(store)
    spec = {"py_modules": [f"file://{zpath}"]}
    built = envs.get_or_create(spec, holder="a")
    [hit] = envs.try_hits([{"runtime_env": spec, "holder": "b", "pid": None, "lease_s": None}])
    assert hit is not None
    assert hit.key == built.key
    spec["py_modules"].append(f"file://{tmp_path}/other.zip")  # the caller's dict, changed
    [miss] = envs.try_hits([{"runtime_env": spec, "holder": "c", "pid": None,
                             "lease_s": None}])
    assert miss is None  # not the remembered plan: the new module is not built
    as_tuple = {"py_modules": (f"file://{zpath}",)}
    [same] = envs.try_hits([{"runtime_env": as_tuple, "holder": "d", "pid": None,
                             "lease_s": None}])
    assert same is not None
    assert same.key == built.key


def test_a_batch_of_hits_holds_each_present_environment_once_per_holder(
        tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    _uri, zpath = ray_package(make_tree(tmp_path / "wd", {"a": "b"}), tmp_path)
    envs = Environments(store)
    spec = {"working_dir": f"file://{zpath}", "env_vars": {"X": "1"}}
    envs.get_or_create(spec, holder="seed")
    absent = {"working_dir": f"file://{tmp_path}/absent.zip"}
    reqs = [{"runtime_env": absent if i % 3 == 0 else spec, "holder": f"h{i}",
             "pid": os.getpid(), "lease_s": None} for i in range(30)]
    answers = envs.try_hits(reqs)
    assert [a is None for a in answers] == [i % 3 == 0 for i in range(30)]
    [env] = envs.list_envs()
    assert env["holders"] == 1 + 20
    rows = store.index.conn().execute("SELECT DISTINCT pid, pid_start FROM refs "
                                      "WHERE holder != 'seed'").fetchall()
    assert [tuple(r) for r in rows] == [(os.getpid(), pid_start_time(os.getpid()))]


def test_a_large_runtime_env_is_a_hit_but_not_remembered(tmp_path: Path) -> None:
    """The plan memo holds runtime_envs by their JSON, bounded by count: one much larger than a
    real runtime_env (a client sending megabytes per request) is worked out afresh instead of
    held, so 4,096 of them cannot make the agent hold gigabytes."""
    from rtenv_cli.core.store.envs import MEMO_MAX_JSON

    store = Store(tmp_path / "store")
    _uri, zpath = ray_package(make_tree(tmp_path / "wd", {"a": "b"}), tmp_path)
    envs = Environments(store)
    small = {"py_modules": [f"file://{zpath}"]}
    large = {**small, "env_vars": {"BIG": "x" * MEMO_MAX_JSON}}
    for spec in (small, large):
        envs.get_or_create(spec, holder="a")
        [hit] = envs.try_hits([{"runtime_env": spec, "holder": "b", "pid": None,
                                "lease_s": None}])
        assert hit is not None  # both are hits
    remembered = [json.loads(k) for k in envs._plans]
    assert small in remembered
    assert large not in remembered
