"""The watch loop with a real watchdog observer, real file edits and the embedded store."""

from __future__ import annotations

import errno
import os
import zipfile
from pathlib import Path

import pytest

from rtenv_cli.core.transport.local_store import LocalStoreTarget
from rtenv_cli.core.watch.snapshot import Snapshot
from tests.core.watch.helpers import Running, wait_for

DEFAULT_EXCLUDES = [".git", ".venv", "venv", "__pycache__"]


def ray_uri(root: Path) -> str:
    from ray._private.runtime_env.packaging import get_uri_for_directory

    return get_uri_for_directory(str(root), include_gitignore=True, excludes=DEFAULT_EXCLUDES)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    (root / "pkg").mkdir(parents=True)
    (root / "main.py").write_text("print('hi')\n")
    (root / "pkg" / "util.py").write_text("X = 1\n")
    (root / ".gitignore").write_text("*.log\n")
    return root


@pytest.fixture
def store(tmp_path: Path) -> LocalStoreTarget:
    return LocalStoreTarget(tmp_path / "store")


def _published(store: LocalStoreTarget, uri: str) -> set[str]:
    path = store.store.package_file(uri.removeprefix("gcs://"))
    with zipfile.ZipFile(path) as zf:
        return set(zf.namelist())


def test_single_edit(tree: Path, store: LocalStoreTarget) -> None:
    with Running(tree, store) as run:
        first = run.events[0]
        assert first.trigger == "initial"
        assert first.uri == ray_uri(tree)
        (tree / "main.py").write_text("print('changed')\n")
        ev = run.next_event(1)
        assert ev.modified == ("main.py",)
        assert ev.uri == ray_uri(tree) != first.uri
        assert store.exists(ev.uri)
        # only the edited file's blob crossed over (plus the manifest)
        assert ev.bytes_sent < len("print('changed')\n") + 4096


def test_burst_of_500_edits_is_one_push(tree: Path, store: LocalStoreTarget) -> None:
    # the burst takes ~0.1 s; a quiet period of 1 s (not 0.3) keeps a scheduling stall of this
    # test's writer on a loaded 2-core box from ending the batch halfway (seen once in CI)
    with Running(tree, store, quiet_s=1.0, max_wait_s=10) as run:
        for i in range(500):
            (tree / "pkg" / f"gen_{i % 50}.py").write_text(f"v = {i}\n")
        ev = run.next_event(1)
        assert len(ev.added) == 50
        assert ev.uri == ray_uri(tree)
        # the next edit gives the next push: nothing from the burst was left over
        (tree / "main.py").write_text("after\n")
        ev2 = run.next_event(2)
        assert ev2.modified == ("main.py",)
        assert len(run.events) == 3


def test_rename_move_and_delete(tree: Path, store: LocalStoreTarget) -> None:
    with Running(tree, store) as run:
        (tree / "pkg").rename(tree / "lib")
        ev = run.next_event(1)
        assert ev.added == ("lib/util.py",)
        assert ev.removed == ("pkg/util.py",)
        assert ev.uri == ray_uri(tree)
        (tree / "main.py").unlink()
        ev = run.next_event(2)
        assert ev.removed == ("main.py",)
        assert _published(store, ev.uri) >= {"lib/util.py"}
        assert "main.py" not in _published(store, ev.uri)


def test_editor_save_pattern_write_temp_then_rename(tree: Path, store: LocalStoreTarget) -> None:
    with Running(tree, store) as run:
        # vim: probe file 4913, swap file, write to a backup, then rename over the original
        (tree / "4913").write_text("")
        (tree / "4913").unlink()
        (tree / ".main.py.swp").write_bytes(b"swap")
        tmp = tree / "main.py~"
        tmp.write_text("print('saved by editor')\n")
        os.replace(tmp, tree / "main.py")
        (tree / ".main.py.swp").unlink()
        # JetBrains safe write
        (tree / "pkg" / "util.py___jb_tmp___").write_text("X = 2\n")
        os.replace(tree / "pkg" / "util.py___jb_tmp___", tree / "pkg" / "util.py")
        ev = run.next_event(1)
        expected = ray_uri(tree)
        # the snapshot reaches the final state before the push of it is reported: wait for both
        wait_for(lambda: run.events[-1].uri == expected)
        assert run.session.sources[0].snap.uri == expected
        changed = {f for e in run.events[1:] for f in e.added + e.modified + e.removed}
        assert changed == {"main.py", "pkg/util.py"}
        assert ev.trigger == "change"


def test_ignored_and_temp_files_do_not_push(tree: Path, store: LocalStoreTarget) -> None:
    with Running(tree, store) as run:
        (tree / "debug.log").write_text("noise\n")  # .gitignore
        (tree / ".git").mkdir()
        (tree / ".git" / "index").write_text("x")  # Ray default exclude
        (tree / "#main.py#").write_text("emacs autosave")
        (tree / ".DS_Store").write_text("x")
        (tree / "main.py").write_text("real\n")  # then one real edit
        ev = run.next_event(1)
        assert ev.triggered_by == ("main.py",)
        assert ev.modified == ("main.py",)
        assert not any(n.endswith(".log") for n in _published(store, ev.uri))
        # the emacs/DS_Store files do not trigger but are in the package at the next push,
        # exactly as Ray would package them
        assert ev.uri == ray_uri(tree)


def test_edits_during_a_push_are_picked_up(tree: Path, store: LocalStoreTarget,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    original = store.publish  # a save's blobs and commit (one request to an agent)
    edited = []

    def slow_commit(manifest, blobs):  # type: ignore[no-untyped-def]
        if not edited:
            edited.append(True)
            (tree / "pkg" / "util.py").write_text("X = 'during push'\n")
        return original(manifest, blobs)

    with Running(tree, store) as run:
        monkeypatch.setattr(store, "publish", slow_commit)
        (tree / "main.py").write_text("edit 1\n")
        run.next_event(1)
        ev = run.next_event(2)
        assert ev.modified == ("pkg/util.py",)
        assert ev.uri == ray_uri(tree)
        assert store.exists(ev.uri)


def test_file_changed_while_hashing_is_never_published(tree: Path,
                                                       store: LocalStoreTarget) -> None:
    snap = Snapshot(tree)
    snap.full_scan()
    stale_uri = snap.uri
    (tree / "main.py").write_text("edited after the snapshot read it\n")
    from rtenv_cli.core.watch.delta import push_delta
    from rtenv_cli.core.watch.zipcache import ContentChanged

    with pytest.raises(ContentChanged):
        push_delta(snap, store)
    assert not store.exists(stale_uri)


def test_watch_limit_falls_back_to_polling(tree: Path, store: LocalStoreTarget) -> None:
    def exhausted() -> object:
        raise OSError(errno.ENOSPC, "inotify watch limit reached")

    with Running(tree, store, observer_factory=exhausted, poll_interval_s=0.1) as run:
        assert run.session.watcher is not None
        assert run.session.watcher.mode == "polling"
        assert any("fs.inotify.max_user_watches" in (h or "") for _k, _m, h in run.notices)
        (tree / "main.py").write_text("polled\n")
        ev = run.next_event(1)
        assert ev.modified == ("main.py",)


def test_forced_polling(tree: Path, store: LocalStoreTarget) -> None:
    with Running(tree, store, polling=True, poll_interval_s=0.1) as run:
        assert run.session.watcher.mode == "polling"  # type: ignore[union-attr]
        (tree / "new.py").write_text("n\n")
        assert run.next_event(1).added == ("new.py",)


def test_reconcile_catches_missed_changes(tree: Path, store: LocalStoreTarget) -> None:
    def deaf() -> object:
        from watchdog.observers.api import BaseObserver
        from watchdog.observers.polling import PollingEmitter

        class Deaf(BaseObserver):  # an observer that never reports anything
            def __init__(self) -> None:
                super().__init__(PollingEmitter, timeout=3600)

            def schedule(self, *_a, **_k):  # type: ignore[no-untyped-def]
                return None

        return Deaf()

    with Running(tree, store, observer_factory=deaf, reconcile_s=0.3) as run:
        (tree / "main.py").write_text("missed by the watcher\n")
        ev = run.next_event(1)
        assert ev.trigger == "reconcile"
        assert ev.modified == ("main.py",)


def _env_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "runtime_env.yaml"
    path.write_text(body)
    return path


def test_runtime_env_edits_valid_and_invalid(tree: Path, store: LocalStoreTarget,
                                              tmp_path: Path) -> None:
    env = _env_file(tmp_path, "working_dir: src\nenv_vars:\n  A: '1'\n")
    with Running(env, store, base_dir=tmp_path) as run:
        assert run.events[0].runtime_env["working_dir"] == ray_uri(tree)
        env.write_text("working_dir: src\nenv_vars: [not, a, mapping]\n")
        wait_for(lambda: any(k == "error" for k, _m, _h in run.notices))
        assert len(run.events) == 1  # invalid: reported, not pushed
        env.write_text("working_dir: src\nenv_vars:\n  A: '2'\npip: [requests]\n")
        ev = run.next_event(1)
        assert ev.trigger == "env"
        assert ev.runtime_env["env_vars"] == {"A": "2"}
        diffs = [m for k, m, _h in run.notices if k == "env"]
        assert any('"A": "2"' in m for m in diffs)
        assert any("rebuild" in (h or "") for k, _m, h in run.notices if k == "env")
        # watching goes on after the invalid state
        (tree / "main.py").write_text("still watching\n")
        assert run.next_event(2).modified == ("main.py",)


def test_dependency_file_change_is_reported(tree: Path, store: LocalStoreTarget,
                                            tmp_path: Path) -> None:
    (tree / "requirements.txt").write_text("requests\n")
    with Running(tree, store) as run:
        (tree / "requirements.txt").write_text("requests\nhttpx\n")
        ev = run.next_event(1)
        assert ev.modified == ("requirements.txt",)
        assert any("requirements.txt" in m for k, m, _h in run.notices if k == "env")


def test_local_file_py_module_is_refused(tmp_path: Path, store: LocalStoreTarget) -> None:
    from rtenv_cli.core.errors import RtenvError
    from rtenv_cli.core.watch.session import WatchSession

    (tmp_path / "src").mkdir()
    (tmp_path / "helper.py").write_text("x = 1\n")
    env = _env_file(tmp_path, "working_dir: src\npy_modules: [helper.py]\n")
    with pytest.raises(RtenvError) as info:  # validation (job-submit) or watch refuses it
        WatchSession(env, store, base_dir=tmp_path)
    assert "helper.py" in info.value.message


def test_py_module_directory_is_watched(tmp_path: Path, store: LocalStoreTarget) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("m\n")
    (tmp_path / "mylib").mkdir()
    (tmp_path / "mylib" / "__init__.py").write_text("v = 1\n")
    env = _env_file(tmp_path, "working_dir: src\npy_modules: [mylib]\n")
    with Running(env, store, base_dir=tmp_path) as run:
        first = run.events[0]
        assert set(first.uris) == {"working_dir", "py_modules[0]"}
        (tmp_path / "mylib" / "__init__.py").write_text("v = 2\n")
        ev = run.next_event(1)
        assert ev.uris["working_dir"] == first.uris["working_dir"]
        assert ev.uris["py_modules[0]"] != first.uris["py_modules[0]"]
        assert ev.runtime_env["py_modules"] == [ev.uris["py_modules[0]"]]
        assert store.exists(ev.uris["py_modules[0]"])
        names = _published(store, ev.uris["py_modules[0]"])
        assert names == {"mylib/__init__.py"}


def test_a_write_still_open_is_packaged_during_the_quiet_period(tree: Path,
                                                                tmp_path: Path) -> None:
    """A write not closed yet waits for the quiet period (it may go on); to a target of whole
    zips the zip of what is there so far is built meanwhile. The close ends the wait: the push
    follows at once, with the final content, and reports the edit once."""
    from rtenv_cli.core.transport.file_target import FileTarget

    target = FileTarget((tmp_path / "shared").as_uri())
    with Running(tree, target, quiet_s=30.0, max_wait_s=60.0) as run:
        src = run.session.sources[0]
        with open(tree / "main.py", "w") as fh:
            fh.write("print('v1')\n")
            fh.flush()
            wait_for(lambda: src.prepared is not None, timeout=5)
            assert len(run.events) == 1  # built, not pushed: the file is still open
            fh.write("print('v2, before the close')\n")
        ev = run.next_event(1)  # the close: no 30 s quiet period
        assert (ev.added, ev.modified, ev.removed) == ((), ("main.py",), ())
        assert ev.uri == ray_uri(tree)  # the final content, not the prepared first one
        assert src.last_zip is not None
        assert src.last_zip.uri == ev.uri
        assert src.prepared is None
        with open(tree / "main.py", "w") as fh:  # prepared while open, sent at the close
            fh.write("print('v3')\n")
            fh.flush()
            prepared = wait_for(lambda: src.prepared, timeout=5)
        ev = run.next_event(2)
        assert ev.uri == prepared.uri == ray_uri(tree)
        assert src.last_zip is prepared
        assert target.exists(ev.uri)


def test_a_closed_save_and_a_rename_into_place_publish_without_the_quiet_period(
        tree: Path, store: LocalStoreTarget) -> None:
    """The kernel says when a save is complete (close after write, rename into place): the
    push follows at once, not after the quiet period (30 s here)."""
    with Running(tree, store, quiet_s=30.0, max_wait_s=60.0) as run:
        (tree / "main.py").write_text("print('closed')\n")
        ev = run.next_event(1, timeout=20)
        assert ev.modified == ("main.py",)
        assert ev.uri == ray_uri(tree)
        tmp = tree / "pkg" / "util.py~"  # an editor's atomic save: write aside, rename over
        tmp.write_text("X = 'renamed into place'\n")
        os.replace(tmp, tree / "pkg" / "util.py")
        ev = run.next_event(2, timeout=20)
        assert ev.modified == ("pkg/util.py",)
        assert ev.uri == ray_uri(tree)


def test_a_watch_restarted_on_a_pushed_tree_splices_its_first_edit(tree: Path,
                                                                    tmp_path: Path) -> None:
    """The target already has the tree's package: nothing is uploaded at start, but the zip is
    built all the same, so that the first save re-uses its members instead of zipping all."""
    from rtenv_cli.core.transport.file_target import FileTarget

    target = FileTarget((tmp_path / "shared").as_uri())
    for i in range(8):
        (tree / f"m{i}.py").write_text(f"M = {i}\n")
    with Running(tree, target):
        pass
    with Running(tree, target) as run:
        assert run.events[0].bytes_sent == 0  # already there
        src = run.session.sources[0]
        assert src.last_zip is not None
        (tree / "main.py").write_text("print('first edit')\n")
        ev = run.next_event(1)
        assert ev.uri == ray_uri(tree)
        assert src.last_zip.uri == ev.uri
        assert src.last_zip.compressed == 1  # only main.py
        assert src.last_zip.reused >= 9


def test_a_py_module_given_as_a_parent_relative_path_is_watched(
        tmp_path: Path, store: LocalStoreTarget, monkeypatch: pytest.MonkeyPatch) -> None:
    """`py_modules: [../libs/helper]`, relative to the CWD as for push and Ray: edits in it are
    seen (the path is normalised once, in push's source discovery)."""
    proj = tmp_path / "proj"
    (proj / "app").mkdir(parents=True)
    (proj / "app" / "main.py").write_text("m\n")
    helper = tmp_path / "libs" / "helper"
    helper.mkdir(parents=True)
    (helper / "__init__.py").write_text("v = 1\n")
    env = _env_file(proj, "working_dir: app\npy_modules: [../libs/helper]\n")
    monkeypatch.chdir(proj)
    with Running(env, store) as run:
        first = run.events[0]
        assert first.uris["py_modules[0]"] == ray_py_module_uri(helper)
        (helper / "__init__.py").write_text("v = 2\n")
        ev = run.next_event(1)
        assert ev.modified == ("__init__.py",)
        assert ev.uris["py_modules[0]"] == ray_py_module_uri(helper) != first.uris["py_modules[0]"]
        assert ev.uris["working_dir"] == first.uris["working_dir"]
        assert _published(store, ev.uris["py_modules[0]"]) == {"helper/__init__.py"}


def ray_py_module_uri(root: Path) -> str:
    from ray._private.runtime_env.packaging import get_uri_for_directory

    return get_uri_for_directory(str(root), include_gitignore=True)


def test_an_output_inside_the_working_dir_is_neither_packaged_nor_a_trigger(
        tree: Path, store: LocalStoreTarget) -> None:
    """push --watch -o: the caller rewrites the output after each push; it never changes the
    URI and never starts another push."""
    from rtenv_cli.core.fsutil import atomic_write_text

    out = tree / "pushed.yaml"
    with Running(tree, store, outputs=[out]) as run:
        before = run.events[0].uri
        assert before == ray_uri(tree)
        atomic_write_text(out, f"working_dir: {before}\n")
        (tree / "main.py").write_text("after\n")
        ev = run.next_event(1)
        assert ev.modified == ("main.py",)
        assert ev.added == ()
        out.unlink()
        assert ev.uri == ray_uri(tree)


def test_close_removes_its_work_dir(tree: Path, tmp_path: Path) -> None:
    from rtenv_cli.core.transport.file_target import FileTarget
    from rtenv_cli.core.watch.session import WatchSession

    session = WatchSession(tree, FileTarget((tmp_path / "shared").as_uri()))
    work = session.work_dir
    session.initial_push()
    assert session.sources[0].last_zip is not None
    session.close()
    assert not work.exists()
    session.close()  # twice: the CLI's Ctrl-C path closes again
