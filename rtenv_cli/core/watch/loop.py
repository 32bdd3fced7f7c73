"""The timing of a watch: file events (from watchdog's threads) into a Debouncer, each batch
to the session when its quiet period ends (and the paths so far while it gathers), a reconcile
scan every `reconcile_s` to catch missed events, and a re-pin every `pin_s`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from rtenv_cli.core.errors import RtenvError
from rtenv_cli.core.watch.debounce import Debouncer
from rtenv_cli.core.watch.events import Watcher, WatchNotice

# A batch of this many events is a storm (`git checkout`, a build, an unpacked archive): the
# kernel's inotify queue (fs.inotify.max_queued_events, 16,384 by default) may have overflowed
# while it came, and the events lost then include the last edits. watchdog drops them without
# telling its handlers, so a storm's batch is followed by a reconcile scan (a stat walk that
# rehashes only what changed) STORM_RECONCILE_S after it is pushed, not at the next `reconcile_s`.
STORM_EVENTS = 1000
STORM_RECONCILE_S = 1.0


class BatchHandler(Protocol):
    """What the loop drives (the session)."""

    def roots(self) -> list[Path]:
        """The trees and files to watch."""
        ...

    def wants(self, path: str) -> bool:
        """Whether a change of `path` is a trigger."""
        ...

    def prepare(self, paths: set[str]) -> None:
        """Work ahead on the paths of a batch still gathering."""
        ...

    def handle_batch(self, paths: set[str], trigger: str = "change") -> object | None:
        """Push what the batch changed; None when nothing was pushed."""
        ...

    def repin(self) -> None: ...


class WatchLoop:
    def __init__(self, handler: BatchHandler, *, quiet_s: float, max_wait_s: float,
                 reconcile_s: float, pin_s: float, polling: bool | None,
                 poll_interval_s: float, observer_factory: Callable[[], Any] | None,
                 on_notice: Callable[[str, str, str | None], None]) -> None:
        self.handler = handler
        self.debouncer = Debouncer(quiet_s, max_wait_s)
        self.reconcile_s, self.pin_s = reconcile_s, pin_s
        self.polling, self.poll_interval_s = polling, poll_interval_s
        self.observer_factory = observer_factory
        self.on_notice = on_notice
        self.watcher: Watcher | None = None
        self.stop_event = threading.Event()

    def start(self) -> None:
        self.watcher = Watcher(self.handler.roots(), self._on_path, polling=self.polling,
                               poll_interval_s=self.poll_interval_s,
                               observer_factory=self.observer_factory,
                               on_notice=self._notice)
        self.watcher.start()

    def restart(self) -> None:
        """Watch the handler's roots as they are now (the runtime_env changed them)."""
        if self.watcher is None:
            return
        self.watcher.stop()
        self.start()

    def _on_path(self, path: str) -> None:
        if self.handler.wants(path):
            self.debouncer.add(path)

    def _notice(self, notice: WatchNotice) -> None:
        self.on_notice("warning", notice.message, notice.hint)

    def run(self, *, max_pushes: int | None = None) -> None:
        """Block, pushing on changes, until `stop()` (or `max_pushes` pushes)."""
        if self.watcher is None:
            self.start()
        next_reconcile = time.monotonic() + self.reconcile_s
        next_pin = time.monotonic() + self.pin_s
        pushes = 0
        while not self.stop_event.is_set():
            now = time.monotonic()
            timeout = max(0.0, min(next_reconcile, next_pin) - now)
            batch = self.debouncer.wait_batch(timeout=min(timeout, 1.0),
                                              early=self.handler.prepare)
            if self.stop_event.is_set() or self.debouncer.closed:
                break
            try:
                if batch and self.handler.handle_batch(batch) is not None:
                    pushes += 1
                now = time.monotonic()
                if batch and self.debouncer.last_batch_events >= STORM_EVENTS:
                    next_reconcile = min(next_reconcile, now + STORM_RECONCILE_S)
                if now >= next_reconcile:
                    next_reconcile = now + self.reconcile_s
                    if self.handler.handle_batch(set(), trigger="reconcile") is not None:
                        pushes += 1
                if now >= next_pin:
                    next_pin = now + self.pin_s
                    self.handler.repin()
            except RtenvError as exc:
                self.on_notice("error", f"{exc}; still watching", exc.hint)
            if max_pushes is not None and pushes >= max_pushes:
                break

    def stop(self) -> None:
        self.stop_event.set()
        self.debouncer.close()

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
            self.watcher = None
