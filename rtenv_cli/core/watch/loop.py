"""The timing of a watch: file events (from the watcher's threads) into a Debouncer, each batch
to the session when it is ready (and the paths so far while it gathers), a reconcile scan every
`reconcile_s` to catch missed events (at once after an inotify queue overflow or a storm), and a
re-pin every `pin_s`. The clock is injected (`clock`), as the debouncer's."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from rtenv_cli.core.errors import PackageTooLargeError, RtenvError, TransportError
from rtenv_cli.core.watch.debounce import Debouncer
from rtenv_cli.core.watch.events import Watcher, WatchNotice

# A batch of this many events is a storm (`git checkout`, a build, an unpacked archive): the
# kernel's inotify queue (fs.inotify.max_queued_events, 16,384 by default) may have overflowed
# while it came, and the events lost then include the last edits. watchdog drops them without
# telling its handlers, so a storm's batch is followed by a reconcile scan (a stat walk that
# rehashes only what changed) STORM_RECONCILE_S after it is pushed, not at the next `reconcile_s`.
# rtenv's own inotify watcher (Linux) hears of an overflow (IN_Q_OVERFLOW): the scan then follows
# the batch at once, and the watches are looked for again (directories created meanwhile).
STORM_EVENTS = 1000
STORM_RECONCILE_S = 1.0

# A push that failed because the target did not answer (stopped, restarting, unreachable) is
# tried again after RETRY_FIRST_S, then at doubling intervals up to RETRY_MAX_S, until the target
# answers: the changes are published within RETRY_MAX_S of its return, not at the next
# reconcile. The session reports them counted since its last successful push.
RETRY_FIRST_S = 0.25
RETRY_MAX_S = 5.0


class _Retry:
    """When to try a failed push again (never, until one fails)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.at = float("inf")
        self.backoff = RETRY_FIRST_S

    def failed(self) -> bool:
        """Schedule the next try; True for the first failure since the last success."""
        first = self.at == float("inf")
        self.at = self.clock() + self.backoff
        self.backoff = min(self.backoff * 2, RETRY_MAX_S)
        return first

    def succeeded(self) -> None:
        self.at, self.backoff = float("inf"), RETRY_FIRST_S


class BatchHandler(Protocol):
    """What the loop drives (the session)."""

    def roots(self) -> list[Path]:
        """The trees and files to watch."""
        ...

    def wants(self, path: str) -> bool:
        """Whether a change of `path` is a trigger."""
        ...

    def wants_dir(self, path: str) -> bool:
        """Whether the directory `path` is packaged (watched)."""
        ...

    def prepare(self, paths: set[str]) -> None:
        """Work ahead on the paths of a batch still gathering."""
        ...

    def handle_batch(self, paths: set[str], trigger: str = "change") -> object | None:
        """Push what the batch changed (with `trigger="retry"`, what a failed push left
        unpublished); None when nothing was pushed."""
        ...

    def repin(self) -> bool:
        """Re-pin what a job may still need; True when a current version is gone (re-push)."""
        ...

    def recheck_path(self) -> bool:
        """Whether the target now calls for another path (a Ray cluster's nodes changed);
        True when it switched to it (every source is to be pushed again)."""
        ...


class WatchLoop:
    def __init__(self, handler: BatchHandler, *, quiet_s: float, max_wait_s: float,
                 reconcile_s: float, pin_s: float, polling: bool | None,
                 poll_interval_s: float, observer_factory: Callable[[], Any] | None,
                 on_notice: Callable[[str, str, str | None], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.handler = handler
        self.clock = clock
        self.debouncer = Debouncer(quiet_s, max_wait_s, clock=clock)
        self.overflowed = threading.Event()  # events were lost: re-check everything
        self.reconcile_s, self.pin_s = reconcile_s, pin_s
        self.polling, self.poll_interval_s = polling, poll_interval_s
        self.observer_factory = observer_factory
        self.on_notice = on_notice
        self.watcher: Watcher | None = None
        self.stop_event = threading.Event()
        self._next_reconcile = self._next_pin = float("inf")  # set by run()
        self._retry = _Retry(clock)

    def start(self) -> None:
        self.watcher = Watcher(self.handler.roots(), self._on_event, polling=self.polling,
                               poll_interval_s=self.poll_interval_s,
                               observer_factory=self.observer_factory,
                               on_notice=self._notice, wants_dir=self.handler.wants_dir,
                               on_overflow=self._on_overflow)
        self.watcher.start()

    def refresh(self) -> None:
        """Watch the directories packaged now (an ignore file changed which they are)."""
        if self.watcher is not None:
            self.watcher.refresh()

    def restart(self) -> None:
        """Watch the handler's roots as they are now (the runtime_env changed them)."""
        if self.watcher is None:
            return
        self.watcher.stop()
        self.start()

    def _on_event(self, path: str, complete: bool) -> None:
        if self.handler.wants(path):
            self.debouncer.add(path, complete=complete)

    def _on_overflow(self) -> None:
        self.overflowed.set()
        self.debouncer.add(complete=False)  # wakes the loop: a batch of no path

    def _notice(self, notice: WatchNotice) -> None:
        self.on_notice("warning", notice.message, notice.hint)

    def run(self, *, max_pushes: int | None = None) -> None:
        """Block, pushing on changes, until `stop()` (or `max_pushes` pushes)."""
        if self.watcher is None:
            self.start()
        self._next_reconcile = self.clock() + self.reconcile_s
        self._next_pin = self.clock() + self.pin_s
        pushes = 0
        while not self.stop_event.is_set():
            now = self.clock()
            timeout = max(0.0, min(self._next_reconcile, self._next_pin, self._retry.at) - now)
            batch = self.debouncer.wait_batch(timeout=min(timeout, 1.0),
                                              early=self.handler.prepare)
            if self.stop_event.is_set() or self.debouncer.closed:
                break
            try:
                pushes += self._turn(batch)
            except PackageTooLargeError as exc:  # the same again would be refused again
                self.on_notice("error", f"{exc}; still watching", exc.hint)
            except TransportError as exc:  # the target did not answer: try again soon
                if self._retry.failed():
                    self.on_notice("error", f"{exc}; still watching, trying again until it "
                                   "answers", exc.hint)
            except RtenvError as exc:
                self.on_notice("error", f"{exc}; still watching", exc.hint)
            if max_pushes is not None and pushes >= max_pushes:
                break

    def _turn(self, batch: set[str] | None) -> int:
        """The batch's push, then whatever is due (a retry, a reconcile, a re-pin): the pushes
        made."""
        pushes = 0
        if batch and self.handler.handle_batch(batch) is not None:
            pushes += 1
        now = self.clock()
        if batch and self.debouncer.last_batch_events >= STORM_EVENTS:
            self._next_reconcile = min(self._next_reconcile, now + STORM_RECONCILE_S)
        if self.overflowed.is_set():
            self.overflowed.clear()
            self.refresh()
            self._next_reconcile = now
        if now >= self._retry.at:
            if self.handler.handle_batch(set(), trigger="retry") is not None:
                pushes += 1
            self._retry.succeeded()
        if now >= self._next_reconcile:
            self._next_reconcile = now + self.reconcile_s
            if self.handler.handle_batch(set(), trigger="reconcile") is not None:
                pushes += 1
        if now >= self._next_pin:
            self._next_pin = now + self.pin_s
            if self.handler.repin() and self.handler.handle_batch(
                    set(), trigger="reconcile") is not None:
                pushes += 1  # the target lost the current version: pushed again
        if self.handler.recheck_path() and self.handler.handle_batch(
                set(), trigger="nodes") is not None:
            pushes += 1
        return pushes

    def repin_every(self, pin_s: float) -> None:
        """Re-pin every `pin_s` from now on (the first within `pin_s`)."""
        self.pin_s = pin_s
        self._next_pin = min(self._next_pin, self.clock() + pin_s)

    def stop(self) -> None:
        self.stop_event.set()
        self.debouncer.close()

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
            self.watcher = None
