"""The Linux watcher: inotify watches on the packaged directories only, counted by the kernel
(/proc/self/fdinfo of the inotify descriptor), following new directories and ignore files."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from rtenv_cli.core.transport.local_store import LocalStoreTarget
from rtenv_cli.core.watch.inotify import IN_Q_OVERFLOW, InotifyTree, watch_count
from tests.core.watch.helpers import Running, wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify: Linux")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "main.py").write_text("print('hi')\n")
    (root / "pkg" / "sub" / "util.py").write_text("X = 1\n")
    for i in range(60):  # a virtualenv's many directories, and git's
        (root / ".venv" / "lib" / f"site{i}" / "inner").mkdir(parents=True)
    for i in range(10):
        (root / ".git" / "objects" / f"{i:02x}").mkdir(parents=True)
    (root / "gen" / "out").mkdir(parents=True)  # ignored by .gitignore, with a subdirectory
    (root / "gen" / "out" / "big.bin").write_bytes(b"x" * 100)
    (root / ".gitignore").write_text("gen\n")
    return root


def _inotify(run: Running) -> InotifyTree:
    watcher = run.session.watcher
    assert watcher is not None
    assert isinstance(watcher.observer, InotifyTree)
    return watcher.observer


def _packaged_dirs(run: Running) -> set[str]:
    snap = run.session.sources[0].snap
    return {str(snap.root if rel == "." else snap.root / rel)
            for rel, e in snap.entries.items() if e.is_dir}


def test_only_packaged_directories_are_watched(tree: Path, tmp_path: Path) -> None:
    with Running(tree, LocalStoreTarget(tmp_path / "store")) as run:
        inotify = _inotify(run)
        watched = inotify.watched()
        assert watched == _packaged_dirs(run) == {
            str(tree), str(tree / "pkg"), str(tree / "pkg" / "sub")}
        # the kernel's own count: no watch on .venv's 121 directories, .git's 12 or gen's 2
        assert watch_count(inotify.fd) == 3


def test_a_new_directory_is_watched_and_an_ignored_one_is_not(tree: Path,
                                                              tmp_path: Path) -> None:
    with Running(tree, LocalStoreTarget(tmp_path / "store")) as run:
        inotify = _inotify(run)
        (tree / ".venv" / "lib" / "fresh").mkdir()
        (tree / "newpkg" / "deep").mkdir(parents=True)
        (tree / "newpkg" / "deep" / "mod.py").write_text("Y = 2\n")
        wait_for(lambda: any("newpkg/deep/mod.py" in e.added for e in run.events))
        wait_for(lambda: str(tree / "newpkg" / "deep") in inotify.watched())
        (tree / "newpkg" / "deep" / "mod.py").write_text("Y = 3\n")  # heard in its new watch
        wait_for(lambda: any(e.modified == ("newpkg/deep/mod.py",) for e in run.events))
        assert not any(".venv" in p for p in inotify.watched())
        assert watch_count(inotify.fd) == len(inotify.watched()) == 5


def test_an_ignore_file_edit_changes_what_is_watched(tree: Path, tmp_path: Path) -> None:
    from tests.core.watch.test_session import ray_uri

    with Running(tree, LocalStoreTarget(tmp_path / "store")) as run:
        inotify = _inotify(run)
        assert str(tree / "gen") not in inotify.watched()
        (tree / ".gitignore").write_text("# gen is packaged now\n")
        wait_for(lambda: any("gen/out/big.bin" in e.added for e in run.events))
        wait_for(lambda: str(tree / "gen" / "out") in inotify.watched())
        (tree / "gen" / "out" / "big.bin").write_bytes(b"y" * 100)
        ev = wait_for(lambda: next((e for e in run.events
                                    if e.modified == ("gen/out/big.bin",)), None))
        assert ev.uri == ray_uri(tree)
        (tree / ".gitignore").write_text("gen\n")  # and ignored again: its watches go
        wait_for(lambda: not any("/gen" in p for p in inotify.watched()))
        assert watch_count(inotify.fd) == 3


def test_a_queue_overflow_is_reported(tmp_path: Path) -> None:
    """IN_Q_OVERFLOW (events lost) reaches `on_overflow`: the loop then re-checks the tree."""
    overflows: list[bool] = []
    tree = InotifyTree([str(tmp_path)], lambda _p, _c: None, wants_dir=lambda _p: True,
                       on_overflow=lambda: overflows.append(True))
    tree._dispatch(struct.pack("iIII", -1, IN_Q_OVERFLOW, 0, 0))
    assert overflows == [True]
