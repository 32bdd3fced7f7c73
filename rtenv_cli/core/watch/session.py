"""The watch loop: push once, then re-push complete immutable packages on every confirmed change.

Flow per batch: watcher events (hints) -> Debouncer (quiet period, capped) -> Snapshot.update
(stat/digest confirm, URI by XOR) -> push each changed source (delta to an agent or the embedded
store; cached-entry zip to Ray) -> one PushEvent. A reconcile scan runs every `reconcile_s` to
catch missed events; Ray URIs pushed in this session are re-pinned (GET) every `pin_s` (< 600 s,
Ray's temporary-reference lifetime) so they do not expire while watching.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import ConfigError, RtenvError, UnsupportedError
from rtenv_cli.core.push import (
    PackagePlan,
    load_input,
    package_runtime_env,
    require_source,
    validate,
)
from rtenv_cli.core.transport.base import DeltaTarget, ForkingTarget, Target
from rtenv_cli.core.watch import delta as delta_mod
from rtenv_cli.core.watch.debounce import Debouncer
from rtenv_cli.core.watch.events import Watcher, WatchNotice
from rtenv_cli.core.watch.filters import is_dependency_file, is_ephemeral
from rtenv_cli.core.watch.snapshot import Change, Snapshot
from rtenv_cli.core.watch.zipcache import BuiltZip, ContentChanged, build_zip, discard

MAX_RETRIES = 5
PREPARE_MAX_PATHS = 16  # more paths pending (a checkout, a build): wait for the batch instead
EARLY_PIN_S = 30  # an early upload's pin: unpublished and unreferenced, the GCS drops it then


@dataclass
class _EarlyUpload:
    """A prepared zip uploaded while its batch still gathers (see WatchSession._upload_early)."""

    uri: str
    cancel: threading.Event
    thread: threading.Thread | None = None
    sent: int = 0
    done: bool = False  # the target holds `uri` (uploaded here, or it was already there)


@dataclass(frozen=True)
class PushEvent:
    uri: str
    added: tuple[str, ...]
    modified: tuple[str, ...]
    removed: tuple[str, ...]
    bytes_sent: int
    elapsed_ms: float
    trigger: str  # initial | change | reconcile | env
    uris: Mapping[str, str] = field(default_factory=dict)  # field label -> URI
    runtime_env: Mapping[str, Any] = field(default_factory=dict)
    triggered_by: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri, "added": len(self.added), "modified": len(self.modified),
                "removed": len(self.removed), "bytes_sent": self.bytes_sent,
                "elapsed_ms": round(self.elapsed_ms, 1), "trigger": self.trigger}


@dataclass
class Source:
    label: str  # "working_dir" or "py_modules[0]"
    snap: Snapshot
    last_zip: BuiltZip | None = None
    known_blobs: set[str] = field(default_factory=set)
    last_manifest: dict[str, Any] | None = None  # what the target holds as `pushed`
    pushed: str | None = None
    prepared: BuiltZip | None = None  # built during the quiet period, for its snapshot's URI


class WatchSession:
    """Push the local sources of a runtime_env file (or of a directory: the working_dir) to
    `target` on every change. Relative paths resolve against `base_dir` (default: the current
    directory, as for `rtenv push` and Ray); `outputs` are files the caller rewrites after each
    push (push -o), never packaged and never a trigger."""

    def __init__(self, path: Path | str, target: Target, *, quiet_s: float = 0.2,
                 max_wait_s: float = 2.0, reconcile_s: float = 60.0, pin_s: float = 300.0,
                 polling: bool | None = None, poll_interval_s: float = 1.0,
                 on_push: Callable[[PushEvent], None] | None = None,
                 on_notice: Callable[[str, str, str | None], None] | None = None,
                 on_change_cmd: str | None = None, work_dir: Path | None = None,
                 observer_factory: Callable[[], Any] | None = None,
                 early_upload: bool = True, base_dir: Path | None = None,
                 outputs: Sequence[Path] = ()) -> None:
        self.path = Path(path).absolute()
        self.base_dir = Path(os.path.abspath(Path.cwd() if base_dir is None else base_dir))
        self.outputs = tuple(Path(os.path.abspath(p)) for p in outputs)
        self.target = target
        self.debouncer = Debouncer(quiet_s, max_wait_s)
        self.reconcile_s, self.pin_s = reconcile_s, pin_s
        self.polling, self.poll_interval_s = polling, poll_interval_s
        self.observer_factory = observer_factory
        self.early_upload = early_upload
        self.on_push = on_push or (lambda _e: None)
        self.on_notice = on_notice or (lambda _k, _m, _h: None)
        self.on_change_cmd = on_change_cmd
        if not self.path.exists():
            raise ConfigError(f"{self.path} does not exist", path=str(self.path),
                              hint="pass a directory (the working_dir) or a runtime_env file")
        self._own_work_dir = work_dir is None  # made here: removed by close()
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="rtenv-watch-"))
        self.env_file: Path | None = None if self.path.is_dir() else self.path
        self.runtime_env: dict[str, Any] = {}
        self.published: dict[str, Any] = {}
        self.sources: list[Source] = []
        self.pinned: list[str] = []
        self.watcher: Watcher | None = None
        self.stop_event = threading.Event()
        self.last_event: PushEvent | None = None
        self._deferred: set[str] = set()
        self._deferred_lock = threading.Lock()
        self._early = Change()  # what `_prepare` applied to the snapshots since the last batch
        self._uploads: dict[str, _EarlyUpload] = {}  # source label -> its early upload
        self._stale_uploads: list[_EarlyUpload] = []  # cancelled, joined at close
        self._early_target: Any = None
        self._early_tail: threading.Thread | None = None  # the last early upload started
        try:
            self.runtime_env = self._read_env()
            self.sources = self._sources(self._plans(self.runtime_env))
        except BaseException:
            self.close()
            raise

    # -- configuration -------------------------------------------------------------------------
    def _read_env(self) -> dict[str, Any]:
        """The runtime_env, read and validated exactly as `rtenv push` does (ConfigError)."""
        data, base, label = load_input(self.path, base_dir=self.base_dir)
        if self.env_file is not None:
            validate(data, base, label, os.environ)
        return data

    def _plans(self, env: Mapping[str, Any]) -> list[PackagePlan]:
        """push's source discovery, with the sources a watch can follow (directories)."""
        plans = package_runtime_env(env, self.base_dir, self.outputs)
        for plan in plans:
            require_source(plan)
            if not plan.source.is_dir():
                raise UnsupportedError(
                    f"{plan.field} {plan.source} is a local file; --watch packages directories "
                    "only", path=str(self.env_file or self.path),
                    hint="push file modules and wheels once with `rtenv push`, then watch the "
                    "directories")
        return plans

    def _sources(self, plans: list[PackagePlan]) -> list[Source]:
        """A Source per plan; one whose path and excludes did not change keeps its snapshot
        (and its last zip)."""
        old = {(s.label, str(s.snap.root), tuple(s.snap.excludes)): s for s in self.sources}
        return [old.get((p.field, str(p.source), p.excludes))
                or Source(p.field, Snapshot(p.source, p.kind, p.excludes)) for p in plans]

    def _published_env(self) -> dict[str, Any]:
        env = copy.deepcopy(self.runtime_env)
        for src in self.sources:
            uri = self.target.published_uri(src.snap.uri)
            if src.label == "working_dir":
                env["working_dir"] = uri
            else:
                index = int(src.label[len("py_modules["):-1])
                env["py_modules"][index] = uri
        env.pop("excludes", None)  # applied by packaging; Ray ignores it for gcs:// URIs
        return env

    # -- pushing -------------------------------------------------------------------------------
    def _push_source(self, src: Source) -> int:
        snap = src.snap
        uri = snap.uri
        if isinstance(self.target, DeltaTarget):
            return self._push_delta(src, self.target)
        prepared, src.prepared = src.prepared, None
        if prepared is not None and prepared.uri != uri:
            discard(prepared, src.last_zip)
            prepared = None
        early = self._uploads.pop(src.label, None)
        sent_early = 0
        if early is not None:
            if early.uri == uri and early.thread is not None:
                early.thread.join()
                sent_early = early.sent if early.done else 0
            else:
                self._drop_upload(early)
        if self.target.exists(uri):  # pins it for 10 minutes: from here on it is published
            if prepared is not None:  # the next edit splices from the newest zip
                discard(src.last_zip, prepared)
                src.last_zip = prepared
            elif src.last_zip is None:  # the next edit splices from it (else: a whole zip)
                src.last_zip = build_zip(snap, self.work_dir, layout=self._layout())
            return sent_early
        built = prepared or build_zip(snap, self.work_dir, src.last_zip, layout=self._layout())
        try:
            self.target.upload(uri, built.path)
        except BaseException:
            discard(built, src.last_zip)
            raise
        discard(src.last_zip, built)
        src.last_zip = built
        return built.zip_bytes

    def _layout(self) -> Any:
        """The zip layout the target needs (a file:// target: Ray strips a top directory)."""
        return getattr(self.target, "layout", "ray")

    def _push_delta(self, src: Source, target: DeltaTarget) -> int:
        snap = src.snap
        manifest = snap.manifest()
        if src.known_blobs and src.last_manifest is not None:
            # Blobs committed earlier in this session are on the target: send only new ones,
            # then the manifest as changes to the last one (bytes in proportion to the edit).
            # A gc in between makes the commit fail with missing blobs, an agent that lost the
            # base says so: the full protocol below then recovers.
            new = [e.sha256 for e in snap.files()
                   if e.sha256 and e.sha256 not in src.known_blobs]
            try:
                _count, sent = delta_mod.send_blobs(snap, target, new)
                body = delta_mod.relative_manifest(src.last_manifest, manifest)
                target.commit_manifest(body)
                # grows over the session: reverting an edit sends no blob at all
                src.known_blobs |= {e.sha256 for e in snap.files() if e.sha256}
                src.last_manifest = manifest
                return sent + len(json.dumps(body))
            except ContentChanged:
                src.known_blobs = set()
                raise
            except RtenvError:
                src.known_blobs = set()
        result = delta_mod.push_delta(snap, target, manifest)
        src.known_blobs = {e.sha256 for e in snap.files() if e.sha256}
        src.last_manifest = manifest
        return result.bytes_sent

    def _push_all(self, change: Change, trigger: str, triggered_by: tuple[str, ...],
                  start: float) -> PushEvent | None:
        sent = 0
        for attempt in range(MAX_RETRIES + 1):
            try:
                for src in self.sources:
                    if src.pushed != src.snap.uri or trigger == "initial":
                        sent += self._push_source(src)
                        src.pushed = src.snap.uri
                break
            except ContentChanged as exc:
                if attempt == MAX_RETRIES:
                    raise
                for src in self.sources:
                    change = change.merge(src.snap.update([str(src.snap.root / exc.relpath)]))
        published = self._published_env()
        for src in self.sources:
            if src.snap.uri not in self.pinned:
                self.pinned = [*self.pinned[-19:], src.snap.uri]
        main = self.sources[0].snap.uri if self.sources else ""
        event = PushEvent(main, change.added, change.modified, change.removed, sent,
                          (time.perf_counter() - start) * 1000, trigger,
                          {s.label: s.snap.uri for s in self.sources}, published, triggered_by)
        self.published = published
        self.last_event = event
        self.on_push(event)
        self._run_on_change(event)
        return event

    def _run_on_change(self, event: PushEvent) -> None:
        if not self.on_change_cmd:
            return
        import subprocess

        env = dict(os.environ, RTENV_RUNTIME_ENV=json.dumps(event.runtime_env),
                   RTENV_URI=event.uri)
        import sys

        # stdout carries only push lines / JSON events: the command's output goes to stderr
        rc = subprocess.call(self.on_change_cmd, shell=True, env=env,  # noqa: S602 - the user's command
                             stdout=sys.stderr.fileno())
        if rc:
            self.on_notice("warning", f"--on-change command exited with {rc}", None)

    # -- events --------------------------------------------------------------------------------
    def initial_push(self) -> PushEvent | None:
        start = time.perf_counter()
        change = Change()
        for src in self.sources:
            change = change.merge(src.snap.full_scan())
        if not self.sources:
            raise ConfigError("nothing to watch: no local working_dir or py_modules",
                              hint="set working_dir to a local directory")
        return self._push_all(change, "initial", (), start)

    def _on_path(self, path: str) -> None:
        for src in self.sources:
            rel = src.snap.relpath(path)
            if rel is not None:
                if rel != "." and is_ephemeral(rel):
                    # Never a trigger, but Ray packages what its ignore rules keep: re-check
                    # these paths with the next real change so that the URI matches a fresh
                    # packaging of the tree at that moment.
                    with self._deferred_lock:
                        self._deferred.add(path)
                    return
                if rel != "." and src.snap.rules.is_ignored(rel):
                    return
                self.debouncer.add(path)
                return
        if self.env_file is not None and (path == str(self.env_file)
                                          or is_dependency_file(path)):
            self.debouncer.add(path)

    def _env_changed(self, paths: set[str]) -> bool:
        """Re-load the runtime_env; False when it is invalid (reported, not pushed)."""
        if self.env_file is None:
            return True
        try:
            env = self._read_env()
            sources = self._sources(self._plans(env))
        except (RtenvError, OSError) as exc:
            message = exc.message if isinstance(exc, RtenvError) else str(exc)
            self.on_notice("error", f"{message}; not pushed, still watching",
                           getattr(exc, "hint", None) or
                           "fix the file; the next save is picked up")
            return False
        old = self._published_env()
        self.runtime_env = env
        before, self.sources = self.sources, sources
        for gone in (s for s in before if all(s is not n for n in self.sources)):
            discard(gone.prepared)
            discard(gone.last_zip)
            job = self._uploads.pop(gone.label, None)
            if job is not None:
                self._drop_upload(job)
        self._restart_watcher()
        for src in self.sources:
            if not src.snap.entries:
                src.snap.full_scan()
        new = self._published_env()
        diff = runtime_env_diff(old, new)
        if diff:
            self.on_notice("env", "runtime_env changed:\n" + diff,
                           "workers will rebuild the environment on the next job")
        names = sorted(os.path.basename(p) for p in paths if is_dependency_file(p))
        if names:
            self.on_notice("env", f"dependency file changed: {', '.join(names)}",
                           "workers will rebuild the environment (pip/uv/conda) on the next job")
        return True

    def _prepare(self, paths: set[str]) -> None:
        """While a batch gathers: confirm its paths so far and build the zips they lead to, so
        that what is left when the quiet period ends is the upload. A few paths only (an edit,
        a save); anything odd (the runtime_env, an error) is left to the batch."""
        if (len(paths) > PREPARE_MAX_PATHS or not self.sources
                or any(p == str(self.env_file) or is_dependency_file(p) for p in paths)):
            return
        try:
            for src in self.sources:  # folded one by one: what is applied is reported
                self._early = self._early.then(src.snap.update(paths))
            if isinstance(self.target, DeltaTarget):
                return
            for src in self.sources:
                if src.snap.uri == src.pushed or (src.prepared is not None
                                                  and src.prepared.uri == src.snap.uri):
                    continue
                discard(src.prepared, src.last_zip)
                src.prepared = None
                src.prepared = build_zip(src.snap, self.work_dir, src.last_zip,
                                         layout=self._layout())
                self._upload_early(src)
        except (RtenvError, OSError):
            return  # e.g. a file still being written: the batch confirms it again

    def _upload_early(self, src: Source) -> None:
        """Start uploading a prepared zip before its quiet period ends, on a connection of its
        own, when the target can cancel an upload and pin briefly (a Ray GCS). It is published
        (pinned for 10 minutes, reported) only when the batch confirms that version; a newer
        save cancels it, and a version that was uploaded but superseded is pinned only
        EARLY_PIN_S: unreferenced, the GCS deletes it then, as it does any expired pin."""
        built = src.prepared
        if not self.early_upload or built is None or not isinstance(self.target, ForkingTarget):
            return
        old = self._uploads.pop(src.label, None)
        if old is not None:
            self._drop_upload(old)
        if self._early_target is None:
            self._early_target = self.target.fork()
        target = self._early_target
        job = _EarlyUpload(built.uri, threading.Event())
        before = self._early_tail

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

        # a daemon: best effort, it must not hold the process at exit when the GCS hangs
        job.thread = threading.Thread(target=run, name="rtenv-early-upload", daemon=True)
        self._uploads[src.label] = job
        self._early_tail = job.thread
        job.thread.start()

    def _drop_upload(self, job: _EarlyUpload) -> None:
        job.cancel.set()
        self._stale_uploads = [j for j in self._stale_uploads
                               if j.thread is not None and j.thread.is_alive()] + [job]

    def handle_batch(self, paths: set[str], trigger: str = "change") -> PushEvent | None:
        start = time.perf_counter()
        early, self._early = self._early, Change()
        env_paths = {p for p in paths if p == str(self.env_file) or is_dependency_file(p)}
        if env_paths and self.env_file is not None:
            if not self._env_changed(env_paths):
                self._early = early  # not pushed: the next batch reports what was confirmed
                return None
            trigger = "env"
        elif env_paths:
            names = sorted(os.path.basename(p) for p in env_paths)
            self.on_notice("env", f"dependency file changed: {', '.join(names)}",
                           "workers will rebuild the environment if the runtime_env uses it")
        with self._deferred_lock:
            deferred, self._deferred = self._deferred, set()
        change = Change()
        for src in self.sources:
            change = change.merge(src.snap.update(paths | deferred) if trigger != "reconcile"
                                  else src.snap.reconcile())
        change = early.then(change)
        if not change and trigger != "env" and all(s.pushed == s.snap.uri for s in self.sources):
            return None
        rels = tuple(sorted({r for s in self.sources for p in paths
                             if (r := s.snap.relpath(p)) is not None}))
        return self._push_all(change, trigger, rels, start)

    def _restart_watcher(self) -> None:
        if self.watcher is None:
            return
        self.watcher.stop()
        self._start_watcher()

    def _start_watcher(self) -> None:
        roots = [s.snap.root for s in self.sources]
        if self.env_file is not None and all(self.env_file.parent != r and r not in
                                             self.env_file.parents for r in roots):
            roots.append(self.env_file)  # watched through its directory
        self.watcher = Watcher(roots, self._on_path, polling=self.polling,
                               poll_interval_s=self.poll_interval_s,
                               observer_factory=self.observer_factory,
                               on_notice=self._notice)
        self.watcher.start()

    def _notice(self, notice: WatchNotice) -> None:
        self.on_notice("warning", notice.message, notice.hint)

    def _pin(self) -> None:
        if self.target.pins:
            for uri in self.pinned:
                self.target.exists(uri)

    def start(self) -> None:
        self._start_watcher()

    def run(self, *, max_pushes: int | None = None) -> None:
        """Block, pushing on changes, until `stop()` (or KeyboardInterrupt in the caller)."""
        if self.watcher is None:
            self._start_watcher()
        next_reconcile = time.monotonic() + self.reconcile_s
        next_pin = time.monotonic() + self.pin_s
        pushes = 0
        try:
            while not self.stop_event.is_set():
                now = time.monotonic()
                timeout = max(0.0, min(next_reconcile, next_pin) - now)
                batch = self.debouncer.wait_batch(timeout=min(timeout, 1.0),
                                                  early=self._prepare)
                if self.stop_event.is_set() or self.debouncer.closed:
                    break
                try:
                    if batch and self.handle_batch(batch) is not None:
                        pushes += 1
                    now = time.monotonic()
                    if now >= next_reconcile:
                        next_reconcile = now + self.reconcile_s
                        if self.handle_batch(set(), trigger="reconcile") is not None:
                            pushes += 1
                    if now >= next_pin:
                        next_pin = now + self.pin_s
                        self._pin()
                except RtenvError as exc:
                    self.on_notice("error", f"{exc}; still watching", exc.hint)
                if max_pushes is not None and pushes >= max_pushes:
                    break
        finally:
            self.close()

    def stop(self) -> None:
        self.stop_event.set()
        self.debouncer.close()

    def close(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()
            self.watcher = None
        for job in [*self._uploads.values(), *self._stale_uploads]:
            job.cancel.set()
            if job.thread is not None:
                job.thread.join(timeout=30)
        self._uploads.clear()
        if self._early_target is not None:
            self._early_target.close()
            self._early_target = None
        for src in self.sources:
            discard(src.prepared)
            discard(src.last_zip)
            src.prepared = src.last_zip = None
        if self._own_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)


def runtime_env_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    import difflib

    a = json.dumps(old, indent=2, sort_keys=True).splitlines()
    b = json.dumps(new, indent=2, sort_keys=True).splitlines()
    return "\n".join(line for line in difflib.unified_diff(a, b, "before", "after", lineterm="",
                                                           n=1))
