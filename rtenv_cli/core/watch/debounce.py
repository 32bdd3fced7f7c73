"""Coalesce file-system events into batches: at once for a finished save, after a quiet period
for a burst or a write still open, never later than a cap.

Events are hints (see session.py): the batch only names paths to re-check. Each event says
whether the write it reports is complete (the kernel's close-after-write, a rename into place, a
delete; see inotify.py) or still open (a modify with no close yet, or any event of a watcher that
cannot tell, polling). A batch is ready:
- `settle_s` after its last event when every path in it is complete and it is not a burst: a
  save is published at once (the few events of one save arrive within a millisecond or two);
- `quiet_s` after its last event otherwise: a write still open, or a burst (a batch of more
  than BURST_PATHS paths, as a build or `git checkout` makes, and the batch that follows one
  within `quiet_s`: the rest of the same stream);
- in any case `max_wait_s` after its first event, so that a steady stream still pushes.

The clock is injected (`clock`): `ready_at`/`take` decide from the time given, and tests drive
them with a fake clock; `wait_batch` is the blocking loop the watch runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

# a batch naming more paths than this is a burst (a checkout, a build): it waits for quiet
BURST_PATHS = 16


@dataclass
class Debouncer:
    quiet_s: float = 0.2
    max_wait_s: float = 2.0
    settle_s: float = 0.01
    clock: Callable[[], float] = time.monotonic
    _paths: set[str] = field(default_factory=set)
    _open: set[str] = field(default_factory=set)  # paths with a write not closed yet
    _first: float | None = None
    _last: float = 0.0
    _burst: bool = False
    _released: float | None = None  # when the last batch was taken
    _released_burst: bool = False  # whether it was a burst
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _closed: bool = False
    # `early` (see wait_batch) runs once events have paused this long: the few events of one
    # save (truncate, write, close) arrive within a millisecond or two of each other
    early_after_s: float = 0.03
    _events: int = 0  # events added in this batch
    _early_events: int = 0  # how many of them `early` has seen
    last_batch_events: int = 0  # events behind the batch `wait_batch` returned last

    def add(self, *paths: str, complete: bool = False) -> None:
        """Paths changed; `complete`: the write is finished (closed, renamed, deleted)."""
        now = self.clock()
        with self._cond:
            self._paths.update(paths)
            if complete:
                self._open.difference_update(paths)
            else:
                self._open.update(paths)
            self._events += 1
            if self._first is None:
                self._first = now
                self._burst = (self._released is not None and self._released_burst
                               and now - self._released < self.quiet_s)
            self._last = now
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def pending(self) -> bool:
        with self._cond:
            return bool(self._paths)

    def _is_burst(self) -> bool:
        return self._burst or len(self._paths) > BURST_PATHS

    def _ready_at(self) -> float | None:
        if self._first is None:
            return None
        wait = self.settle_s if not self._open and not self._is_burst() else self.quiet_s
        return min(self._last + wait, self._first + self.max_wait_s)

    def ready_at(self) -> float | None:
        """When the batch gathering now is ready (None: no batch)."""
        with self._cond:
            return self._ready_at()

    def _take(self, now: float) -> set[str] | None:
        ready = self._ready_at()
        if ready is None or now < ready:
            return None
        self._released_burst = self._is_burst()
        batch, self._paths, self._first = self._paths, set(), None
        self._open.clear()  # a write still open at the cap: its close starts the next batch
        self._released = now
        self.last_batch_events = self._events
        self._events = self._early_events = 0
        return batch

    def take(self, now: float | None = None) -> set[str] | None:
        """The batch, if it is ready at `now` (default: the clock's now)."""
        with self._cond:
            return self._take(self.clock() if now is None else now)

    def wait_batch(self, timeout: float | None = None,
                   early: Callable[[set[str]], None] | None = None) -> set[str] | None:
        """Block until a batch is ready (returned) or `timeout` passes / closed (None).

        `early(paths)` is called, without the lock, while a batch is still gathering, once
        events have paused for `early_after_s` and some came in since its last call: work done
        ahead of the quiet period's end (the batch returned still names every path)."""
        deadline = None if timeout is None else self.clock() + timeout
        with self._cond:
            while True:
                if self._closed:
                    return None
                now = self.clock()
                batch = self._take(now)
                if batch is not None:
                    return batch
                ready = self._ready_at()
                wait = None if ready is None else ready - now
                if ready is not None and early is not None \
                        and self._events != self._early_events:
                    early_at = self._last + self.early_after_s
                    if now >= early_at:
                        paths, self._early_events = set(self._paths), self._events
                        self._cond.release()
                        try:
                            early(paths)
                        finally:
                            self._cond.acquire()
                        continue
                    wait = min(wait, early_at - now) if wait is not None else None
                if deadline is not None:
                    if now >= deadline:
                        return None
                    wait = deadline - now if wait is None else min(wait, deadline - now)
                self._cond.wait(wait)
