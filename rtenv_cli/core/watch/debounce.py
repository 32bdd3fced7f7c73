"""Coalesce file-system events: wait for a quiet period, but never longer than a cap.

Events are hints (see session.py): the batch only names paths to re-check. A steady stream of
events (a build writing files, `git checkout`) must still produce a push, so the quiet period is
capped: after `max_wait_s` from the first event the batch is released even if events continue.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Debouncer:
    quiet_s: float = 0.2
    max_wait_s: float = 2.0
    _paths: set[str] = field(default_factory=set)
    _first: float | None = None
    _last: float = 0.0
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _closed: bool = False
    # `early` (see wait_batch) runs once events have paused this long: the few events of one
    # save (truncate, write, close) arrive within a millisecond or two of each other
    early_after_s: float = 0.03
    _events: int = 0  # events added in this batch
    _early_events: int = 0  # how many of them `early` has seen
    last_batch_events: int = 0  # events behind the batch `wait_batch` returned last

    def add(self, *paths: str) -> None:
        now = time.monotonic()
        with self._cond:
            self._paths.update(paths)
            self._events += 1
            if self._first is None:
                self._first = now
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

    def wait_batch(self, timeout: float | None = None,
                   early: Callable[[set[str]], None] | None = None) -> set[str] | None:
        """Block until a batch is ready (returned) or `timeout` passes / closed (None).

        `early(paths)` is called, without the lock, while a batch is still gathering, once
        events have paused for `early_after_s` and some came in since its last call: work done
        ahead of the quiet period's end (the batch returned still names every path)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._closed:
                    return None
                now = time.monotonic()
                if self._first is not None:
                    ready_at = min(self._last + self.quiet_s, self._first + self.max_wait_s)
                    if now >= ready_at:
                        batch, self._paths, self._first = self._paths, set(), None
                        self.last_batch_events = self._events
                        self._events = self._early_events = 0
                        return batch
                    wait = ready_at - now
                    if early is not None and self._events != self._early_events:
                        early_at = self._last + self.early_after_s
                        if now >= early_at:
                            paths, self._early_events = set(self._paths), self._events
                            self._cond.release()
                            try:
                                early(paths)
                            finally:
                                self._cond.acquire()
                            continue
                        wait = min(wait, early_at - now)
                else:
                    wait = None
                if deadline is not None:
                    if now >= deadline:
                        return None
                    wait = deadline - now if wait is None else min(wait, deadline - now)
                self._cond.wait(wait)
