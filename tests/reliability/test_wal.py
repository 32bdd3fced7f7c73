"""The index's WAL stays bounded under a burst of cache hits, and is given back at start-up."""

from __future__ import annotations

import threading
import zipfile
from pathlib import Path

import pytest

from rtenv_cli.core.store.envs import Environments
from rtenv_cli.core.store.index import WAL_LIMIT
from rtenv_cli.core.store.store import Store
from tests.support.wait import until


def _env(tmp_path: Path) -> dict[str, str]:
    archive = tmp_path / "w.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("a.py", "A = 1\n")
    return {"working_dir": f"file://{archive}"}


@pytest.mark.slow
def test_wal_stays_bounded_through_20000_hits_and_is_truncated_on_start(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = Store(root)
    envs = Environments(store)
    spec = _env(tmp_path)
    envs.get_or_create(spec, holder="seed")
    index = store.index
    index.checkpoint_in_background(0.2)  # what the agent runs
    stop = threading.Event()

    def reader() -> None:  # the agent's other requests: readers come and go all the time
        while not stop.is_set():
            index.conn().execute("SELECT COUNT(*) FROM refs").fetchone()

    readers = [threading.Thread(target=reader, daemon=True) for _ in range(2)]
    for t in readers:
        t.start()
    largest = 0
    try:
        for i in range(20_000):  # each hit a new holder: one commit and new reference rows
            [hit] = envs.try_hits([{"runtime_env": spec, "holder": f"job{i}", "pid": None,
                                    "lease_s": 3600.0}])
            assert hit is not None
            if i % 100 == 0:
                largest = max(largest, index.wal_bytes())
    finally:
        stop.set()
        for t in readers:
            t.join(timeout=30)
    # truncated once past the limit; what grows between two rounds of the thread is far less
    assert largest < 2 * WAL_LIMIT, largest / 2**20
    index.close()
    store.close()
    reopened = Store(root)  # a restart alone truncates what is left
    assert reopened.index.wal_bytes() == 0


def test_ended_references_are_deleted_in_the_background(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    envs = Environments(store)
    spec = _env(tmp_path)
    for i in range(50):
        envs.get_or_create(spec, holder=f"lease{i}", lease_s=0.05)
    store.index.checkpoint_in_background(0.05, prune_every_s=0.1)
    db = store.index.conn()
    until(lambda: db.execute("SELECT COUNT(*) FROM refs").fetchone()[0] == 0,
          what="the background checkpoint to delete the ended references")
    store.close()


def test_closing_the_store_ends_its_upkeep_thread(tmp_path: Path) -> None:
    """Left running after close, its checkpoint kept the next open from truncating the WAL
    (a CI run: 94 MB left) and its next round met the closed lock descriptor."""
    store = Store(tmp_path / "store")
    before = set(threading.enumerate())
    store.index.checkpoint_in_background(0.05)
    [upkeep] = [t for t in threading.enumerate() if t not in before]
    assert upkeep.name == "rtenv-wal-checkpoint"
    store.close()
    assert not upkeep.is_alive()
