"""fsutil's file locks: flock(2) waited for without end, not at all, or a bounded while; a lock
file taken by path (filelock's where there is no flock)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rtenv_cli.core import fsutil
from rtenv_cli.core.fsutil import LockFile, flock, unflock
from tests.support.wait import until

pytestmark = pytest.mark.skipif(not fsutil.HAVE_FLOCK, reason="flock(2) is POSIX's")

_HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()  # until told to let go
os.close(fd)
print("free", flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding `tmp_path/x.lock`: a line on its stdin lets go."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path / "x.lock")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=30)


def _let_go(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "free"


def _sleeps(monkeypatch: pytest.MonkeyPatch,
            each: Callable[[], None] | None = None) -> list[float]:
    """The sleeps of fsutil's polls, recorded (and `each` called at each) instead of slept."""
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if each is not None:
            each()

    monkeypatch.setattr(fsutil, "time", types.SimpleNamespace(monotonic=time.monotonic,
                                                              sleep=sleep))
    return slept


def _waiters(path: Path) -> int:
    """How many flock(2) calls wait in the kernel for PATH's lock (/proc/locks marks them
    `->`)."""
    inode = f":{path.stat().st_ino}"
    return sum(1 for line in Path("/proc/locks").read_text().splitlines()
               if "->" in line.split() and line.split()[-3].endswith(inode))


def test_a_bounded_wait_gives_up_with_a_timeout_naming_the_file(
        tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    path = tmp_path / "x.lock"
    with pytest.raises(TimeoutError, match=f"{path} is held by another process") as exc:
        LockFile(path, 0.05).acquire()
    assert isinstance(exc.value, OSError)  # what the digest cache's store gives up on
    _let_go(holder)
    with LockFile(path, 0.05):  # free now: had at once
        pass


def test_a_bounded_wait_polls_until_the_holder_lets_go(
        tmp_path: Path, holder: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch) -> None:
    slept = _sleeps(monkeypatch, each=lambda: _let_go(holder))  # let go at the first retry
    with LockFile(tmp_path / "x.lock", 3600):
        assert slept == [fsutil._LOCK_POLL_S]


def test_no_wait_returns_at_once_without_polling(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.lock"
    slept = _sleeps(monkeypatch)
    other = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # another open file description
    try:
        assert flock(other, 0)
        with pytest.raises(TimeoutError, match="held by another process"):
            LockFile(path, 0).acquire()
        mine = os.open(path, os.O_RDWR)
        try:
            assert flock(mine, 0) is False
            unflock(other)
            assert flock(mine, 0) is True
        finally:
            os.close(mine)
    finally:
        os.close(other)
    assert slept == []



def test_shared_holders_coexist_and_keep_an_exclusive_out(tmp_path: Path) -> None:
    """The store's owners.lock: every open store holds it shared; one alone gets it
    exclusively (recovery), and converts to shared."""
    path = tmp_path / "owners.lock"
    fds = [os.open(path, os.O_RDWR | os.O_CREAT, 0o600) for _ in range(3)]
    try:
        assert flock(fds[0], 0)  # alone: exclusive
        assert flock(fds[1], 0, shared=True) is False
        assert flock(fds[0], 0, shared=True)  # converted
        assert flock(fds[1], 0, shared=True)
        assert flock(fds[2], 0) is False  # not alone now
        unflock(fds[0])
        unflock(fds[1])
        assert flock(fds[2], 0)
    finally:
        for fd in fds:
            os.close(fd)

def test_no_time_limit_waits_in_the_kernel_not_by_polling(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a limit the waiter sleeps in flock(2) itself, so the holder's release wakes it
    (what the store's index writers queue on)."""
    path = tmp_path / "x.lock"
    slept = _sleeps(monkeypatch)
    fds = [os.open(path, os.O_RDWR | os.O_CREAT, 0o600) for _ in range(2)]
    try:
        assert flock(fds[0])
        got: list[bool] = []
        waiter = threading.Thread(target=lambda: got.append(flock(fds[1])))
        waiter.start()
        until(lambda: _waiters(path), what="the waiter blocked in flock(2)")
        unflock(fds[0])
        waiter.join(timeout=30)
        assert got == [True]
    finally:
        for fd in fds:
            os.close(fd)
    assert slept == []


def test_a_lock_file_with_remove_exists_only_while_held(tmp_path: Path) -> None:
    path = tmp_path / "k.lock"
    with LockFile(path, remove=True):
        assert path.exists()
    assert not path.exists()
    with LockFile(path, mode=0o644):
        pass
    assert path.exists()  # kept without `remove`
    assert path.stat().st_mode & 0o777 == 0o644


def test_a_lock_won_on_a_removed_file_is_taken_again_on_the_current_one(tmp_path: Path) -> None:
    """The first holder removes the name as it lets go; the waiter, queued on the old file,
    must not count that as holding the lock: a third comer would take the fresh file."""
    path = tmp_path / "k.lock"
    first = LockFile(path, remove=True)
    first.acquire()
    second = LockFile(path, remove=True)
    waiter = threading.Thread(target=second.acquire)
    waiter.start()
    until(lambda: _waiters(path), what="the second waiting on the first's file")
    first.release()
    waiter.join(timeout=30)
    try:
        assert path.exists()  # the second made the file again, and holds it
        with pytest.raises(TimeoutError):
            LockFile(path, 0).acquire()
    finally:
        second.release()
    assert not path.exists()


def test_without_flock_it_is_filelocks_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import filelock

    monkeypatch.setattr(fsutil, "fcntl", None)  # as off POSIX
    path = tmp_path / "x.lock"
    with LockFile(path, 0), pytest.raises(filelock.Timeout):  # a TimeoutError, as flock's
        LockFile(path, 0).acquire()


def test_filelock_is_imported_only_where_there_is_no_flock(tmp_path: Path) -> None:
    code = ("import sys\nfrom pathlib import Path\n"
            "from rtenv_cli.core.fsutil import LockFile\n"
            "from rtenv_cli.core.store.locks import KeyLocks\n"
            f"root = Path({str(tmp_path)!r})\n"
            "with LockFile(root / 'a.lock', 0):\n    pass\n"
            "with KeyLocks(root).lock('k', blocking=False) as got:\n    assert got\n"
            "print('filelock' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "False"
