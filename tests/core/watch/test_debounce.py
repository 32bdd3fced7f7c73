from __future__ import annotations

import threading
import time

from rtenv_cli.core.watch.debounce import Debouncer


def test_quiet_period_coalesces() -> None:
    d = Debouncer(quiet_s=0.05, max_wait_s=5)
    for i in range(100):
        d.add(f"p{i}")
    start = time.monotonic()
    batch = d.wait_batch(timeout=5)
    assert batch == {f"p{i}" for i in range(100)}
    assert time.monotonic() - start < 1
    assert d.wait_batch(timeout=0.01) is None


def test_cap_releases_a_steady_stream() -> None:
    d = Debouncer(quiet_s=0.2, max_wait_s=0.3)
    stop = threading.Event()

    def feed() -> None:
        i = 0
        while not stop.is_set():
            d.add(f"f{i}")
            i += 1
            time.sleep(0.01)

    t = threading.Thread(target=feed)
    t.start()
    try:
        start = time.monotonic()
        batch = d.wait_batch(timeout=5)
        elapsed = time.monotonic() - start
    finally:
        stop.set()
        t.join()
    assert batch
    assert elapsed < 1.0  # released by the cap although events never went quiet


def test_close_wakes_waiter() -> None:
    d = Debouncer()
    t = threading.Timer(0.05, d.close)
    t.start()
    assert d.wait_batch(timeout=5) is None
    t.join()


def test_early_work_runs_while_a_batch_gathers() -> None:
    d = Debouncer(quiet_s=0.3, max_wait_s=5)
    calls: list[set[str]] = []

    def early(paths: set[str]) -> None:
        calls.append(paths)
        if len(calls) == 1:
            d.add("a")  # an event while the early work runs (the lock is not held): again
        if len(calls) == 2:
            d.add("b")

    d.add("a")
    d.add("a")  # a save's several events: one early call once they pause
    batch = d.wait_batch(timeout=5, early=early)
    assert batch == {"a", "b"}
    assert calls == [{"a"}, {"a"}, {"a", "b"}]  # each time only because events came in
    d.add("c")
    assert d.wait_batch(timeout=5, early=calls.append) == {"c"}
    assert calls[-1] == {"c"}  # a new batch starts afresh
