"""The watch session: push once, then re-push complete immutable packages on every confirmed
change.

Flow per batch: watcher events (hints) -> Debouncer (quiet period, capped) -> Snapshot.update
(stat/digest confirm, URI by XOR) -> push each changed source (delta to an agent or the embedded
store; to Ray, a tree delta where every node loads rtenv's plugin, else whole zips: the one
decision `rtenv push` makes, push.tree_path, with its one-line note) -> one PushEvent. A
reconcile scan runs every `reconcile_s` to catch missed events; the Ray URIs a job may still
need are re-pinned every `pin_s` (see "Pins").

The parts: `sources.WatchedEnv` (the runtime_env and its sources, found as push finds them),
`loop.WatchLoop` (events, debounce, timers), `publish` (a publisher per kind of target, with
`early` uploads to a Ray GCS). The session decides what a batch means and reports it.

Pins (a Ray target). Ray deletes a package once no job references it and its temporary pins
(`exists`) have expired, so a watch keeps alive only what a job may still need:
- the current version of each source and the one before it (KEEP_VERSIONS), re-pinned every
  `pin_s`: a job submitted from the last push, or from the one before a quick second save;
- nothing for running or pending jobs: Ray counts their references itself (a job's runtime_env
  from its registration to its end, a detached actor's, e.g. a `ray job submit` supervisor's,
  for its life), so a superseded version a job uses stays as long as the job does;
- a superseded version is no longer re-pinned and goes when its last pin ends. Where the pin's
  length can be chosen (the GCS address) it is HOLD_S, re-pinned every HOLD_S / 3: a session of
  many edits holds the versions of the last HOLD_S, not 20 whole zips. Through the dashboard a
  pin is the dashboard's 10 minutes. When the watch ends, the current versions are pinned for
  Ray's usual 10 minutes, as a one-shot `rtenv push` leaves them.
On the tree path nothing is pinned: the current trees' grace period (`t:` keys, trees/gc.py) is
renewed every `pin_s` and once more when the watch ends, and a tree gone from the cluster (a
purge) is pushed again.

Nodes (a Ray GCS, `--via auto`). The path is decided again while the watch runs: every
NODES_CHECK_S the alive nodes are listed (one call; the plugin's announcements are read only when
that set changed, trees/cluster.recheck). A node without rtenv's plugin that joined (still
unannounced at the next check: a plugin announces itself a moment after its node registers)
moves the watch to the zip path, with the note `rtenv push` prints, every source pushed again at
once (the trigger `nodes`), so the runtime_env it reports runs on that node too; once every node
loads the plugin again, back to the tree path.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from rtenv_cli.core.errors import ConfigError, RtenvError
from rtenv_cli.core.transport.base import PIN_SECONDS, Target
from rtenv_cli.core.watch.filters import is_dependency_file, is_ephemeral
from rtenv_cli.core.watch.loop import WatchLoop
from rtenv_cli.core.watch.oncommand import ChangeCommand
from rtenv_cli.core.watch.publish import TreePublisher, chooses_pin, publisher_for
from rtenv_cli.core.watch.snapshot import Change
from rtenv_cli.core.watch.sources import Source, WatchedEnv, runtime_env_diff
from rtenv_cli.core.watch.zipcache import ContentChanged

__all__ = ["PushEvent", "Source", "WatchSession", "runtime_env_diff"]

MAX_RETRIES = 5
PREPARE_MAX_PATHS = 16  # more paths pending (a checkout, a build): wait for the batch instead
KEEP_VERSIONS = 2  # per source: the versions re-pinned (the current one and the one before)
HOLD_S = 30  # a pin's length where the watch chooses it (a Ray GCS): see "Pins"
NODES_CHECK_S = 2.0  # how often the cluster's nodes are re-checked (a Ray GCS): see "Nodes"


@dataclass(frozen=True)
class PushEvent:
    uri: str
    added: tuple[str, ...]
    modified: tuple[str, ...]
    removed: tuple[str, ...]
    bytes_sent: int
    elapsed_ms: float
    trigger: str  # initial | change | reconcile | env | retry (the target answered again) |
    # nodes (the cluster's nodes changed the path: see "Nodes")
    uris: Mapping[str, str] = field(default_factory=dict)  # field label -> URI
    runtime_env: Mapping[str, Any] = field(default_factory=dict)
    triggered_by: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri, "added": len(self.added), "modified": len(self.modified),
                "removed": len(self.removed), "bytes_sent": self.bytes_sent,
                "elapsed_ms": round(self.elapsed_ms, 1), "trigger": self.trigger}


class WatchSession:
    """Push the local sources of a runtime_env file (or of a directory: the working_dir) to
    `target` on every change. Relative paths resolve against `base_dir` (default: the current
    directory, as for `rtenv push` and Ray); `outputs` are files the caller rewrites after each
    push (push -o), never packaged and never a trigger; `via`: auto | tree | zip, as for
    `rtenv push --via`."""

    def __init__(self, path: Path | str, target: Target, *, quiet_s: float = 0.2,
                 max_wait_s: float = 2.0, reconcile_s: float = 60.0, pin_s: float | None = None,
                 polling: bool | None = None, poll_interval_s: float = 1.0,
                 on_push: Callable[[PushEvent], None] | None = None,
                 on_notice: Callable[[str, str, str | None], None] | None = None,
                 on_change_cmd: str | None = None, work_dir: Path | None = None,
                 observer_factory: Callable[[], Any] | None = None,
                 early_upload: bool = True, base_dir: Path | None = None,
                 outputs: Sequence[Path] = (), via: str = "auto") -> None:
        self.path = Path(path).absolute()
        self.env = WatchedEnv(self.path,
                              Path(os.path.abspath(Path.cwd() if base_dir is None else base_dir)),
                              [Path(os.path.abspath(p)) for p in outputs])
        self.target = target
        self.on_push = on_push or (lambda _e: None)
        self.on_notice = on_notice or (lambda _k, _m, _h: None)
        self.on_change_cmd = on_change_cmd
        self.on_change: ChangeCommand | None = None  # started with the first push
        from rtenv_cli.core.push import tree_path

        # the decision and note of `rtenv push` (a RayKV when every node loads the plugin)
        kv, why, self.guarded = tree_path(target, via)
        if why:
            self.on_notice("note", why, None)
        self._nodes = _nodes_check(target, via, kv)
        self._own_work_dir = work_dir is None  # made here: removed by close()
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="rtenv-watch-"))
        self.hold_s = HOLD_S if chooses_pin(target) and kv is None else None
        self._early_upload, self._pin_s_given = early_upload, pin_s is not None
        self.publisher = publisher_for(target, self.work_dir, early_upload=early_upload,
                                       pin_s=self.hold_s, kv=kv)
        if pin_s is None:
            pin_s = self.hold_s / 3 if self.hold_s else PIN_SECONDS / 2
        self.loop = WatchLoop(self, quiet_s=quiet_s, max_wait_s=max_wait_s,
                              reconcile_s=reconcile_s, pin_s=pin_s, polling=polling,
                              poll_interval_s=poll_interval_s, observer_factory=observer_factory,
                              on_notice=self.on_notice)
        self.published: dict[str, Any] = {}  # the runtime_env of the last push
        self.last_event: PushEvent | None = None
        self.pinned: dict[str, list[str]] = {}  # source label -> its URIs re-pinned, newest last
        self._deferred: set[str] = set()  # ephemeral paths, re-checked with the next batch
        self._deferred_lock = threading.Lock()
        self._early = Change()  # what `prepare` applied to the snapshots since the last batch
        # what a failed push left unpublished (change, triggered_by): the next push reports it
        # with its own, counted since the last push that reached the target
        self._unpublished: tuple[Change, tuple[str, ...]] | None = None
        try:
            self.env.adopt(*self.env.load())
        except BaseException:
            self.close()
            raise

    @property
    def sources(self) -> list[Source]:
        return self.env.sources

    @property
    def watcher(self) -> Any:
        return self.loop.watcher

    # -- pushing -------------------------------------------------------------------------------
    def _push_all(self, change: Change, trigger: str, triggered_by: tuple[str, ...],
                  start: float) -> PushEvent | None:
        if self._unpublished is not None:  # a push failed since the last one that reached it
            before, before_by = self._unpublished
            change = before.then(change)
            triggered_by = tuple(dict.fromkeys(before_by + triggered_by))
        sent = 0
        try:
            for attempt in range(MAX_RETRIES + 1):
                try:
                    for src in self.sources:
                        if src.pushed != src.snap.uri or trigger == "initial":
                            sent += self.publisher.push(src)
                            src.pushed = src.snap.uri
                    break
                except ContentChanged as exc:
                    if attempt == MAX_RETRIES:
                        raise
                    for src in self.sources:
                        change = change.merge(
                            src.snap.update([str(src.snap.root / exc.relpath)]))
        except BaseException:
            self._unpublished = (change, triggered_by)
            raise
        self._unpublished = None
        published = self._published_env()
        self.pinned = {src.label: _kept(self.pinned.get(src.label, []), src.snap.uri)
                       for src in self.sources}
        uris = {s.label: s.tree_uri or s.snap.uri for s in self.sources}
        main = next(iter(uris.values()), "")
        event = PushEvent(main, change.added, change.modified, change.removed, sent,
                          (time.perf_counter() - start) * 1000, trigger, uris, published,
                          triggered_by)
        self.published = published
        self.last_event = event
        self.on_push(event)
        if self.on_change_cmd:
            if self.on_change is None:
                self.on_change = ChangeCommand(self.on_change_cmd, self.on_notice)
            self.on_change.submit(event)
        return event

    def _published_env(self) -> dict[str, Any]:
        """The runtime_env as pushed: each source's URI in its place, or on the tree path its
        tree in the `rtenv` field, as `rtenv push` writes it (push.move_to_rtenv)."""
        if not isinstance(self.publisher, TreePublisher):
            return self.env.published_env(self.target.published_uri)
        from rtenv_cli.core.push import move_to_rtenv

        out = self.env.published_env(cast(Callable[[str], str], lambda _uri: None))
        moved: dict[str, Any] = {}
        for src in self.sources:
            if src.label == "working_dir":
                moved["working_dir"] = src.tree_uri
            else:
                moved.setdefault("py_modules", []).append(src.tree_uri)
        move_to_rtenv(out, moved, self.guarded)
        return out

    def repin(self, seconds: int | None = None) -> bool:
        """Re-pin the versions a job may still need (see "Pins"); True when the current version
        of a source is gone from the target (it is pushed again at once)."""
        if isinstance(self.publisher, TreePublisher):
            return self.publisher.touch(self.sources)
        if not self.target.pins:
            return False
        seconds = seconds or self.hold_s
        current = {src.label: src.pushed for src in self.sources}
        lost = False
        for label, uris in self.pinned.items():
            for uri in uris:
                there = (self.target.exists(uri, pin_s=seconds)  # type: ignore[call-arg]
                         if seconds else self.target.exists(uri))
                if not there and uri == current.get(label):
                    lost = True
        if lost:
            for src in self.sources:
                src.pushed = None
        return lost

    def recheck_path(self) -> bool:
        """At most every NODES_CHECK_S: move to the path the cluster's nodes call for now (see
        "Nodes"), saying so; True when it moved (every source is then to be pushed again)."""
        nodes = self._nodes
        if nodes is None or time.monotonic() - nodes.checked < NODES_CHECK_S:
            return False
        from rtenv_cli.core.trees.cluster import recheck

        nodes.checked = time.monotonic()
        try:
            ready = recheck(nodes.kv, nodes.last)
        except (RtenvError, OSError):  # the cluster did not answer: the next push says so
            return False
        if ready is None:
            return False
        joined = set(ready.missing) - nodes.last.nodes.keys()
        nodes.last = ready
        if ready.ok == isinstance(self.publisher, TreePublisher) or joined:
            return False  # a node that just joined: its plugin announces itself a moment later
        self.publisher.close(self.sources)
        kv = nodes.kv.fork() if ready.ok else None
        self.guarded = ready.guarded
        self.hold_s = HOLD_S if chooses_pin(self.target) and kv is None else None
        self.publisher = publisher_for(self.target, self.work_dir,
                                       early_upload=self._early_upload, pin_s=self.hold_s, kv=kv)
        if not self._pin_s_given:
            self.loop.repin_every(self.hold_s / 3 if self.hold_s else PIN_SECONDS / 2)
        for src in self.sources:
            src.pushed = src.tree_uri = None
        self.pinned = {}
        self.on_notice("note", "tree path: every node loads rtenv's plugin now" if ready.ok
                       else f"zip path: {ready.why_not()}", None)
        return True

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

    def roots(self) -> list[Path]:
        return self.env.roots()

    def wants_dir(self, path: str) -> bool:
        """Whether a source packages the directory `path` (only those are watched: never a
        `.venv`, a `.git` or an excluded directory of a working_dir)."""
        found = False
        for src in self.sources:
            rel = src.snap.relpath(path)
            if rel is not None:
                if rel == "." or not src.snap.rules.is_ignored(rel):
                    return True
                found = True
        return not found and any(Path(path) == r for r in self.roots())

    def wants(self, path: str) -> bool:
        for src in self.sources:
            rel = src.snap.relpath(path)
            if rel is not None:
                if rel != "." and is_ephemeral(rel):
                    # Never a trigger, but Ray packages what its ignore rules keep: re-check
                    # these paths with the next real change so that the URI matches a fresh
                    # packaging of the tree at that moment.
                    with self._deferred_lock:
                        self._deferred.add(path)
                    return False
                return rel == "." or not src.snap.rules.is_ignored(rel)
        return self.env.env_file is not None and self.env.is_env_path(path)

    def _env_changed(self, paths: set[str]) -> bool:
        """Re-load the runtime_env; False when it is invalid (reported, not pushed)."""
        if self.env.env_file is None:
            return True
        try:
            env, sources = self.env.load()
        except (RtenvError, OSError) as exc:
            message = exc.message if isinstance(exc, RtenvError) else str(exc)
            self.on_notice("error", f"{message}; not pushed, still watching",
                           getattr(exc, "hint", None) or
                           "fix the file; the next save is picked up")
            return False
        old = self._published_env()
        for gone in self.env.adopt(env, sources):
            self.publisher.forget(gone)
        self.loop.restart()
        for src in self.sources:
            if not src.snap.entries:
                src.snap.full_scan()
        diff = runtime_env_diff(old, self._published_env())
        if diff:
            self.on_notice("env", "runtime_env changed:\n" + diff,
                           "workers will rebuild the environment on the next job")
        names = sorted(os.path.basename(p) for p in paths if is_dependency_file(p))
        if names:
            self.on_notice("env", f"dependency file changed: {', '.join(names)}",
                           "workers will rebuild the environment (pip/uv/conda) on the next job")
        return True

    def prepare(self, paths: set[str]) -> None:
        """While a batch gathers: confirm its paths so far and let the publisher work ahead
        (build the zips they lead to), so that what is left when the quiet period ends is the
        upload. A few paths only (an edit, a save); anything odd (the runtime_env, an error) is
        left to the batch."""
        if (len(paths) > PREPARE_MAX_PATHS or not self.sources
                or any(self.env.is_env_path(p) for p in paths)):
            return
        try:
            for src in self.sources:  # folded one by one: what is applied is reported
                self._early = self._early.then(src.snap.update(paths))
            for src in self.sources:
                self.publisher.prepare(src)
        except (RtenvError, OSError):
            return  # e.g. a file still being written: the batch confirms it again

    def handle_batch(self, paths: set[str], trigger: str = "change") -> PushEvent | None:
        start = time.perf_counter()
        early, self._early = self._early, Change()
        env_paths = {p for p in paths if self.env.is_env_path(p)}
        if env_paths and self.env.env_file is not None:
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
        if change.ignore_rules_changed:
            self.loop.refresh()  # which directories are packaged may have changed
        if not change and trigger != "env" and all(s.pushed == s.snap.uri for s in self.sources):
            self._unpublished = None  # the target holds this version: nothing is left to send
            return None
        rels = tuple(sorted({r for s in self.sources for p in paths
                             if (r := s.snap.relpath(p)) is not None}))
        return self._push_all(change, trigger, rels, start)

    # -- life ----------------------------------------------------------------------------------
    def start(self) -> None:
        self.loop.start()

    def run(self, *, max_pushes: int | None = None) -> None:
        """Block, pushing on changes, until `stop()` (or KeyboardInterrupt in the caller)."""
        try:
            self.loop.run(max_pushes=max_pushes)
        finally:
            self.close()

    def stop(self) -> None:
        self.loop.stop()

    def finish_commands(self) -> int | None:
        """Wait for the --on-change command (`--once`): its exit status, None when none ran."""
        return self.on_change.wait() if self.on_change is not None else None

    def close(self) -> None:
        if self.on_change is not None:  # a command still running is stopped (oncommand.py)
            self.on_change.close()
            self.on_change = None
        if self.hold_s and self.pinned:
            # the last versions stay as long as after a one-shot push (best effort: the
            # target may be gone)
            with contextlib.suppress(RtenvError, OSError):
                for src in self.sources:
                    if src.pushed is not None:
                        self.target.exists(src.pushed, pin_s=PIN_SECONDS)  # type: ignore[call-arg]
            self.pinned = {}
        self.loop.close()
        self.publisher.close(self.sources)
        if self._nodes is not None:
            self._nodes.kv.close()
        if self._own_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)


@dataclass
class _Nodes:
    """What the watch last knew of the cluster's nodes (see "Nodes")."""

    kv: Any  # a RayKV on a connection of its own
    last: Any  # trees.cluster.Readiness
    checked: float = 0.0


def _nodes_check(target: Target, via: str, kv: Any) -> _Nodes | None:
    """Where the path is re-checked (`--via auto` to a Ray cluster whose GCS answers here): a
    connection of its own to the KV (`kv`: the one the path was chosen by, if the tree path);
    the first check compares the cluster with what the path was chosen by."""
    from rtenv_cli.core.transport.ray_dashboard import RayDashboardTarget
    from rtenv_cli.core.transport.ray_gcs import RayGcsTarget
    from rtenv_cli.core.transport.ray_kv import RayKV
    from rtenv_cli.core.trees.cluster import Readiness

    if via != "auto":
        return None
    if kv is not None:
        mine = kv.fork()
    elif isinstance(target, RayGcsTarget):
        mine = RayKV(target.fork())
    elif isinstance(target, RayDashboardTarget):
        try:  # the zip path with every node known (the GCS answers): it can change
            mine = RayKV.through_dashboard(target.url, target.env, target.token)
        except (RtenvError, OSError):  # no route to its GCS: the zip path for good
            return None
    else:
        return None
    return _Nodes(mine, Readiness({}, ()), time.monotonic())


def _kept(uris: list[str], current: str) -> list[str]:
    """`uris` with `current` as the newest, the KEEP_VERSIONS newest kept."""
    return [*(u for u in uris if u != current), current][-KEEP_VERSIONS:]
