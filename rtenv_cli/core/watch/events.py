"""The file watcher: Linux inotify on the packaged directories only (inotify.py), watchdog's
native observer elsewhere, and watchdog's polling observer as the fallback.

On Linux, running out of inotify watches surfaces as OSError ENOSPC ("No space left on
device", tilt#2079) and running out of instances as EMFILE; both are translated into a message
that names the sysctl to raise, and the watcher falls back to watchdog's PollingObserver instead
of dying (Mutagen#291 complains that such fallbacks are silent: the caller gets a notice).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
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


def _everything(_path: str) -> bool:
    return True


class Watcher:
    """Feeds absolute paths of changed entries to `on_event(path, complete)` from the watcher's
    threads; `complete` says the write is finished (see debounce.py). Directories are watched
    when `wants_dir` keeps them (on Linux: an ignored directory gets no inotify watch)."""

    def __init__(self, roots: Sequence[Path], on_event: Callable[[str, bool], None], *,
                 polling: bool | None = None, poll_interval_s: float = 1.0,
                 observer_factory: Callable[[], Any] | None = None,
                 on_notice: Callable[[WatchNotice], None] | None = None,
                 wants_dir: Callable[[str], bool] = _everything,
                 on_overflow: Callable[[], None] | None = None) -> None:
        self.roots = [Path(r).absolute() for r in roots]
        self.on_event = on_event
        self.polling = bool(polling)  # the CLI reads --poll and its variable
        self.poll_interval_s = poll_interval_s
        self.observer_factory = observer_factory
        self.on_notice = on_notice
        self.wants_dir = wants_dir
        self.on_overflow = on_overflow
        self.observer: Any = None
        self.mode = "polling" if self.polling else "native"

    def _handler(self) -> Any:
        from watchdog.events import FileSystemEventHandler

        on_event = self.on_event
        # watchdog's polling observer reports a change it found by comparing two scans: the
        # write may still be going on, so it counts as open (the quiet period applies)
        trusted = not self.polling

        class _Handler(FileSystemEventHandler):
            def on_any_event(self, event: Any) -> None:
                kind = event.event_type
                if kind in ("opened", "closed_no_write"):
                    return  # reads do not change content
                if event.is_directory and kind == "modified":
                    return  # a child changed: that child has its own event
                complete = trusted and kind in ("closed", "moved", "deleted")
                on_event(os.fsdecode(event.src_path), complete)
                dest = getattr(event, "dest_path", "")
                if dest:
                    on_event(os.fsdecode(dest), complete)

        return _Handler()

    def refresh(self) -> None:
        """Watch what `wants_dir` keeps now (inotify; watchdog watches whole trees anyway)."""
        from rtenv_cli.core.watch.inotify import InotifyTree

        if isinstance(self.observer, InotifyTree):
            self.observer.refresh()

    def _inotify(self) -> Any:
        """Linux's own watcher on the packaged directories, or None elsewhere."""
        if self.observer_factory is not None or not sys.platform.startswith("linux"):
            return None
        from rtenv_cli.core.watch.inotify import InotifyTree, available

        if not available():
            return None
        dirs = [str(r) for r in self.roots if r.is_dir()]
        extra = sorted({str(r.parent) for r in self.roots if not r.is_dir()} - set(dirs))
        return InotifyTree(dirs, self.on_event, wants_dir=self.wants_dir, extra_dirs=extra,
                           on_overflow=self.on_overflow)

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

    def _start_inotify(self) -> bool:
        """Start Linux's own watcher; False where there is none, or (said in a notice) when
        its limits are reached: then the caller polls."""
        tree = None
        try:
            tree = self._inotify()
            if tree is None:
                return False
            tree.start()
            self.observer = tree
            return True
        except OSError as exc:
            notice = limit_notice(exc)
            if notice is None:
                raise
            if tree is not None:
                tree.stop()
            if self.on_notice is not None:
                self.on_notice(notice)
            self.polling = True
            return False

    def start(self) -> None:
        if not self.polling and self._start_inotify():
            return
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
            join = getattr(self.observer, "join", None)  # watchdog's observers are threads
            if join is not None:
                join(timeout=5)
            self.observer = None
