"""Early uploads: a zip prepared while its batch still gathers starts uploading at once, on a
connection of its own, when the target can open one and cancel an upload (a Ray GCS). The
quiet period that coalesces saves then overlaps the upload instead of preceding it.

An early upload is pinned only EARLY_PIN_S: it is published (pinned for 10 minutes, reported)
only when the batch confirms that version. A newer save cancels it; a version that was uploaded
but superseded is left unreferenced and the GCS deletes it when its short pin runs out, as it
does any expired pin. Uploads run one at a time on the early connection, in daemon threads:
best effort, they must not hold the process at exit when the GCS hangs.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any

from rtenv_cli.core.transport.base import ForkingTarget
from rtenv_cli.core.watch.zipcache import BuiltZip

EARLY_PIN_S = 30  # an early upload's pin: unpublished and unreferenced, the GCS drops it then


@dataclass
class _Upload:
    uri: str
    cancel: threading.Event
    thread: threading.Thread | None = None
    sent: int = 0
    done: bool = False  # the target holds `uri` (uploaded here, or it was already there)


class EarlyUploader:
    def __init__(self, target: ForkingTarget) -> None:
        self.target = target
        self._connection: Any = None  # the target's fork, opened by the first upload
        self._uploads: dict[str, _Upload] = {}  # source label -> its early upload
        self._stale: list[_Upload] = []  # cancelled, joined at close
        self._tail: threading.Thread | None = None  # the last upload started

    def start(self, label: str, built: BuiltZip) -> None:
        """Upload `built` for source `label`, after the uploads already started; an earlier
        one of the same source is cancelled."""
        self.drop(label)
        if self._connection is None:
            self._connection = self.target.fork()
        target = self._connection
        job = _Upload(built.uri, threading.Event())
        before = self._tail

        def run() -> None:
            if before is not None:
                before.join()  # one call at a time on this connection, whatever the source
            if job.cancel.is_set():
                return
            # best effort: whatever fails here (cancelled, a lost connection), the batch
            # uploads the version itself
            with contextlib.suppress(Exception):
                if not target.exists(built.uri, pin_s=EARLY_PIN_S):
                    target.upload(built.uri, built.path, cancel=job.cancel)
                    job.sent = built.zip_bytes
                job.done = True

        job.thread = threading.Thread(target=run, name="rtenv-early-upload", daemon=True)
        self._uploads[label] = job
        self._tail = job.thread
        job.thread.start()

    def finish(self, label: str, uri: str) -> int:
        """The bytes an early upload of `uri` for `label` sent, once it is over (0 if it did
        not upload it); an early upload of another version is cancelled."""
        job = self._uploads.pop(label, None)
        if job is None:
            return 0
        if job.uri == uri and job.thread is not None:
            job.thread.join()
            return job.sent if job.done else 0
        self._cancel(job)
        return 0

    def drop(self, label: str) -> None:
        """Cancel the early upload of `label`, if any."""
        job = self._uploads.pop(label, None)
        if job is not None:
            self._cancel(job)

    def _cancel(self, job: _Upload) -> None:
        job.cancel.set()
        self._stale = [j for j in self._stale
                       if j.thread is not None and j.thread.is_alive()] + [job]

    def close(self) -> None:
        for job in [*self._uploads.values(), *self._stale]:
            job.cancel.set()
            if job.thread is not None:
                job.thread.join(timeout=30)
        self._uploads.clear()
        if self._connection is not None:
            self._connection.close()
            self._connection = None
