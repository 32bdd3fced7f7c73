"""How a watch publishes a source's current version to its target: a `DeltaPublisher` sends the
changed files and a manifest (an rtenv agent, the embedded store); a `TreePublisher` does the
same into a Ray cluster's KV where every node loads rtenv's plugin (trees/publish.py, the writer
`rtenv push` uses on the tree path); a `ZipPublisher` sends whole zips (Ray otherwise, file://),
spliced from the last one, prepared during the quiet period and, where the target can, uploaded
early (watch/early.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from rtenv_cli.core.errors import RtenvError
from rtenv_cli.core.transport.base import DeltaTarget, ForkingTarget, Target
from rtenv_cli.core.watch import delta as delta_mod
from rtenv_cli.core.watch.early import EarlyUploader
from rtenv_cli.core.watch.snapshot import EntryState, Snapshot
from rtenv_cli.core.watch.sources import Source
from rtenv_cli.core.watch.zipcache import ContentChanged, build_zip, discard

if TYPE_CHECKING:
    from rtenv_cli.core.transport.ray_kv import RayKV
    from rtenv_cli.core.trees.publish import SourceFile, TreeState


class Publisher(Protocol):
    def push(self, src: Source) -> int:
        """Make the target hold `src.snap`'s current version; the bytes sent."""
        ...

    def prepare(self, src: Source) -> None:
        """While a batch gathers: work ahead for `src.snap`'s current version."""
        ...

    def forget(self, src: Source) -> None:
        """`src` is no longer watched: let go of what is kept for it."""
        ...

    def close(self, sources: list[Source]) -> None: ...


def publisher_for(target: Target, work_dir: Path, *, early_upload: bool = True,
                  pin_s: int | None = None, kv: RayKV | None = None) -> Publisher:
    """`pin_s`: how long a published version is pinned, where the target lets the pusher
    choose (`chooses_pin`); else the target's own (Ray's dashboard: 10 minutes). `kv`: the
    cluster's KV when the watch takes the tree path (push.tree_path decides)."""
    if kv is not None:
        return TreePublisher(kv)
    if isinstance(target, DeltaTarget):
        return DeltaPublisher(target)
    early = EarlyUploader(target) if early_upload and isinstance(target, ForkingTarget) else None
    return ZipPublisher(target, work_dir, early, pin_s if chooses_pin(target) else None)


def chooses_pin(target: Target) -> bool:
    """Whether the pusher chooses how long `exists` pins a package: a Ray GCS takes the
    length with each PinRuntimeEnvURI; the dashboard's GET pins for its own setting."""
    from rtenv_cli.core.transport.ray_gcs import RayGcsTarget

    return isinstance(target, RayGcsTarget)


class DeltaPublisher:
    def __init__(self, target: DeltaTarget) -> None:
        self.target = target

    def push(self, src: Source) -> int:
        snap = src.snap
        held = src.last_manifest
        if src.known_blobs and held is not None:
            # Blobs committed earlier in this session are on the target: send only new ones,
            # then the manifest as changes to the last one (bytes and work in proportion to
            # the edit: the paths the snapshot touched since, delta.changes). A gc in between
            # makes the commit fail with missing blobs, an agent that lost the base says so:
            # the full protocol below then recovers.
            if delta_mod.INCREMENTAL:
                upsert, remove = delta_mod.changes(snap, held)
            else:
                full = delta_mod.relative_manifest({"uri": held.uri,
                                                    "entries": list(held.entries.values())},
                                                   snap.manifest())
                upsert, remove = full["upsert"], full["remove"]
            files = {e["sha256"]: e["path"] for e in upsert if e["sha256"]}
            body = {"uri": snap.uri, "kind": snap.kind, "name": snap.name,
                    "base": held.uri, "upsert": upsert, "remove": remove}
            try:  # the blobs and the commit in one request (delta.publish)
                sent = delta_mod.publish(snap, self.target, body,
                                         [s for s in files if s not in src.known_blobs], files)
                # grows over the session: reverting an edit sends no blob at all
                src.known_blobs |= files.keys()
                held.apply(snap.uri, upsert, remove)
                snap.touched.clear()
                return sent + len(json.dumps(body))
            except ContentChanged:
                src.known_blobs = set()
                raise
            except RtenvError:
                src.known_blobs = set()
        manifest = snap.manifest()
        result = delta_mod.push_delta(snap, self.target, manifest)
        src.known_blobs = {e.sha256 for e in snap.files() if e.sha256}
        src.last_manifest = delta_mod.Held.of(manifest)
        snap.touched.clear()
        return result.bytes_sent

    def prepare(self, src: Source) -> None:
        """Nothing: a delta push is a few small calls once the batch is confirmed."""

    def forget(self, src: Source) -> None:
        """Nothing kept locally."""

    def close(self, sources: list[Source]) -> None:
        """Nothing kept locally."""


def tree_files(snap: Snapshot, memo: dict[str, tuple[EntryState, SourceFile]] | None = None
               ) -> tuple[list[SourceFile], dict[str, int]]:
    """(files, empty dirs -> mode) of a snapshot at the paths Ray's zip gives them, as
    trees.publish.files_of_scan gives them for `rtenv push`: one tree, one manifest id. `memo`
    (kept by the caller) reuses a file's record while its entry is unchanged."""
    from rtenv_cli.core.packaging.build import is_empty_dir
    from rtenv_cli.core.trees.publish import SourceFile

    prefix = snap.root.name + "/" if snap.kind == "py_module" else ""
    root = str(snap.root) + os.sep
    old = memo if memo is not None else {}
    fresh: dict[str, tuple[EntryState, SourceFile]] = {}
    for e in snap.files():
        hit = old.get(e.relpath)
        if hit is None or hit[0] is not e:
            hit = (e, SourceFile(prefix + e.relpath, root + e.relpath, e.mode & 0o777, e.size,
                                 e.sha256 or ""))
        fresh[e.relpath] = hit
    if memo is not None:
        memo.clear()
        memo.update(fresh)
    dirs = {}
    for rel in snap.leaf_dirs():  # Ray zips a directory only when it is empty on disk
        path = snap.root / rel
        try:
            mode, empty = path.stat().st_mode, is_empty_dir(path)
        except OSError:
            continue
        name = prefix + rel if rel != "." else prefix.rstrip("/")
        if empty and name:  # an empty working_dir root is the tree itself
            dirs[name] = mode & 0o777
    return [f for _e, f in fresh.values()], dirs


class TreePublisher:
    """A save as a tree delta: the contents the cluster lacks and a manifest of changes against
    the last one published for the source (trees/publish.py, with a `TreeState` per source so
    that a save does not re-read the tree's records). Nothing is pinned: a tree is kept for the
    gc's grace period after its push (`t:` key), which `touch` renews while the watch runs and
    once more when it ends."""

    def __init__(self, kv: RayKV) -> None:
        self.kv = kv
        self._memo: dict[str, dict[str, tuple[EntryState, SourceFile]]] = {}
        self._state: dict[str, TreeState] = {}

    def push(self, src: Source) -> int:
        from rtenv_cli.core.trees import publish as trees

        files, dirs = tree_files(src.snap, self._memo.setdefault(src.label, {}))
        for attempt in range(2):
            state = self._state.setdefault(src.label, trees.TreeState())
            try:
                result = trees.publish_tree(self.kv, src.snap.kind, files, dirs,
                                            label=str(src.snap.root), state=state)
                break
            except trees.ContentChanged as exc:  # re-snapshot the file (session.py)
                raise ContentChanged(src.snap.relpath(exc.path or "") or ".") from exc
            except RtenvError:  # e.g. a gc took a pack the state knew: learn the cluster again
                self._state.pop(src.label, None)
                if attempt or state.have is None:
                    raise
        src.tree_uri = result.uri
        return result.bytes_sent

    def touch(self, sources: list[Source]) -> bool:
        """Renew the grace period of each source's current tree; True when one is gone from
        the cluster (a `cache purge`): it is pushed again."""
        import time

        from rtenv_cli.core.trees.manifest import SCHEME

        lost = False
        for src in sources:
            if src.tree_uri is None:
                continue
            ident = src.tree_uri.removeprefix(SCHEME)
            self.kv.put(f"t:{ident}", str(time.time()).encode())
            if not self.kv.exists(f"m:{ident}"):
                src.pushed = src.tree_uri = None
                lost = True
        return lost

    def prepare(self, src: Source) -> None:
        """Nothing: the changed files are read once the batch is confirmed."""

    def forget(self, src: Source) -> None:
        src.tree_uri = None
        self._memo.pop(src.label, None)
        state = self._state.pop(src.label, None)
        if state is not None:
            state.save()

    def close(self, sources: list[Source]) -> None:
        """The last trees stay for the gc's grace period from now, as after `rtenv push`."""
        import contextlib

        with contextlib.suppress(RtenvError, OSError):  # best effort: the cluster may be gone
            self.touch(sources)
        for state in self._state.values():  # the next `rtenv push` sends a delta against it
            with contextlib.suppress(OSError):
                state.save()
        self.kv.close()


class ZipPublisher:
    def __init__(self, target: Target, work_dir: Path, early: EarlyUploader | None,
                 pin_s: int | None = None) -> None:
        self.target, self.work_dir, self.early = target, work_dir, early
        self.pin_s = pin_s

    def _exists(self, uri: str) -> bool:
        """Whether the target holds `uri`, pinning it (for `pin_s` when chosen)."""
        if self.pin_s is None:
            return self.target.exists(uri)
        return bool(self.target.exists(uri, pin_s=self.pin_s))  # type: ignore[call-arg]

    def push(self, src: Source) -> int:
        snap = src.snap
        uri = snap.uri
        prepared, src.prepared = src.prepared, None
        if prepared is not None and prepared.uri != uri:
            discard(prepared, src.last_zip)
            prepared = None
        sent_early = self.early.finish(src.label, uri) if self.early is not None else 0
        if self._exists(uri):  # pins it: from here on it is published (session.py, "Pins")
            if prepared is not None:  # the next edit splices from the newest zip
                discard(src.last_zip, prepared)
                src.last_zip = prepared
            elif src.last_zip is None:  # the next edit splices from it (else: a whole zip)
                src.last_zip = build_zip(snap, self.work_dir, layout=self.target.layout,
                                         limit=self.target.max_upload_bytes)
            return sent_early
        built = prepared or build_zip(snap, self.work_dir, src.last_zip,
                                      layout=self.target.layout,
                                      limit=self.target.max_upload_bytes)
        try:
            self.target.upload(uri, built.path)
        except BaseException:
            discard(built, src.last_zip)
            raise
        discard(src.last_zip, built)
        src.last_zip = built
        return built.zip_bytes

    def prepare(self, src: Source) -> None:
        """Build the zip of `src.snap`'s current version (and start uploading it early) unless
        it is published or prepared already."""
        if src.snap.uri == src.pushed or (src.prepared is not None
                                          and src.prepared.uri == src.snap.uri):
            return
        discard(src.prepared, src.last_zip)
        src.prepared = None
        src.prepared = build_zip(src.snap, self.work_dir, src.last_zip, layout=self.target.layout,
                                 limit=self.target.max_upload_bytes)
        if self.early is not None:
            self.early.start(src.label, src.prepared)

    def forget(self, src: Source) -> None:
        discard(src.prepared)
        discard(src.last_zip)
        if self.early is not None:
            self.early.drop(src.label)

    def close(self, sources: list[Source]) -> None:
        if self.early is not None:
            self.early.close()
        for src in sources:
            discard(src.prepared)
            discard(src.last_zip)
            src.prepared = src.last_zip = None
