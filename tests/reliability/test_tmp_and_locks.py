"""Leftovers of killed processes: upload spool files in tmp/, lock files in locks/."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rtenv_cli.core.store.store import Store


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    return proc.pid


def _leave_leftovers(root: Path) -> list[Path]:
    tmp = root / "tmp"
    dead = _dead_pid()
    spool = tmp / f"upload.{dead}.k2j3h4"  # a PUT's body, its agent SIGKILLed mid-upload
    spool.write_bytes(b"x" * 100_000)
    stray = tmp / "stray-file"  # no pid in its name
    stray.write_bytes(b"y")
    stray_dir = tmp / "stray-dir"
    (stray_dir / "sub").mkdir(parents=True)
    (stray_dir / "sub" / "f").write_bytes(b"z")
    link = tmp / "dangling"
    link.symlink_to(tmp / "nowhere")
    return [spool, stray, stray_dir, link]


def test_restart_alone_clears_every_stray_file_in_tmp(tmp_path: Path) -> None:
    root = tmp_path / "store"
    Store(root)  # made, then closed as it goes
    _leave_leftovers(root)
    Store(root)  # a restart: no other process has the store open
    assert list((root / "tmp").iterdir()) == []


def test_with_the_store_open_elsewhere_only_dead_pids_leftovers_go(tmp_path: Path) -> None:
    root = tmp_path / "store"
    Store(root)  # made, then closed as it goes
    spool, stray, stray_dir, link = _leave_leftovers(root)
    live = root / "tmp" / f"upload.{os.getpid()}.aaaa"  # an upload in flight in a live agent
    live.write_bytes(b"in flight")
    holder = subprocess.Popen(  # another process (an agent) holds the store open
        [sys.executable, "-c", "import sys; from pathlib import Path\n"
         "from rtenv_cli.core.store.store import Store\n"
         "s = Store(Path(sys.argv[1]), recover=False); print('open', flush=True)\n"
         "sys.stdin.read()", str(root)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "open"
        Store(root)
        assert not spool.exists()  # its agent is dead
        assert live.exists()  # this one's agent is alive
        assert stray.exists()  # no pid: not ours to judge
        assert stray_dir.exists()
        assert link.is_symlink()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


def _lock_files(store: Store) -> list[str]:
    return sorted(p.name for p in (store.root / "locks").iterdir())


def test_lock_files_exist_only_while_held(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    for i in range(20):
        store.get_or_build(f"uv:{i}", kind="uv", uri="u", label="l",
                           build=lambda t: (t / "f").write_text("x"))
        with store.lock(f"uv:{i}"):
            assert _lock_files(store) == [f"uv_{i}.lock"]
    assert _lock_files(store) == []
    for i in range(20):
        assert store.remove(f"uv:{i}")
    assert _lock_files(store) == []


def test_keys_that_never_became_entries_leave_no_lock_file(tmp_path: Path) -> None:
    """A check of a package that is not there, a build that failed: no entry, no lock file."""
    store = Store(tmp_path / "store")
    assert not store.hold_package("_ray_pkg_0123456789abcdef.zip")

    def fail(_tree: Path) -> None:
        raise RuntimeError("the build failed")

    with pytest.raises(RuntimeError):
        store.get_or_build("uv:broken", kind="uv", uri="u", label="l", build=fail)
    assert store.index.all() == []
    assert _lock_files(store) == []


def test_many_purges_racing_runs_leave_no_orphan_lock_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The red team's 117 purges left 41 lock files beside 0 entries: purges racing `rtenv
    run`s (with no upload pin, so the purges take packages between push and create, and some
    creates fail), then a last purge. No entry is left, and no lock file."""
    from rtenv_cli.core.cache.backends import LocalBackend
    from rtenv_cli.core.errors import RtenvError
    from rtenv_cli.core.run import publish_local
    from rtenv_cli.core.store.envs import Environments
    from rtenv_cli.core.store.store import PIN_ENV_VAR
    from rtenv_cli.core.transport.local_store import LocalStoreTarget
    from tests.reliability.test_gc_race import _PurgeLoop

    monkeypatch.setenv(PIN_ENV_VAR, "0")
    target = LocalStoreTarget(tmp_path / "store")
    envs = Environments(target.store)
    with _PurgeLoop(target.store.root) as purge:
        for i in range(30):
            src = tmp_path / f"src{i % 10}"
            src.mkdir(exist_ok=True)
            (src / "main.py").write_text(f"ROUND = {i % 10}\n")
            try:
                runtime_env = publish_local({"working_dir": src.name}, tmp_path, target)
                handle = envs.get_or_create(runtime_env, holder=f"run:{i}", pid=os.getpid())
            except RtenvError:  # a purge took the package first: expected without a pin
                continue
            envs.release(handle.key, f"run:{i}")
    assert purge.errors == []
    assert purge.rounds > 30
    LocalBackend(target.store.root).gc(dry_run=False, purge=True)
    assert target.store.index.all() == []
    assert _lock_files(target.store) == []


def test_a_removed_lock_file_still_excludes(tmp_path: Path) -> None:
    """A waiter on a lock file removed with its entry takes the lock on the fresh file, so two
    holders of one key never overlap."""
    store = Store(tmp_path / "store")
    other = Store(tmp_path / "store", recover=False)  # another process's view: its own flocks
    inside: list[str] = []
    overlap: list[str] = []
    store.get_or_build("uv:k", kind="uv", uri="u", label="l",
                       build=lambda t: (t / "f").write_text("x"))

    def hold(s: Store, name: str) -> None:
        for _ in range(200):
            with s.lock("uv:k"):
                if inside:
                    overlap.append(name)
                inside.append(name)
                inside.pop()
                s.layout.locks.path("uv:k").unlink(missing_ok=True)  # remove()'s last step

    threads = [threading.Thread(target=hold, args=(s, n))
               for s, n in ((store, "a"), (other, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert overlap == []


def test_acquirers_and_removers_never_overlap(tmp_path: Path) -> None:
    """Blocking acquirers in two views of the store (each its own flocks, as two processes)
    and a remover (`Store.remove`'s non-blocking try), each unlinking the lock file as it lets
    go: one holder at a time, always, and no lock file once all are done."""
    store = Store(tmp_path / "store")
    other = Store(tmp_path / "store", recover=False)
    inside: list[str] = []
    overlap: list[str] = []
    held = {"a": 0, "b": 0, "remove": 0}

    def enter(name: str) -> None:
        if inside:
            overlap.append(name)
        inside.append(name)
        held[name] += 1
        inside.pop()

    def hold(s: Store, name: str) -> None:
        for _ in range(300):
            with s.lock("uv:k"):
                enter(name)

    def remove() -> None:
        for _ in range(300):
            with other.lock("uv:k", blocking=False) as got:
                if got:
                    enter("remove")

    threads = [threading.Thread(target=hold, args=(store, "a")),
               threading.Thread(target=hold, args=(other, "b")),
               threading.Thread(target=remove)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert overlap == []
    assert (held["a"], held["b"]) == (300, 300)
    assert _lock_files(store) == []


def test_environments_go_with_their_entries(tmp_path: Path) -> None:
    import zipfile

    from rtenv_cli.core.cache.backends import LocalBackend
    from rtenv_cli.core.store.envs import Environments

    store = Store(tmp_path / "store")
    envs = Environments(store)
    for i in range(5):
        archive = tmp_path / f"w{i}.zip"
        with zipfile.ZipFile(archive, "w") as zf:
            zf.writestr("a.py", f"A = {i}\n")
        handle = envs.get_or_create({"working_dir": f"file://{archive}",
                                     "env_vars": {"N": str(i)}}, holder="h")
        envs.release(handle.key, "h")
    held = envs.get_or_create({"working_dir": f"file://{archive}"}, holder="keep")
    assert len(envs.list_envs()) == 6
    LocalBackend(store.root).gc(dry_run=False, purge=True)
    # the held environment's entry stays, and so do the environments made of it
    assert {e["key"] for e in envs.list_envs()} >= {held.key}
    assert all(e["entries"] == list(held.entries) for e in envs.list_envs())
