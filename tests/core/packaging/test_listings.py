"""The walk's listing cache (packaging/walk.py, LISTINGS): a scan that reuses the last scan's
listings finds exactly what a scan that lists every directory finds, after any change."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from rtenv_cli.core.packaging import walk
from rtenv_cli.core.packaging.walk import scan_package


def make(root: Path) -> Path:
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "sub" / "m.py").write_text("M = 1\n")
    (root / "pkg" / "a.py").write_text("A = 1\n")
    (root / "pkg" / ".gitignore").write_text("*.log\n")
    (root / "pkg" / "x.log").write_text("log\n")
    (root / "build").mkdir()
    (root / "build" / "out.py").write_text("")
    (root / ".gitignore").write_text("build/\n")
    (root / "empty").mkdir()
    (root.parent / "outside").mkdir()
    (root.parent / "outside" / "o.txt").write_text("o\n")
    (root / "linked").symlink_to(root.parent / "outside")
    (root / "alias.py").symlink_to(root / "pkg" / "a.py")
    (root / "run.sh").write_text("#!/bin/sh\n")
    return root


def scan(root: Path, listings: bool) -> tuple[object, ...]:
    walk.LISTINGS = listings
    try:
        s = scan_package(root, kind="working_dir", env={})
    finally:
        walk.LISTINGS = True
    return s.entries, s.ignored_top, s.warnings, s.root_excluded


def both(root: Path, lists: list[str]) -> tuple[object, ...]:
    """The scan with the cache (checked equal to one without it); the directories it listed
    are appended to `lists`."""
    del lists[:]
    cached = scan(root, True)
    listed = list(lists)
    assert cached == scan(root, False)
    lists[:] = listed
    return cached


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The directories each scan lists; listings are trusted at once (no racy window)."""
    monkeypatch.setattr(walk, "_RACY_NS", 0)
    lists: list[str] = []
    real = walk._list

    def listing(path: str) -> list[os.DirEntry[str]]:
        lists.append(path)
        return real(path)

    monkeypatch.setattr(walk, "_list", listing)
    return lists


def _replace_by_dir(root: Path) -> None:
    (root / "run.sh").unlink()
    (root / "run.sh").mkdir()


def _break_link(root: Path) -> None:
    (root / "pkg" / "a.py").unlink()  # alias.py -> pkg/a.py -> gone
    (root / "pkg" / "a.py").symlink_to("gone")


CHANGES: dict[str, tuple[Callable[[Path], object], set[str]]] = {
    # what changes -> the directories listed again (relative to the root; "." the root)
    "a file edited in place": (lambda r: (r / "pkg" / "a.py").write_text("A = 2\n"), set()),
    "a file's mode": (lambda r: (r / "run.sh").chmod(0o755), set()),
    "a file added": (lambda r: (r / "pkg" / "sub" / "n.py").write_text(""), {"pkg/sub"}),
    "a file removed": (lambda r: (r / "pkg" / "sub" / "m.py").unlink(), {"pkg/sub"}),
    "a file made a directory": (_replace_by_dir, {".", "run.sh"}),
    "an ignore file edited in place": (
        lambda r: (r / "pkg" / ".gitignore").write_text("*.py\n"), {"pkg", "pkg/sub"}),
    "the root's ignore file edited in place": (
        lambda r: (r / ".gitignore").write_text("empty/\n"),
        {".", "pkg", "pkg/sub", "build", "empty", "linked"}),
    "a linked directory's content": (
        lambda r: (r.parent / "outside" / "p.txt").write_text("p\n"), {"linked"}),
    "a link's target made a broken link": (_break_link, {".", "pkg"}),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_scan_from_the_last_listings_is_a_full_scan(
        tmp_path: Path, counted: list[str], change: str) -> None:
    root = make(tmp_path / "src")
    both(root, counted)
    assert counted
    both(root, counted)
    assert counted == []  # nothing changed: no directory listed
    fn, relisted = CHANGES[change]
    fn(root)
    both(root, counted)
    assert {os.path.relpath(p, root) for p in counted} == relisted


def test_a_directory_changed_within_its_listing_s_clock_tick_is_listed_again(
        tmp_path: Path) -> None:
    root = make(tmp_path / "src")
    scan(root, True)
    (root / "pkg" / "sub" / "n.py").write_text("")  # at once: the same mtime tick, maybe
    assert scan(root, True) == scan(root, False)
    assert any(e.relpath == "pkg/sub/n.py" for e in scan(root, True)[0])  # type: ignore[attr-defined]


def test_a_torn_listings_file_costs_a_listing(tmp_path: Path, counted: list[str]) -> None:
    root = make(tmp_path / "src")
    both(root, counted)
    (home,) = (Path(os.environ["RTENV_HOME"]) / "scans").iterdir()
    home.write_bytes(home.read_bytes()[:-10])
    both(root, counted)
    assert len(counted) > 3
