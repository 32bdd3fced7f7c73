"""The store: verified packages and blobs, single-flight builds, crash recovery, safe removal."""

from __future__ import annotations

import hashlib
import io
import os
import signal
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from rtenv_cli.core.errors import PackagingError
from rtenv_cli.core.store.store import Store
from tests.support.packages import make_tree, ray_package


def test_put_package_verifies_ray_hash(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src", {"a.py": "x = 1\n", "pkg/b.py": "y = 2\n"})
    uri, pkg = ray_package(src, tmp_path)
    store = Store(tmp_path / "store")
    name = uri.removeprefix("gcs://")
    store.put_package(name, pkg)
    assert store.has_package(name)
    wrong = name[:-5] + ("0" if name[-5] != "0" else "1") + ".zip"
    with pytest.raises(PackagingError, match="does not match"):
        store.put_package(wrong, pkg)
    assert not store.has_package(wrong)
    with pytest.raises(PackagingError, match="not a Ray package name"):
        store.put_package("_ray_pkg_abc.zip", pkg)


def test_py_module_layout_is_verified(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "mymod", {"__init__.py": "", "core.py": "z = 3\n"})
    uri, pkg = ray_package(src, tmp_path, py_module=True)
    Store(tmp_path / "store").put_package(uri.removeprefix("gcs://"), pkg)


def test_truncated_package_rejected(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src", {"a.py": "x = 1\n" * 1000})
    uri, pkg = ray_package(src, tmp_path)
    store = Store(tmp_path / "store")
    data = pkg.read_bytes()
    with pytest.raises(PackagingError):
        store.put_package(uri.removeprefix("gcs://"), io.BytesIO(data[: len(data) // 2]))
    assert not store.has_package(uri.removeprefix("gcs://"))
    assert list((store.root / "tmp").iterdir()) == []


def test_blobs_verified(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    data = b"hello blob"
    sha = hashlib.sha256(data).hexdigest()
    store.put_blob(sha, io.BytesIO(data))
    assert store.has_blobs([sha, "0" * 64]) == {sha}
    with pytest.raises(PackagingError, match="does not match"):
        store.put_blob("1" * 64, io.BytesIO(data))
    assert not store.blob_path("1" * 64).exists()


def test_single_flight_across_threads(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    calls = []

    def build(tree: Path) -> None:
        calls.append(1)
        time.sleep(0.2)
        (tree / "f").write_text("x")

    threads = [threading.Thread(target=store.get_or_build, args=("k",),
                                kwargs={"kind": "uv", "uri": "u", "label": "l", "build": build})
               for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert (store.root / store.index.get("k").path / "tree/f").read_text() == "x"  # type: ignore[union-attr]


def test_failed_build_leaves_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")

    def build(tree: Path) -> None:
        (tree / "half").write_text("x")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        store.get_or_build("k", kind="uv", uri="u", label="l", build=build)
    assert store.index.get("k") is None
    assert list((store.root / "tmp").iterdir()) == []
    assert list((store.root / "entries").iterdir()) == []


_BUILDER = """
import sys, time
from pathlib import Path
from rtenv_cli.core.store.store import Store
store = Store(Path(sys.argv[1]))
def build(tree):
    (tree / "part").write_text("x")
    print("building", flush=True)
    time.sleep(60)
store.get_or_build("k", kind="uv", uri="u", label="l", build=build)
"""


def test_sigkill_during_build_then_restart(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = Store(root)
    store.get_or_build("done", kind="uv", uri="u", label="l",
                       build=lambda t: (t / "f").write_text("published"))
    proc = subprocess.Popen([sys.executable, "-c", _BUILDER, str(root)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "building"
        assert store.index.get("k") is None  # nothing visible mid-build
        from rtenv_cli.core.cache.ls import list_store

        assert list_store(store).to_dict()["building"] == ["k"]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert list((root / "tmp").iterdir())  # the half-built dir is still there
    reopened = Store(root)
    assert list((root / "tmp").iterdir()) == []
    assert reopened.index.get("k") is None
    done = reopened.index.get("done")
    assert done is not None
    assert (root / done.path / "tree/f").read_text() == "published"
    # and the killed builder's lock is free: the build now completes
    reopened.get_or_build("k", kind="uv", uri="u", label="l",
                          build=lambda t: (t / "f").write_text("ok"))


def test_recover_reindexes_published_entry_without_row(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = Store(root)
    store.get_or_build("k", kind="uv", uri="u", label="l", build=lambda t: None)
    with store.index.tx() as db:  # a crash between rename and index write
        store.index.delete(db, "k")
    assert Store(root).index.get("k") is not None


def test_remove_refuses_busy_key(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    store.get_or_build("k", kind="uv", uri="u", label="l", build=lambda t: None)
    with store.lock("k"):
        got = []
        t = threading.Thread(target=lambda: got.append(store.remove("k")))
        t.start()
        t.join()
        assert got == [False]
    assert store.remove("k") is True
    assert store.index.get("k") is None
    assert list((store.root / "entries").iterdir()) == []


def test_recover_indexes_package_renamed_before_its_row(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src", {"a.py": "x = 1\n"})
    uri, pkg = ray_package(src, tmp_path)
    name = uri.removeprefix("gcs://")
    store = Store(tmp_path / "store")
    store.put_package(name, pkg)
    with store.index.tx() as db:  # a SIGKILL between the rename and the index write
        store.index.delete(db, f"package:{name}")
    entry = Store(tmp_path / "store").index.get(f"package:{name}")
    assert entry is not None
    assert entry.kind == "package"
    assert entry.size_bytes == pkg.stat().st_blocks * 512  # what it takes on disk, as du


_CHURN = """
import hashlib, io, sys
from pathlib import Path
from rtenv_cli.core.store.store import Store
store = Store(Path(sys.argv[1]))
i = int(sys.argv[2]) * 100000
while True:
    i += 1
    data = str(i).encode() * 2000
    store.put_blob(hashlib.sha256(data).hexdigest(), io.BytesIO(data))
    store.get_or_build(f"e{i}", kind="uv", uri="u", label="l",
                       build=lambda t: [(t / f"f{n}").write_bytes(data) for n in range(20)])
    if i % 3 == 0:
        store.remove(f"e{i - 1}")
    print(i, flush=True)
"""


@pytest.mark.slow
def test_sigkill_at_random_points_keeps_the_store_consistent(tmp_path: Path) -> None:
    import random

    root = tmp_path / "store"
    Store(root)
    rng = random.Random(7)  # noqa: S311 - kill timing, not crypto
    for round_ in range(8):
        proc = subprocess.Popen([sys.executable, "-c", _CHURN, str(root), str(round_)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        for _ in range(rng.randint(2, 4)):  # some work done, then a kill at a random point
            assert proc.stdout.readline()
        time.sleep(rng.random() * 0.1)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        store = Store(root)  # recovery
        assert list((root / "tmp").iterdir()) == []
        assert list((root / "trash").iterdir()) == []
        entries = store.index.all()
        for entry in entries:
            path = root / entry.path
            assert path.exists(), entry
            if entry.kind == "uv":
                assert (path / "meta.json").exists()
                assert len(list((path / "tree").iterdir())) == 20  # never a partial build
            if entry.kind == "blob":
                assert hashlib.sha256(path.read_bytes()).hexdigest() == entry.key[5:]
        indexed = {e.path for e in entries}
        assert {f"entries/{p.name}" for p in (root / "entries").iterdir()} <= indexed
    assert sum(1 for e in Store(root).index.all() if e.kind == "uv") >= 8  # work was done


def test_writers_in_several_processes_take_turns(tmp_path: Path) -> None:
    """Index writes from separate processes (agent workers, the CLI) queue on one file lock
    instead of failing with 'database is locked' or sleeping in SQLite's busy handler."""
    store = Store(tmp_path / "store")
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from rtenv_cli.core.store.store import Store\n"
        "index = Store(Path(sys.argv[1])).index\n"
        "for i in range(300):\n"
        "    with index.tx() as db:\n"
        "        db.execute('INSERT INTO envs VALUES (?,?,?,?)',\n"
        "                   (sys.argv[2] + str(i), '{}', 0, 0))\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(store.root), f"p{n}-"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _out, err in outs]
    count = store.index.conn().execute("SELECT COUNT(*) FROM envs").fetchone()[0]
    assert count == 900
    assert (store.root / "index.sqlite.wlock").exists()


def _ignored_folder_package(tmp_path: Path) -> tuple[str, Path]:
    """Ray's own package of a tree whose `data/` is all ignored: hashed, not in the zip."""
    src = make_tree(tmp_path / "wd", {"main.py": "print(1)\n", ".gitignore": "/data/\n",
                                      "data/x": "x\n"})
    uri, pkg = ray_package(src, tmp_path)
    with zipfile.ZipFile(pkg) as zf:
        assert not any(n.startswith("data") for n in zf.namelist())
    return uri.removeprefix("gcs://"), pkg


def test_a_package_with_hashed_but_absent_dirs_is_verified_with_them(tmp_path: Path) -> None:
    name, pkg = _ignored_folder_package(tmp_path)
    store = Store(tmp_path / "store")
    store.put_package(name, pkg, extra_dirs=["data"])
    assert store.package_file(name).read_bytes() == pkg.read_bytes()


def test_without_them_it_is_refused_with_the_cause(tmp_path: Path) -> None:
    name, pkg = _ignored_folder_package(tmp_path)
    store = Store(tmp_path / "store")
    with pytest.raises(PackagingError, match="folders whose files were all excluded") as exc:
        store.put_package(name, pkg)
    assert "X-Rtenv-Hashed-Dirs" in (exc.value.hint or "")
    with pytest.raises(PackagingError, match="does not match"):  # a wrong list proves nothing
        store.put_package(name, pkg, extra_dirs=["other"])
    with pytest.raises(PackagingError, match="escapes the tree"):
        store.put_package(name, pkg, extra_dirs=["../data"])
    assert not store.has_package(name)


def test_a_write_that_must_not_wait_is_refused_while_another_writer_holds_the_lock(
        tmp_path: Path) -> None:
    import fcntl

    from rtenv_cli.core.store.index import WriterBusy

    store = Store(tmp_path / "store")
    index = store.index
    other = os.open(tmp_path / "store" / "index.sqlite.wlock", os.O_RDWR)  # another process's
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        with pytest.raises(WriterBusy), index.tx(wait=False):
            pass
        fcntl.flock(other, fcntl.LOCK_UN)
    finally:
        os.close(other)
    held, go = threading.Event(), threading.Event()

    def writer() -> None:  # a thread of this process holding the lock
        with index.tx():
            held.set()
            go.wait(30)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert held.wait(30)
        with pytest.raises(WriterBusy), index.tx(wait=False):
            pass
    finally:
        go.set()
        thread.join(30)
    with index.tx(wait=False) as db:  # free again: nothing was left held
        db.execute("SELECT 1")


def test_prune_drops_the_references_of_dead_holders_and_ended_leases(tmp_path: Path) -> None:
    from rtenv_cli.core.store.index import pid_start_time

    store = Store(tmp_path / "store")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    now = time.time()
    me = os.getpid()
    start = pid_start_time(me)
    rows = [("e1", "k1", f"live{i}", me, start, None, now) for i in range(50)]
    rows += [("e1", "k1", f"dead{i}", dead.pid, "1", None, now) for i in range(50)]
    rows += [("e1", "k2", "dead0", dead.pid, "1", None, now)]  # a second entry of a dead one
    rows += [("e1", "k1", "recycled", me, "not-its-start", None, now)]
    rows += [("e2", "k1", "lease-over", None, None, now - 1, now),
             ("e2", "k1", "lease-on", None, None, now + 3600, now),
             ("e2", "k1", "lease-bad", None, None, "soon", now)]
    with store.index.tx() as db:
        db.executemany("INSERT INTO refs VALUES (?,?,?,?,?,?,?)", rows)
    assert store.index.prune_refs() == 50 + 1 + 1 + 2  # rows: the dead one's k2 row too
    left = {r[0] for r in store.index.conn().execute("SELECT holder FROM refs")}
    assert left == {f"live{i}" for i in range(50)} | {"lease-on"}


def test_prune_keeps_a_reference_taken_again_under_the_same_holder(tmp_path: Path) -> None:
    """A holder whose process died and which holds the env again from a new process (a restarted
    raylet) keeps its new reference: prune drops the dead process's rows, not the holder's."""
    from rtenv_cli.core.store.index import pid_start_time

    store = Store(tmp_path / "store")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    now, me = time.time(), os.getpid()
    with store.index.tx() as db:
        db.executemany("INSERT INTO refs VALUES (?,?,?,?,?,?,?)", [
            ("e1", "k1", "raylet", dead.pid, "1", None, now),
            ("e1", "k2", "raylet", me, pid_start_time(me), None, now)])
    assert store.index.prune_refs() == 1
    assert [r[0] for r in store.index.conn().execute("SELECT entry_key FROM refs")] == ["k2"]
