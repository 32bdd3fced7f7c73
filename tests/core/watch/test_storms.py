"""Whatever the events, a watch ends in the package a fresh `rtenv push` builds, byte for byte:
`git checkout` of another branch, a build writing thousands of files, events lost (an inotify
queue overflow), to a target of whole zips (a shared directory, Ray's zip path)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from rtenv_cli.core.transport.file_target import FileTarget
from tests.core.watch.helpers import Running, wait_for


def _members(data: bytes) -> list[tuple[str, int, int]]:
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return [(i.filename, i.CRC, i.external_attr) for i in zf.infolist()]


def _settled(run: Running, target: FileTarget, tree: Path, tmp_path: Path, *,
             seen_before: bool = False) -> bytes:
    """The package published last, once it is a fresh `rtenv push` of the tree: the same URI
    and bytes (`seen_before`: a version this target already held, kept as it was, as `rtenv
    push` keeps it: the same URI and members, dated by the files of its first push)."""
    from rtenv_cli.core.packaging.build import build_package

    fresh = build_package(tree, kind="working_dir", env={}, dest_dir=tmp_path / "fresh",
                          layout="remote", use_cache=False)
    fresh_bytes = fresh.path.read_bytes()

    def published() -> bytes | None:
        if not run.events or run.events[-1].uri != fresh.uri:
            return None
        data = target._dest(fresh.uri).read_bytes()
        if seen_before:
            return data if _members(data) == _members(fresh_bytes) else None
        return data if data == fresh_bytes else None

    return wait_for(published, timeout=60)


def _git(tree: Path, *args: str) -> None:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")
    subprocess.run(["git", *args], cwd=tree, check=True, capture_output=True, env=env)


def test_git_checkout_of_another_branch(tmp_path: Path) -> None:
    tree = tmp_path / "repo"
    (tree / "pkg").mkdir(parents=True)
    for i in range(300):
        (tree / "pkg" / f"m{i}.py").write_text(f"V = {i}\n")
    (tree / "main.py").write_text("main\n")
    _git(tree, "init", "-q", "-b", "main")
    _git(tree, "add", "-A")
    _git(tree, "commit", "-q", "-m", "one")
    _git(tree, "checkout", "-q", "-b", "other")
    for i in range(0, 300, 2):
        (tree / "pkg" / f"m{i}.py").write_text(f"V = 'other {i}'\n")
    (tree / "newdir" / "deep").mkdir(parents=True)
    for i in range(50):
        (tree / "newdir" / "deep" / f"n{i}.py").write_text(f"N = {i}\n")
    (tree / "main.py").unlink()
    _git(tree, "add", "-A")
    _git(tree, "commit", "-q", "-m", "two")
    _git(tree, "checkout", "-q", "main")
    target = FileTarget((tmp_path / "shared").as_uri())
    with Running(tree, target) as run:
        _git(tree, "checkout", "-q", "other")
        _settled(run, target, tree, tmp_path / "a")
        assert not (tree / "main.py").exists()
        _git(tree, "checkout", "-q", "main")  # and back: new directories removed
        _settled(run, target, tree, tmp_path / "b", seen_before=True)
        assert not (tree / "newdir").exists()


def test_a_build_writing_thousands_of_files(tmp_path: Path) -> None:
    tree = tmp_path / "src"
    tree.mkdir()
    (tree / "main.py").write_text("main\n")
    target = FileTarget((tmp_path / "shared").as_uri())
    with Running(tree, target) as run:
        for d in range(40):
            out = tree / "build" / f"d{d}"
            out.mkdir(parents=True)
            for i in range(60):
                (out / f"f{i}.txt").write_text(f"{d}/{i}\n" * 10)
        _settled(run, target, tree, tmp_path)
        assert len(run.events) < 40  # coalesced, not one push per file


def test_events_lost_in_an_overflow_are_found_again(tmp_path: Path) -> None:
    """The kernel drops events when its queue overflows and says so (IN_Q_OVERFLOW): the
    watch then re-checks the tree at once and watches new directories. Simulated here by a
    directory whose watch is taken away, and the overflow notice."""
    from rtenv_cli.core.watch.inotify import InotifyTree

    tree = tmp_path / "src"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "a.py").write_text("A = 1\n")
    (tree / "main.py").write_text("main\n")
    target = FileTarget((tmp_path / "shared").as_uri())
    with Running(tree, target, reconcile_s=3600) as run:
        inotify = run.session.watcher.observer  # type: ignore[union-attr]
        assert isinstance(inotify, InotifyTree)
        inotify._remove(str(tree / "pkg"))  # its events are lost from here on
        (tree / "pkg" / "a.py").write_text("A = 'lost'\n")
        (tree / "pkg" / "new").mkdir()
        (tree / "pkg" / "new" / "b.py").write_text("B = 1\n")
        run.session.loop._on_overflow()
        ev = run.next_event(1)
        assert ev.trigger == "reconcile"
        _settled(run, target, tree, tmp_path)
        wait_for(lambda: str(tree / "pkg" / "new") in inotify.watched())
        (tree / "pkg" / "new" / "b.py").write_text("B = 2\n")  # heard again
        assert run.next_event(2).modified == ("pkg/new/b.py",)
