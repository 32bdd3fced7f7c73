"""The debouncer's decisions on a fake clock (no sleeps), and its blocking loop."""

from __future__ import annotations

import threading

from rtenv_cli.core.watch.debounce import BURST_PATHS, Debouncer
from tests.core.watch.helpers import Clock


def _debouncer(**kw: float) -> tuple[Debouncer, Clock]:
    clock = Clock()
    kw.setdefault("quiet_s", 0.2)
    kw.setdefault("max_wait_s", 2.0)
    return Debouncer(clock=clock, **kw), clock  # type: ignore[arg-type]


def test_a_closed_write_is_ready_after_the_settle_time_not_the_quiet_period() -> None:
    d, clock = _debouncer(settle_s=0.01)
    d.add("a.py", complete=False)  # modify
    d.add("a.py", complete=True)  # close after write
    assert d.ready_at() == clock.now + 0.01
    assert d.take() is None
    clock.now += 0.01
    assert d.take() == {"a.py"}
    assert d.take() is None


def test_a_write_still_open_waits_for_the_quiet_period_until_it_is_closed() -> None:
    d, clock = _debouncer()
    d.add("a.py", complete=False)
    assert d.ready_at() == clock.now + 0.2
    clock.now += 0.1
    assert d.take() is None
    d.add("b.py", complete=True)  # another file saved: a.py is still being written
    assert d.ready_at() == clock.now + 0.2
    clock.now += 0.05
    d.add("a.py", complete=True)  # its close
    assert d.ready_at() == clock.now + 0.01
    clock.now += 0.01
    assert d.take() == {"a.py", "b.py"}


def test_a_rename_into_place_is_complete() -> None:
    d, clock = _debouncer()
    d.add("main.py", complete=True)  # moved over the old file by an editor
    clock.now += d.settle_s
    assert d.take() == {"main.py"}


def test_many_paths_are_a_burst_and_wait_for_quiet() -> None:
    d, clock = _debouncer()
    for i in range(BURST_PATHS + 1):
        d.add(f"f{i}.py", complete=True)
    assert d.ready_at() == clock.now + 0.2
    clock.now += 0.2
    assert len(d.take() or ()) == BURST_PATHS + 1


def test_the_batch_right_after_a_burst_is_a_burst_too() -> None:
    """A build writing many files: the batch after a burst, within the quiet period, is the
    rest of the same stream and waits for quiet too (not one push per file); a save after
    an ordinary one, however soon, is published at once."""
    d, clock = _debouncer()
    d.add("main.py", complete=True)
    clock.now += d.settle_s
    assert d.take() == {"main.py"}
    d.add("main.py", complete=True)  # saved again at once: not a burst
    assert d.ready_at() == clock.now + d.settle_s
    clock.now += d.settle_s
    assert d.take() == {"main.py"}
    for i in range(BURST_PATHS + 1):
        d.add(f"out/{i}.py", complete=True)
    clock.now += 0.2
    assert len(d.take() or ()) == BURST_PATHS + 1
    clock.now += 0.05  # the next file of the build closes
    d.add("out/last.py", complete=True)
    assert d.ready_at() == clock.now + 0.2
    clock.now += 0.2
    assert d.take() == {"out/last.py"}
    clock.now += 0.25  # quiet for longer than the quiet period: a save is at once again
    d.add("main.py", complete=True)
    assert d.ready_at() == clock.now + d.settle_s


def test_the_cap_releases_a_steady_stream() -> None:
    d, clock = _debouncer(quiet_s=0.2, max_wait_s=0.5)
    start = clock.now
    for i in range(100):
        d.add(f"f{i}", complete=False)
        if d.take() is not None:
            break
        clock.now += 0.01
    else:
        raise AssertionError("never released")
    assert clock.now - start >= 0.5
    assert clock.now - start < 0.5 + 0.011


def test_close_wakes_waiter() -> None:
    d = Debouncer()
    t = threading.Thread(target=d.close)
    t.start()
    assert d.wait_batch() is None
    t.join()


def test_wait_batch_returns_a_ready_batch() -> None:
    d, clock = _debouncer()
    d.add("a", complete=True)
    clock.now += 1
    assert d.wait_batch(timeout=5) == {"a"}
    assert d.wait_batch(timeout=0) is None


def test_early_work_runs_while_a_batch_gathers() -> None:
    d, clock = _debouncer(quiet_s=0.3, max_wait_s=5)
    calls: list[set[str]] = []

    def early(paths: set[str]) -> None:
        calls.append(paths)
        if len(calls) == 1:
            d.add("a")  # an event while the early work runs (the lock is not held): again
        elif len(calls) == 2:
            d.add("b")
        else:
            clock.now += 1  # nothing more: the quiet period ends
        clock.now += 0.03  # the work took time

    d.add("a")
    d.add("a")  # a save's several events: one early call once they pause
    clock.now += 0.03
    batch = d.wait_batch(timeout=5, early=early)
    assert batch == {"a", "b"}
    assert calls == [{"a"}, {"a"}, {"a", "b"}]  # each time only because events came in
    d.add("c")
    clock.now += 0.03

    def last(paths: set[str]) -> None:
        calls.append(paths)
        clock.now += 1

    assert d.wait_batch(timeout=5, early=last) == {"c"}
    assert calls[-1] == {"c"}  # a new batch starts afresh
