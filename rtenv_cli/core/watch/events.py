"""The watchdog adapter: native observer (inotify on Linux) with a polling fallback.

On Linux, running out of inotify watches surfaces as OSError ENOSPC ("No space left on
device", tilt#2079) and running out of instances as EMFILE; both are translated into a message
that names the sysctl to raise, and the watcher falls back to watchdog's PollingObserver instead
of dying (Mutagen#291 complains that such fallbacks are silent: the caller gets a notice).
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WATCHES_SYSCTL = "fs.inotify.max_user_watches"
INSTANCES_SYSCTL = "fs.inotify.max_user_instances"


@dataclass(frozen=True)
class WatchNotice:
    message: str
    hint: str | None = None


def limit_notice(exc: OSError) -> WatchNotice | None:
    """The actionable message for an inotify-limit error, or None for other errors."""
    if exc.errno == errno.ENOSPC:
        return WatchNotice(
            "inotify watch limit reached; watching by polling instead (slower, more CPU)",
            hint=f"raise it: sudo sysctl {WATCHES_SYSCTL}=524288 (persist in /etc/sysctl.d/)")
    if exc.errno == errno.EMFILE:
        return WatchNotice(
            "inotify instance limit reached; watching by polling instead (slower, more CPU)",
            hint=f"raise it: sudo sysctl {INSTANCES_SYSCTL}=1024 (persist in /etc/sysctl.d/)")
    return None


class Watcher:
    """Feeds absolute paths of changed entries to `on_path` from watchdog's threads."""

    def __init__(self, roots: Sequence[Path], on_path: Callable[[str], None], *,
                 polling: bool | None = None, poll_interval_s: float = 1.0,
                 observer_factory: Callable[[], Any] | None = None,
                 on_notice: Callable[[WatchNotice], None] | None = None) -> None:
        self.roots = [Path(r).absolute() for r in roots]
        self.on_path = on_path
        self.polling = bool(polling)  # the CLI reads --poll and its variable
        self.poll_interval_s = poll_interval_s
        self.observer_factory = observer_factory
        self.on_notice = on_notice
        self.observer: Any = None
        self.mode = "polling" if self.polling else "native"

    def _handler(self) -> Any:
        from watchdog.events import FileSystemEventHandler

        on_path = self.on_path

        class _Handler(FileSystemEventHandler):
            def on_any_event(self, event: Any) -> None:
                if event.event_type in ("opened", "closed_no_write"):
                    return  # reads do not change content
                if event.is_directory and event.event_type == "modified":
                    return  # a child changed: that child has its own event
                on_path(os.fsdecode(event.src_path))
                dest = getattr(event, "dest_path", "")
                if dest:
                    on_path(os.fsdecode(dest))

        return _Handler()

    def _schedule(self, observer: Any) -> None:
        handler = self._handler()
        for root in self.roots:
            # A single-file source is watched through its directory (single-file watches break
            # on editors that replace the file by rename).
            target = root if root.is_dir() else root.parent
            observer.schedule(handler, str(target), recursive=root.is_dir())
        observer.start()

    def _polling_observer(self) -> Any:
        from watchdog.observers.polling import PollingObserver

        return PollingObserver(timeout=self.poll_interval_s)

    def start(self) -> None:
        if not self.polling:
            if self.observer_factory is not None:
                factory = self.observer_factory
            else:
                from watchdog.observers import Observer as factory
            observer = None
            try:
                observer = factory()
                self._schedule(observer)
                self.observer = observer
                return
            except OSError as exc:
                notice = limit_notice(exc)
                if notice is None:
                    raise
                with contextlib.suppress(Exception):  # half-started observer; polling replaces it
                    if observer is not None:
                        observer.stop()
                if self.on_notice is not None:
                    self.on_notice(notice)
        self.mode = "polling"
        observer = self._polling_observer()
        self._schedule(observer)
        self.observer = observer

    def stop(self) -> None:
        if self.observer is not None:
            self.observer.stop()
            self.observer.join(timeout=5)
            self.observer = None
