"""Incremental URI == Ray's URI of a fresh walk, over real files and random edit sequences."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtenv_cli.core.packaging.hashing import package_uri
from rtenv_cli.core.watch.snapshot import Change, Snapshot

DEFAULT_EXCLUDES = [".git", ".venv", "venv", "__pycache__"]


def ray_uri(root: Path, excludes: list[str] | None = None) -> str:
    """The reference: Ray 2.60's own hash of the directory (what `ray job submit` uploads)."""
    from ray._private.runtime_env.packaging import get_uri_for_directory

    return get_uri_for_directory(str(root), include_gitignore=True,
                                 excludes=DEFAULT_EXCLUDES + (excludes or []))


def test_full_scan_matches_ray(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "empty").mkdir(parents=True)
    (tmp_path / "a.py").write_text("print(1)\n")
    (tmp_path / "pkg" / "b.txt").write_bytes(os.urandom(5000))
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref\n")
    (tmp_path / ".gitignore").write_text("*.log\n")
    (tmp_path / "x.log").write_text("log\n")
    snap = Snapshot(tmp_path)
    change = snap.full_scan()
    assert snap.uri == ray_uri(tmp_path)
    assert set(change.added) == {"a.py", "pkg/b.txt", ".gitignore"}


def test_update_rehashes_only_what_changed(tmp_path: Path) -> None:
    for i in range(50):
        (tmp_path / f"f{i}.py").write_bytes(os.urandom(2000))
    snap = Snapshot(tmp_path)
    snap.full_scan()
    (tmp_path / "f7.py").write_text("changed\n")
    change = snap.update([str(tmp_path / "f7.py")])
    assert change.modified == ("f7.py",)
    assert snap.hashed_bytes == len("changed\n")
    assert snap.uri == ray_uri(tmp_path)


def test_ignore_file_edit_rescans(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("a")
    (tmp_path / "b.dat").write_text("b")
    snap = Snapshot(tmp_path)
    snap.full_scan()
    (tmp_path / ".gitignore").write_text("*.dat\n")
    change = snap.update([str(tmp_path / ".gitignore")])
    assert change.ignore_rules_changed
    assert "b.dat" in change.removed
    assert snap.uri == ray_uri(tmp_path)


def test_directory_moves_and_deletes(tmp_path: Path) -> None:
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "x.py").write_text("x")
    snap = Snapshot(tmp_path)
    snap.full_scan()
    (tmp_path / "d").rename(tmp_path / "moved")
    change = snap.update([str(tmp_path / "d"), str(tmp_path / "moved")])
    assert change.added == ("moved/e/x.py",)
    assert change.removed == ("d/e/x.py",)
    assert snap.uri == ray_uri(tmp_path)
    shutil.rmtree(tmp_path / "moved")
    snap.update([str(tmp_path / "moved")])
    assert snap.uri == ray_uri(tmp_path)


def test_an_event_on_a_links_target_updates_the_link(tmp_path: Path) -> None:
    """Ray packages a symlink as its target's content: an edit or a delete named by its target's
    path changes the link's entries too (a file link, and the files under a directory link)."""
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "main.py").write_text("v1\n")
    (tmp_path / "pkg" / "sub" / "data.txt").write_text("data\n")
    (tmp_path / "link.py").symlink_to("main.py")
    (tmp_path / "linkdir").symlink_to("pkg/sub")
    snap = Snapshot(tmp_path)
    snap.full_scan()
    (tmp_path / "main.tmp").write_text("v2, longer\n")
    os.replace(tmp_path / "main.tmp", tmp_path / "main.py")
    change = snap.update([str(tmp_path / "main.py"), str(tmp_path / "main.tmp")])
    assert set(change.modified) == {"main.py", "link.py"}
    assert snap.uri == ray_uri(tmp_path)
    (tmp_path / "pkg" / "sub" / "data.txt").unlink()
    change = snap.update([str(tmp_path / "pkg" / "sub" / "data.txt")])
    assert set(change.removed) == {"pkg/sub/data.txt", "linkdir/data.txt"}
    assert snap.uri == ray_uri(tmp_path)


def test_manifest_lists_files_and_leaf_dirs(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "empty").mkdir(parents=True)
    (tmp_path / "pkg" / "m.py").write_text("m")
    snap = Snapshot(tmp_path)
    snap.full_scan()
    manifest = snap.manifest()
    paths = {(e["path"], e["is_dir"]) for e in manifest["entries"]}
    assert paths == {("pkg/m.py", False), ("pkg/empty", True)}
    assert manifest["uri"] == snap.uri


NAMES = st.sampled_from(["a.py", "b.txt", "sub/c.py", "sub/d.bin", "sub/deep/e.py", "f.log",
                         ".gitignore", "sub/.rayignore", "g~", "venv/h.py", "empty/"])
OPS = st.lists(st.tuples(st.sampled_from(["write", "delete", "rename", "mkdir"]), NAMES, NAMES,
                         st.binary(max_size=64)), min_size=1, max_size=12)
IGNORE_TEXT = {".gitignore": b"*.log\n", "sub/.rayignore": b"*.bin\n"}


def _apply(root: Path, op: str, a: str, b: str, data: bytes) -> list[str]:
    pa, pb = root / a.rstrip("/"), root / b.rstrip("/")
    touched = [str(pa), str(pb)]
    if op == "mkdir" or a.endswith("/"):
        if not pa.exists():
            pa.mkdir(parents=True)
        return touched
    if op == "write":
        pa.parent.mkdir(parents=True, exist_ok=True)
        if pa.is_dir():
            return touched
        pa.write_bytes(IGNORE_TEXT.get(a, data) if data else IGNORE_TEXT.get(a, b"x"))
    elif op == "delete":
        if pa.is_dir():
            shutil.rmtree(pa)
        elif pa.exists():
            pa.unlink()
    elif (op == "rename" and pa.is_file() and not pb.is_dir() and not b.endswith("/")
          and b not in IGNORE_TEXT):  # random bytes as .gitignore: Ray itself fails to decode
        pb.parent.mkdir(parents=True, exist_ok=True)
        pa.replace(pb)
    return touched


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_incremental_uri_equals_fresh_packaging(ops: list[tuple[str, str, str, bytes]]) -> None:
    root = Path(tempfile.mkdtemp(prefix="rtenv-prop-"))
    try:
        (root / "a.py").write_text("start\n")
        snap = Snapshot(root)
        snap.full_scan()
        for op in ops:
            touched = _apply(root, *op)
            snap.update(touched)
            assert snap.uri == ray_uri(root), op
            assert snap.uri == package_uri(root, kind="working_dir", env={}, use_cache=False), op
            fresh = Snapshot(root)
            fresh.full_scan()
            assert fresh.uri == snap.uri
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_reconcile_finds_missed_changes_without_a_walk(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    for i in range(20):
        (tmp_path / "d" / f"f{i}.py").write_text(f"{i}\n")
    snap = Snapshot(tmp_path)
    snap.full_scan()
    assert not snap.reconcile()
    (tmp_path / "d" / "f3.py").write_text("changed, no event\n")
    (tmp_path / "d" / "new.py").write_text("new, no event\n")
    (tmp_path / "d" / "f5.py").unlink()
    change = snap.reconcile()
    assert change.modified == ("d/f3.py",)
    assert change.added == ("d/new.py",)
    assert change.removed == ("d/f5.py",)
    assert snap.uri == ray_uri(tmp_path)
    assert not snap.reconcile()  # directory stats were refreshed: nothing suspect any more
    # after an event-driven update the parent's stat is refreshed too
    (tmp_path / "top.py").write_text("t\n")
    snap.update([str(tmp_path / "top.py")])
    assert not snap.reconcile()


@pytest.mark.parametrize(("first", "later", "net"), [
    (Change(modified=("a",)), Change(modified=("a",)), Change(modified=("a",))),
    (Change(added=("a",)), Change(modified=("a",)), Change(added=("a",))),
    (Change(added=("a",)), Change(removed=("a",)), Change()),
    (Change(removed=("a",)), Change(added=("a",)), Change(modified=("a",))),
    (Change(modified=("a",)), Change(removed=("a",)), Change(removed=("a",))),
    (Change(modified=("a",)), Change(added=("b",)), Change(added=("b",), modified=("a",))),
    (Change(), Change(modified=("a",)), Change(modified=("a",))),
])
def test_changes_compose_into_one_net_change(first: Change, later: Change, net: Change) -> None:
    assert first.then(later) == net
