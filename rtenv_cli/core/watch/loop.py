"""The timing of a watch: file events (from watchdog's threads) into a Debouncer, each batch
to the session when its quiet period ends (and the paths so far while it gathers), a reconcile
scan every `reconcile_s` to catch missed events, and a re-pin every `pin_s`."""

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

    def __init__(self) -> None:
        self.at = float("inf")
        self.backoff = RETRY_FIRST_S

    def failed(self) -> bool:
        """Schedule the next try; True for the first failure since the last success."""
        first = self.at == float("inf")
        self.at = time.monotonic() + self.backoff
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

    def prepare(self, paths: set[str]) -> None:
        """Work ahead on the paths of a batch still gathering."""
        ...

    def handle_batch(self, paths: set[str], trigger: str = "change") -> object | None:
        """Push what the batch changed (with `trigger="retry"`, what a failed push left
        unpublished); None when nothing was pushed."""
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
        self._next_reconcile = self._next_pin = float("inf")  # set by run()
        self._retry = _Retry()

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
        self._next_reconcile = time.monotonic() + self.reconcile_s
        self._next_pin = time.monotonic() + self.pin_s
        pushes = 0
        while not self.stop_event.is_set():
            now = time.monotonic()
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
        now = time.monotonic()
        if batch and self.debouncer.last_batch_events >= STORM_EVENTS:
            self._next_reconcile = min(self._next_reconcile, now + STORM_RECONCILE_S)
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
            self.handler.repin()
        return pushes

    def stop(self) -> None:
        self.stop_event.set()
        self.debouncer.close()

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
            self.watcher = None
