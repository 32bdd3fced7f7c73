"""The delta protocol: manifests over blobs, checked against the Ray URI, zips built on demand."""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from rtenv_cli.core.errors import PackagingError
from rtenv_cli.core.store import blobs as blobs_mod
from rtenv_cli.core.store import delta
from rtenv_cli.core.store.rayhash import verify_package
from rtenv_cli.core.store.store import Store
from tests.support.packages import make_tree, ray_package


def _manifest(src: Path, uri: str, kind: str = "working_dir") -> dict:
    entries = []
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src).as_posix()
        if path.is_dir():
            if not any(path.iterdir()):
                entries.append({"path": rel, "is_dir": True, "mode": 0o755, "size": 0})
            continue
        data = path.read_bytes()
        entries.append({"path": rel, "is_dir": False, "mode": os.stat(path).st_mode & 0o777,
                        "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    return {"uri": uri, "kind": kind, "name": src.name if kind == "py_module" else None,
            "entries": entries}


@pytest.mark.parametrize("kind", ["working_dir", "py_module"])
def test_commit_rebuilds_ray_package(tmp_path: Path, kind: str) -> None:
    src = make_tree(tmp_path / "mod", {"a.py": "a\n", "s/b.py": "b\n", "s/t/c.txt": "c"})
    (src / "hollow").mkdir()
    uri, _zip = ray_package(src, tmp_path, py_module=kind == "py_module")
    store = Store(tmp_path / "store")
    man = _manifest(src, uri, kind)
    need = delta.missing(store, delta.Manifest.parse(man))
    assert len(need) == 3
    with pytest.raises(PackagingError, match="missing"):
        delta.commit(store, delta.Manifest.parse(man))
    for entry in man["entries"]:
        if not entry["is_dir"]:
            store.put_blob(entry["sha256"], src / entry["path"])
    assert delta.missing(store, delta.Manifest.parse(man)) == []
    out = delta.commit(store, delta.Manifest.parse(man))
    assert out["uri"] == uri
    name = uri.removeprefix("gcs://")
    assert store.has_package(name)
    assert not store.package_path(name).exists()  # published as a manifest: no zip yet
    assert _members(store.package_file(name)) == _members(_zip)  # assembled on first need
    verify_package(name, store.package_file(name))


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {i.filename.rstrip("/"): zf.read(i) for i in zf.infolist()}


def _commit_full(store: Store, src: Path, uri: str) -> dict:
    man = _manifest(src, uri)
    for entry in man["entries"]:
        if not entry["is_dir"]:
            store.put_blob(entry["sha256"], src / entry["path"])
    delta.commit(store, delta.Manifest.parse(man))
    return man


def _relative(base: dict, new: dict) -> dict:
    old = {e["path"]: e for e in base["entries"]}
    cur = {e["path"]: e for e in new["entries"]}
    return {"uri": new["uri"], "kind": new["kind"], "name": new["name"], "base": base["uri"],
            "upsert": [e for p, e in cur.items() if old.get(p) != e],
            "remove": [p for p in old if p not in cur]}


def test_relative_commit_equals_ray_for_the_edited_tree(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src", {"a.py": "a\n", "s/b.py": "b\n", "s/t/c.txt": "c",
                                       "gone.py": "x"})
    uri1, _ = ray_package(src, tmp_path)
    store = Store(tmp_path / "store")
    base = _commit_full(store, src, uri1)
    (src / "a.py").write_text("a changed\n")
    (src / "gone.py").unlink()
    make_tree(src, {"new/d.py": "d\n"})
    uri2, ray_zip = ray_package(src, tmp_path)
    new = _manifest(src, uri2)
    body = _relative(base, new)
    assert {e["path"] for e in body["upsert"]} == {"a.py", "new/d.py"}
    assert body["remove"] == ["gone.py"]
    man = delta.Manifest.parse(body)
    for sha in delta.missing(store, man):
        path = next(src / e["path"] for e in new["entries"] if e.get("sha256") == sha)
        store.put_blob(sha, path)
    assert delta.commit(store, man)["uri"] == uri2
    name = uri2.removeprefix("gcs://")
    assert _members(store.package_file(name)) == _members(ray_zip)


def _in_place_edits(tmp_path: Path, store: Store, *, in_place: bool,
                    monkeypatch: pytest.MonkeyPatch,
                    after_first: Callable[[], None] = lambda: None) -> list[bytes]:
    """Three commits of one tree: whole, then two edits of files in place (in the second, one
    file's mode and date change but not its content, so its digest is the base's); each
    stored manifest's bytes."""
    monkeypatch.setattr(delta, "IN_PLACE", in_place)
    src = make_tree(tmp_path / "src", {"a.py": "a\n", "s/b.py": "b\n", "s/t/c.txt": "c"})
    (src / "hollow").mkdir()
    uri, _ = ray_package(src, tmp_path)
    base = _commit_full(store, src, uri)
    out = [store.manifest_path(uri.removeprefix("gcs://")).read_bytes()]
    after_first()
    for edit in ("edit", "chmod"):
        if edit == "edit":
            (src / "s/b.py").write_text("b edited\n")
            (src / "a.py").write_text("a edited\n")
        else:
            (src / "s/t/c.txt").write_text("c edited")
            (src / "a.py").chmod(0o600)
            os.utime(src / "a.py", (0, 1_000_000_000))
        uri, ray_zip = ray_package(src, tmp_path)
        new = _manifest(src, uri)
        man = delta.Manifest.parse(_relative(base, new))
        assert len(man.upsert) == 2
        assert not man.remove
        _put_missing(store, man, src, new)
        assert delta.commit(store, man)["uri"] == uri
        name = uri.removeprefix("gcs://")
        assert _members(store.package_file(name)) == _members(ray_zip)
        out.append(store.manifest_path(name).read_bytes())
        base = new
    return out


def _put_missing(store: Store, man: delta.Manifest, src: Path, new: dict) -> None:
    for sha in delta.missing(store, man):
        store.put_blob(sha, next(src / e["path"] for e in new["entries"]
                                 if e.get("sha256") == sha))


def _spy_encode(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The `like` of each manifest the store encodes."""
    likes: list[object] = []
    real = store.packages._encode
    monkeypatch.setattr(store.packages, "_encode",
                        lambda doc, like: likes.append(like) or real(doc, like))
    return likes


def test_an_edit_in_place_is_published_as_the_whole_path_publishes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-place path (the base's hash, its rows and their stored text, the changed rows
    only) writes the very manifest the whole path writes, without hashing or copying every
    row."""
    fast_store = Store(tmp_path / "fast" / "store")
    fast_likes = _spy_encode(fast_store, monkeypatch)

    def no_whole_path() -> None:
        monkeypatch.setattr(delta, "ray_acc", lambda *_a: pytest.fail("hashed every row"))
        monkeypatch.setattr(delta, "_rows", lambda *_a: pytest.fail("copied every row"))

    fast = _in_place_edits(tmp_path / "fast", fast_store, in_place=True,
                           monkeypatch=monkeypatch, after_first=no_whole_path)
    monkeypatch.undo()
    whole_store = Store(tmp_path / "whole" / "store")
    whole_likes = _spy_encode(whole_store, monkeypatch)
    whole = _in_place_edits(tmp_path / "whole", whole_store, in_place=False,
                            monkeypatch=monkeypatch)
    assert fast == whole
    assert whole_likes == [None, None, None]
    assert fast_likes[0] is None
    assert all(like is not None for like in fast_likes[1:])
    for text in fast:
        assert text == json.dumps(json.loads(text), separators=(",", ":")).encode()


def test_an_added_file_takes_the_whole_path(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src", {"a.py": "a\n", "s/b.py": "b\n"})
    uri1, _ = ray_package(src, tmp_path)
    store = Store(tmp_path / "store")
    base = _commit_full(store, src, uri1)
    make_tree(src, {"s/new/c.py": "c\n"})  # a new file and a new directory Ray hashes
    (src / "a.py").write_text("a edited\n")
    uri2, ray_zip = ray_package(src, tmp_path)
    new = _manifest(src, uri2)
    man = delta.Manifest.parse(_relative(base, new))
    assert delta._in_place(store, man) is None
    _put_missing(store, man, src, new)
    assert delta.commit(store, man)["uri"] == uri2
    assert _members(store.package_file(uri2.removeprefix("gcs://"))) == _members(ray_zip)


@pytest.mark.parametrize("in_place", [False, True])
def test_relative_commit_that_lies_is_rejected(tmp_path: Path, in_place: bool) -> None:
    src = make_tree(tmp_path / "src", {"a.py": "a\n", "b.py": "b\n"})
    uri1, _ = ray_package(src, tmp_path)
    store = Store(tmp_path / "store")
    base = _commit_full(store, src, uri1)
    (src / "a.py").write_text("edited\n")
    (src / "b.py").write_text("edited too\n")
    uri2, _ = ray_package(src, tmp_path)
    body = _relative(base, _manifest(src, uri2))
    # claims the new URI without sending the change: none of it, or b.py's (in place: the
    # base's hash with a.py's digest replaced)
    body["upsert"] = [e for e in body["upsert"] if in_place and e["path"] == "a.py"]
    man = delta.Manifest.parse(body)
    if in_place:
        store.put_blob(body["upsert"][0]["sha256"], src / "a.py")
        assert delta._in_place(store, man) is not None
    with pytest.raises(PackagingError, match="does not match"):
        delta.commit(store, man)
    assert not store.has_package(uri2.removeprefix("gcs://"))


def test_relative_commit_on_unknown_base_asks_for_the_whole_manifest(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    body = {"uri": "gcs://_ray_pkg_0123456789abcdef.zip", "kind": "working_dir", "name": None,
            "base": "gcs://_ray_pkg_fedcba9876543210.zip", "upsert": [], "remove": []}
    with pytest.raises(PackagingError, match=delta.BASE_UNKNOWN):
        delta.commit(store, delta.Manifest.parse(body))


def test_blobs_of_a_manifest_package_survive_gc_until_it_goes(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src", {"a.py": "a\n"})
    uri, _ = ray_package(src, tmp_path)
    store = Store(tmp_path / "store", pin_s=0)  # no upload pin: gc may take it at once
    man = _commit_full(store, src, uri)
    sha = man["entries"][0]["sha256"]
    assert store.remove(f"blob:{sha}") is False  # the package is made of it
    store.package_file(uri.removeprefix("gcs://"))
    assert store.remove(f"package:{uri.removeprefix('gcs://')}") is True
    assert not store.has_package(uri.removeprefix("gcs://"))
    assert not any((store.root / "packages").iterdir())
    assert store.remove(f"blob:{sha}") is True


def test_manifest_package_without_index_row_is_recovered(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src", {"a.py": "a\n"})
    uri, _ = ray_package(src, tmp_path)
    store = Store(tmp_path / "store")
    _commit_full(store, src, uri)
    key = f"package:{uri.removeprefix('gcs://')}"
    with store.index.tx() as db:  # a SIGKILL between the rename and the index row
        store.index.delete(db, key)
    reopened = Store(tmp_path / "store")
    entry = reopened.index.get(key)
    assert entry is not None
    assert entry.path.startswith("manifests/")


def _record(data: bytes, sha: str | None = None) -> bytes:
    return f"{sha or hashlib.sha256(data).hexdigest()} {len(data)}\n".encode() + data


def test_blob_batch_stores_each_verified_blob(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    blobs = [b"one", b"two" * 1000, b""]
    assert store.put_blobs(io.BytesIO(b"".join(_record(b) for b in blobs))) == 3
    shas = [hashlib.sha256(b).hexdigest() for b in blobs]
    assert store.has_blobs(shas) == set(shas)
    assert store.blob_path(shas[1]).read_bytes() == blobs[1]
    again = io.BytesIO(_record(blobs[1]) + _record(b"three"))  # known blobs are skipped
    assert store.put_blobs(again) == 2
    assert store.blob_path(hashlib.sha256(b"three").hexdigest()).read_bytes() == b"three"


@pytest.mark.parametrize("count", [1, blobs_mod.FEW_BLOBS, blobs_mod.FEW_BLOBS + 3])
def test_a_saves_few_blobs_are_synced_one_by_one_not_with_the_whole_file_system(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """A save's blob is durable by fsyncs of its file and its directory (a busy disk's other
    pending writes are not its wait); a larger batch's rest by one syncfs."""
    store = Store(tmp_path / "store")
    synced: list[str] = []
    flushed: list[Path] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.readlink(
        f"/proc/self/fd/{fd}")) or real_fsync(fd))
    monkeypatch.setattr(blobs_mod, "sync_fs", flushed.append)
    data = [f"blob {i}".encode() for i in range(count)]
    assert store.put_blobs(io.BytesIO(b"".join(_record(b) for b in data))) == count
    few = min(count, blobs_mod.FEW_BLOBS)
    for b in data[:few]:
        final = str(store.blob_path(hashlib.sha256(b).hexdigest()))
        tmp = synced.index(next(s for s in synced if s.endswith("/blob")))
        assert synced[tmp + 1] == str(Path(final).parent)  # its rename, then the next
        del synced[:tmp + 2]
    assert flushed == ([store.root] if count > few else [])


@pytest.mark.parametrize("stream", [
    _record(b"payload", sha="0" * 64),  # content does not hash to its name
    _record(b"payload")[:-3],  # truncated
    b"not a header\n",
])
def test_bad_blob_batch_is_refused_and_stores_nothing_bad(tmp_path: Path, stream: bytes) -> None:
    store = Store(tmp_path / "store")
    with pytest.raises(PackagingError):
        store.put_blobs(io.BytesIO(stream))
    assert not any(p.is_file() for p in (store.root / "blobs").rglob("*"))


def test_commit_with_wrong_uri_is_rejected(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src", {"a.py": "a\n"})
    _uri, _zip = ray_package(src, tmp_path)
    store = Store(tmp_path / "store")
    man = _manifest(src, "gcs://_ray_pkg_0123456789abcdef.zip")
    store.put_blob(man["entries"][0]["sha256"], src / "a.py")
    with pytest.raises(PackagingError, match="does not match"):
        delta.commit(store, delta.Manifest.parse(man))
    assert not store.has_package("_ray_pkg_0123456789abcdef.zip")


def test_manifest_paths_must_stay_inside() -> None:
    with pytest.raises(PackagingError):
        delta.Manifest.parse({"uri": "gcs://_ray_pkg_0123456789abcdef.zip", "kind": "working_dir",
                              "entries": [{"path": "../x", "sha256": "0" * 64}]})


def test_a_dir_ray_hashes_but_does_not_zip_stays_out_of_the_assembled_zip(
        tmp_path: Path) -> None:
    """`data/` holds only ignored files: Ray hashes its name, its zip has no `data/` entry; the
    store assembled one for every directory row (an empty `data/` after unpacking)."""
    src = make_tree(tmp_path / "wd", {"main.py": "print(1)\n", ".gitignore": "/data/\n",
                                      "data/x": "x\n"})
    (src / "empty").mkdir()
    uri, ray_zip = ray_package(src, tmp_path)
    man = _manifest(src, uri)
    man["entries"] = [e for e in man["entries"] if not e["path"].startswith("data")]
    man["entries"].append({"path": "data", "is_dir": True, "mode": 0o755, "size": 0,
                           "in_zip": False})
    store = Store(tmp_path / "store")
    for entry in man["entries"]:
        if not entry["is_dir"]:
            store.put_blob(entry["sha256"], src / entry["path"])
    assert delta.commit(store, delta.Manifest.parse(man))["uri"] == uri
    name = uri.removeprefix("gcs://")
    with zipfile.ZipFile(store.package_file(name)) as ours, zipfile.ZipFile(ray_zip) as ray:
        assert sorted(ours.namelist()) == sorted(ray.namelist())
        assert "empty/" in ours.namelist()
    verify_package(name, store.package_file(name), extra_dirs=["data"])


def test_a_manifest_published_before_in_zip_and_zip_time_still_assembles(
        tmp_path: Path) -> None:
    src = make_tree(tmp_path / "wd", {"a.py": "a\n", "s/b.py": "b\n"})
    (src / "hollow").mkdir()
    uri, ray_zip = ray_package(src, tmp_path)
    store = Store(tmp_path / "store")
    for path in ("a.py", "s/b.py"):
        store.put_blob(hashlib.sha256((src / path).read_bytes()).hexdigest(), src / path)
    name = uri.removeprefix("gcs://")
    rows = [["a.py", False, 0o644, 2, hashlib.sha256(b"a\n").hexdigest(), None],
            ["hollow", True, 0o755, 0, None, None],
            ["s/b.py", False, 0o644, 2, hashlib.sha256(b"b\n").hexdigest(), None]]
    store.put_manifest(name, {"uri": uri, "kind": "working_dir", "name": None,
                              "entries": rows}, 4)
    with zipfile.ZipFile(store.package_file(name)) as zf:
        assert sorted(zf.namelist()) == ["a.py", "hollow/", "s/b.py"]
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    assert _members(store.package_file(name)) == _members(ray_zip)


def test_zip_time_is_the_members_date(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "wd", {"a.py": "a\n"})
    uri, _zip = ray_package(src, tmp_path)
    man = _manifest(src, uri)
    man["entries"][0]["zip_time"] = [2024, 2, 29, 13, 37, 42]
    store = Store(tmp_path / "store")
    store.put_blob(man["entries"][0]["sha256"], src / "a.py")
    delta.commit(store, delta.Manifest.parse(man))
    with zipfile.ZipFile(store.package_file(uri.removeprefix("gcs://"))) as zf:
        assert zf.getinfo("a.py").date_time == (2024, 2, 29, 13, 37, 42)
    man["entries"][0]["zip_time"] = [1970, 1, 1, 0, 0, 0]
    with pytest.raises(PackagingError, match="zip_time"):
        delta.Manifest.parse(man)
