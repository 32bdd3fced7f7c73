"""Shared helpers for watch tests: a session on a thread, waiting with deadlines."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rtenv_cli.core.watch.session import PushEvent, WatchSession
from tests.support.wait import TIMEOUT, described, until


class Clock:
    """A fake clock for the debouncer and the watch loop: tests move `now` by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def wait_for(pred: Callable[[], Any], timeout: float = TIMEOUT, interval: float = 0.02) -> Any:
    """`tests.support.wait.until` with the watch's poll interval; a failure quotes PRED."""
    return until(pred, what=lambda: described(pred), timeout=timeout, interval=interval)


class Running:
    """A WatchSession running `run()` on a thread; collects events and notices."""

    def __init__(self, path: Path, target: Any, **kw: Any) -> None:
        self.events: list[PushEvent] = []
        self.notices: list[tuple[str, str, str | None]] = []
        kw.setdefault("quiet_s", 0.1)
        kw.setdefault("max_wait_s", 1.0)
        self.session = WatchSession(path, target, on_push=self.events.append,
                                    on_notice=lambda k, m, h: self.notices.append((k, m, h)),
                                    **kw)
        self.thread = threading.Thread(target=self.session.run, daemon=True)

    def __enter__(self) -> Running:
        self.session.start()
        self.session.initial_push()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.session.stop()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()

    def next_event(self, after: int, timeout: float = 10.0) -> PushEvent:
        wait_for(lambda: len(self.events) > after, timeout)
        return self.events[after]

    def quiet(self, seconds: float) -> None:
        """Let the watcher settle: wait until no event is pending for `seconds`."""
        time.sleep(seconds)  # a bounded settle window used only to assert that nothing happens
