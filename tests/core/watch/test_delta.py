"""A watch's delta pushes: each save's manifest worked out from the paths it touched, published
exactly as a fresh push of the tree publishes it."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from rtenv_cli.core.packaging.hashing import package_uri
from rtenv_cli.core.transport.local_store import LocalStoreTarget
from rtenv_cli.core.watch import delta
from rtenv_cli.core.watch.publish import DeltaPublisher
from rtenv_cli.core.watch.snapshot import Snapshot
from rtenv_cli.core.watch.sources import Source

EXCLUDES = ["*.log"]


def _fresh_manifest(tree: Path, store_root: Path) -> tuple[str, bytes]:
    """What `rtenv push` of the tree now publishes: (URI, the stored manifest's bytes)."""
    snap = Snapshot(tree, excludes=EXCLUDES)
    snap.full_scan()
    target = LocalStoreTarget(store_root)
    uri = delta.push_delta(snap, target).uri
    return uri, target.store.manifest_path(uri.removeprefix("gcs://")).read_bytes()


def _write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def _rename_save(path: Path, text: str) -> list[str]:
    tmp = path.with_name(path.name + ".swp~")
    tmp.write_text(text)
    os.replace(tmp, path)
    return [str(tmp), str(path)]


def _steps(t: Path) -> list[Callable[[], list[str]]]:
    """Edits as an editor, a shell or a build make them; each returns the paths its events
    name (an ignored file's creation names none)."""
    def rmtree(rel: str) -> list[str]:
        shutil.rmtree(t / rel)
        return [str(t / rel)]

    return [
        lambda: [_write(t / "a.py", "a 2\n")],
        lambda: [_write(t / "new/deep/b.py", "b\n")],  # new directories Ray hashes
        lambda: [(t / "pkg/c.py").unlink() or str(t / "pkg/c.py")],
        lambda: [(t / "hollow").mkdir() or str(t / "hollow")],  # an empty directory: zipped
        # an ignored file fills it (no event): zipped no longer, seen with the next save
        lambda: [_write(t / "hollow/x.log", "log\n") and _write(t / "a.py", "a 3\n")][-1:],
        lambda: [(t / "new/deep/b.py").unlink() or str(t / "new/deep/b.py")],  # left empty
        lambda: [(t / "a.py").chmod(0o755) or str(t / "a.py"), _write(t / "pkg/d.py", "d 2\n")],
        lambda: _rename_save(t / "pkg/d.py", "d 3\n"),
        lambda: [*rmtree("hollow"), _write(t / "hollow", "now a file\n")],
        lambda: rmtree("new"),
    ]


@pytest.mark.parametrize("incremental", [True, False])
def test_each_save_publishes_what_a_fresh_push_publishes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, incremental: bool) -> None:
    monkeypatch.setattr(delta, "INCREMENTAL", incremental)
    tree = tmp_path / "tree"
    for rel in ("a.py", "pkg/c.py", "pkg/d.py", "pkg/e.py", "data/w.bin"):
        _write(tree / rel, f"{rel}\n")
    snap = Snapshot(tree, excludes=EXCLUDES)
    snap.full_scan()
    src = Source("working_dir", snap)
    target = LocalStoreTarget(tmp_path / "store")
    publisher = DeltaPublisher(target)
    publisher.push(src)
    sent: list[dict] = []
    real_publish = target.publish
    monkeypatch.setattr(target, "publish", lambda m, b: sent.append(m) or real_publish(m, b))
    if incremental:  # the tree's whole manifest is never worked out again
        monkeypatch.setattr(snap, "manifest", lambda: pytest.fail("whole manifest"))
    for i, step in enumerate(_steps(tree)):
        snap.update(step())
        publisher.push(src)
        uri, expected = _fresh_manifest(tree, tmp_path / f"fresh{i}")
        ray_uri = package_uri(tree, kind="working_dir", excludes=EXCLUDES)
        assert snap.uri == uri == ray_uri, f"step {i}"
        name = uri.removeprefix("gcs://")
        assert target.store.manifest_path(name).read_bytes() == expected, f"step {i}"
        assert "base" in sent[-1], f"step {i}: a delta, not the whole manifest"
        assert len(json.dumps(sent[-1])) < 1000, f"step {i}"  # a few entries
    assert not snap.touched


def test_a_failed_commit_keeps_its_changes_for_the_next_push(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tmp_path / "tree"
    _write(tree / "a.py", "a\n")
    _write(tree / "b.py", "b\n")
    snap = Snapshot(tree)
    snap.full_scan()
    src = Source("working_dir", snap)
    target = LocalStoreTarget(tmp_path / "store")
    publisher = DeltaPublisher(target)
    publisher.push(src)
    snap.update([_write(tree / "a.py", "a 2\n")])
    real_publish = target.publish

    def refused(_m: object, _b: object) -> dict:
        raise delta.ContentChanged("a.py")

    monkeypatch.setattr(target, "publish", refused)
    with pytest.raises(delta.ContentChanged):
        publisher.push(src)
    monkeypatch.setattr(target, "publish", real_publish)
    snap.update([_write(tree / "b.py", "b 2\n")])
    publisher.push(src)
    uri, expected = _fresh_manifest(tree, tmp_path / "fresh")
    assert target.store.manifest_path(uri.removeprefix("gcs://")).read_bytes() == expected
