"""WatchLoop's timing with real watchdog events on a real tree."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from rtenv_cli.core.watch.loop import STORM_EVENTS, WatchLoop


class Recorder:
    """The loop's handler: records each batch's trigger and when it came."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.calls: list[tuple[str, int, float]] = []

    def roots(self) -> list[Path]:
        return [self.root]

    def wants(self, path: str) -> bool:
        return True

    def wants_dir(self, path: str) -> bool:
        return True

    def prepare(self, paths: set[str]) -> None:
        pass

    def handle_batch(self, paths: set[str], trigger: str = "change") -> object | None:
        self.calls.append((trigger, len(paths), time.monotonic()))
        return None  # nothing "pushed": the loop keeps running

    def repin(self) -> bool:
        return False

    def recheck_path(self) -> bool:
        return False


def _run(tmp_path: Path, writes: int, wait_s: float) -> Recorder:
    tree = tmp_path / "tree"
    tree.mkdir()
    handler = Recorder(tree)
    loop = WatchLoop(handler, quiet_s=0.1, max_wait_s=1.0, reconcile_s=60.0, pin_s=300.0,
                     polling=None, poll_interval_s=1.0, observer_factory=None,
                     on_notice=lambda *a: None)
    loop.start()
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        for i in range(writes):
            (tree / f"f{i % 300}.py").write_text(f"V = {i}\n")
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and not any(c[0] == "reconcile"
                                                      for c in handler.calls):
            time.sleep(0.05)
        time.sleep(0.3)
    finally:
        loop.stop()
        thread.join(timeout=10)
        loop.close()
    return handler


def test_a_storm_of_events_is_followed_by_a_reconcile_scan_at_once(tmp_path: Path) -> None:
    """inotify drops events when its queue overflows (watchdog says so only in a log line), and
    the dropped ones may be the last edits: after a storm the tree is re-checked within seconds,
    not at the next periodic reconcile a minute later."""
    handler = _run(tmp_path, writes=STORM_EVENTS * 2, wait_s=8)
    triggers = [c[0] for c in handler.calls]
    assert "change" in triggers
    assert "reconcile" in triggers, triggers
    last_change = max(c[2] for c in handler.calls if c[0] == "change")
    first_reconcile = min(c[2] for c in handler.calls if c[0] == "reconcile")
    assert first_reconcile - last_change < 3


def test_an_ordinary_save_brings_no_extra_scan(tmp_path: Path) -> None:
    handler = _run(tmp_path, writes=3, wait_s=2.5)  # past STORM_RECONCILE_S
    triggers = [c[0] for c in handler.calls]
    assert triggers
    assert set(triggers) == {"change"}
