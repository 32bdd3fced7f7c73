"""WatchLoop's timing: its decisions on an injected clock (no sleeps, no wall-clock bounds), and
a storm of real watchdog events on a real tree."""

from __future__ import annotations

import threading
from pathlib import Path

from rtenv_cli.core.watch.loop import STORM_EVENTS, STORM_RECONCILE_S, WatchLoop
from tests.core.watch.helpers import Clock
from tests.support.wait import until


class Recorder:
    """The loop's handler: records each batch's trigger and when it came (the loop's clock)."""

    def __init__(self, root: Path, clock: Clock | None = None) -> None:
        self.root = root
        self.clock = clock
        self.calls: list[tuple[str, int, float | None]] = []

    def roots(self) -> list[Path]:
        return [self.root]

    def wants(self, path: str) -> bool:
        return True

    def wants_dir(self, path: str) -> bool:
        return True

    def prepare(self, paths: set[str]) -> None:
        pass

    def handle_batch(self, paths: set[str], trigger: str = "change") -> object | None:
        self.calls.append((trigger, len(paths), self.clock() if self.clock else None))
        return None  # nothing "pushed": the loop keeps running

    def repin(self) -> bool:
        return False

    def recheck_path(self) -> bool:
        return False

    def triggers(self) -> list[str]:
        return [c[0] for c in self.calls]


def _loop(handler: Recorder, clock: Clock | None = None) -> WatchLoop:
    kw = {"clock": clock} if clock is not None else {}
    return WatchLoop(handler, quiet_s=0.1, max_wait_s=1.0, reconcile_s=60.0, pin_s=300.0,
                     polling=None, poll_interval_s=1.0, observer_factory=None,
                     on_notice=lambda *a: None, **kw)  # type: ignore[arg-type]


def _turns(loop: WatchLoop, clock: Clock, events: int) -> None:
    """`events` edits of distinct paths, their batch once the quiet period has passed on the
    clock, and the loop's turn for it."""
    loop._next_reconcile, loop._next_pin = clock.now + loop.reconcile_s, clock.now + loop.pin_s
    for i in range(events):
        loop.debouncer.add(f"f{i}.py", complete=False)
    clock.now += 1.0  # past quiet_s and max_wait_s
    batch = loop.debouncer.take()
    assert batch is not None
    assert len(batch) == events
    loop._turn(batch)


def test_a_storm_of_events_is_followed_by_a_reconcile_scan_soon(tmp_path: Path) -> None:
    """inotify drops events when its queue overflows (watchdog says so only in a log line), and
    the dropped ones may be the last edits: after a storm the tree is re-checked
    STORM_RECONCILE_S after its batch, not at the next periodic reconcile a minute later."""
    clock = Clock()
    handler = Recorder(tmp_path, clock)
    loop = _loop(handler, clock)
    _turns(loop, clock, STORM_EVENTS)
    assert handler.triggers() == ["change"]
    clock.now += STORM_RECONCILE_S / 2
    loop._turn(None)
    assert handler.triggers() == ["change"]  # not yet
    clock.now += STORM_RECONCILE_S / 2
    loop._turn(None)
    assert handler.triggers() == ["change", "reconcile"]
    clock.now += 30.0  # the next one at the periodic interval again, not at once
    loop._turn(None)
    assert handler.triggers() == ["change", "reconcile"]


def test_an_ordinary_save_brings_no_extra_scan(tmp_path: Path) -> None:
    clock = Clock()
    handler = Recorder(tmp_path, clock)
    loop = _loop(handler, clock)
    _turns(loop, clock, 3)
    clock.now += STORM_RECONCILE_S * 10  # well past when a storm's scan would have come
    loop._turn(None)
    assert handler.triggers() == ["change"]
    clock.now += loop.reconcile_s  # the periodic reconcile still comes
    loop._turn(None)
    assert handler.triggers() == ["change", "reconcile"]


def test_a_storm_of_real_events_ends_in_a_reconcile(tmp_path: Path) -> None:
    """The same through the real watcher and the real clock: the writes reach the loop as
    change batches, and a reconcile scan follows them (the timing is the test above's)."""
    tree = tmp_path / "tree"
    tree.mkdir()
    handler = Recorder(tree)
    loop = _loop(handler)
    loop.start()
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        for i in range(STORM_EVENTS * 2):
            (tree / f"f{i % 300}.py").write_text(f"V = {i}\n")
        until(lambda: "reconcile" in handler.triggers(),
              what=lambda: f"a reconcile after the storm (triggers: {handler.triggers()})")
        assert handler.triggers()[0] == "change"
    finally:
        loop.stop()
        thread.join(timeout=10)
        loop.close()
