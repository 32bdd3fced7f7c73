"""The digest cache: a base file and an append-only journal per package root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rtenv_cli.core.packaging import digest_cache
from rtenv_cli.core.packaging.digest_cache import DigestCache
from rtenv_cli.core.packaging.walk import scan_package


def _tree(root: Path, n: int) -> list:  # type: ignore[type-arg]
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (root / f"m{i}.py").write_text(f"X = {i}\n")
    return sorted((e for e in scan_package(root, kind="working_dir", env={}).entries
                   if not e.is_dir), key=lambda e: e.relpath)


def _rows(files: list) -> list:  # type: ignore[type-arg]
    return [(e, bytes([i]) * 20, f"{i:064x}") for i, e in enumerate(files)]


def test_stored_digests_are_found_by_another_process_until_the_file_changes(
        tmp_path: Path) -> None:
    files = _tree(tmp_path / "src", 3)
    DigestCache(tmp_path / "cache").store(_rows(files))
    hits = DigestCache(tmp_path / "cache").lookup(files)  # a fresh instance reads the files
    assert hits == {e.relpath: (bytes([i]) * 20, f"{i:064x}") for i, e in enumerate(files)}
    (tmp_path / "src" / "m1.py").write_text("X = 'longer now'\n")
    again = [e for e in scan_package(tmp_path / "src", kind="working_dir", env={}).entries
             if not e.is_dir]
    assert set(DigestCache(tmp_path / "cache").lookup(again)) == {"m0.py", "m2.py"}


def test_a_torn_journal_keeps_its_whole_frames(tmp_path: Path) -> None:
    files = _tree(tmp_path / "src", 2)
    cache = DigestCache(tmp_path / "cache")
    cache.store(_rows(files)[:1])
    cache.store(_rows(files)[1:])
    (journal,) = (tmp_path / "cache").glob("*.journal")
    journal.write_bytes(journal.read_bytes()[:-5])  # a crash in the middle of the last append
    assert set(DigestCache(tmp_path / "cache").lookup(files)) == {"m0.py"}


@pytest.mark.parametrize("garbage", [b"", b"\x00" * 64, b"not marshal at all"])
def test_an_unreadable_base_is_no_cache(tmp_path: Path, garbage: bytes) -> None:
    files = _tree(tmp_path / "src", 2)
    cache = DigestCache(tmp_path / "cache")
    cache.store(_rows(files), keep=files)  # folds: writes the base
    (base,) = (tmp_path / "cache").glob("*.digests")
    base.write_bytes(garbage)
    assert DigestCache(tmp_path / "cache").lookup(files) == {}


def test_a_store_given_the_scan_folds_the_journal_and_drops_deleted_files(
        tmp_path: Path) -> None:
    files = _tree(tmp_path / "src", 4)
    cache = DigestCache(tmp_path / "cache")
    cache.store(_rows(files))
    (tmp_path / "src" / "m3.py").unlink()
    live = files[:3]
    cache.store(_rows(live)[:1], keep=live)
    assert not list((tmp_path / "cache").glob("*.journal"))
    assert set(DigestCache(tmp_path / "cache").lookup(files)) == {"m0.py", "m1.py", "m2.py"}


def test_a_long_journal_is_folded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(digest_cache, "_JOURNAL_MAX", 300)
    files = _tree(tmp_path / "src", 6)
    cache = DigestCache(tmp_path / "cache")
    for row in _rows(files):
        cache.store([row])
    journal = list((tmp_path / "cache").glob("*.journal"))
    assert not journal or journal[0].stat().st_size <= 300 + 200
    assert list((tmp_path / "cache").glob("*.digests"))
    assert len(DigestCache(tmp_path / "cache").lookup(files)) == 6


def test_two_roots_do_not_share_digests(tmp_path: Path) -> None:
    a = _tree(tmp_path / "a", 1)
    b = _tree(tmp_path / "b", 1)  # same relpath, same content, another root
    DigestCache(tmp_path / "cache").store(_rows(a))
    assert DigestCache(tmp_path / "cache").lookup(b) == {}


def test_a_fold_waits_for_anothers_lock_then_gives_up_without_failing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fold lock is a flock on `<base>.lock` (what filelock took before, so an older rtenv
    folding at once is excluded too); held by another, a store gives up after the wait: no
    error, no base written, and the next store folds."""
    fcntl = pytest.importorskip("fcntl")
    files = _tree(tmp_path / "src", 3)
    cache = DigestCache(tmp_path / "cache")
    cache.store(_rows(files)[:1])  # makes the directory
    (journal,) = (tmp_path / "cache").glob("*.journal")
    lock = journal.with_suffix(".digests.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another process's fold, as far as flock can tell
    monkeypatch.setattr(digest_cache, "_LOCK_WAIT", 0.0)
    try:
        DigestCache(tmp_path / "cache").store(_rows(files), keep=files)  # gives up, quietly
        assert not list((tmp_path / "cache").glob("*.digests"))
    finally:
        os.close(fd)
    DigestCache(tmp_path / "cache").store(_rows(files), keep=files)
    assert list((tmp_path / "cache").glob("*.digests"))
    assert set(DigestCache(tmp_path / "cache").lookup(files)) == {"m0.py", "m1.py", "m2.py"}
