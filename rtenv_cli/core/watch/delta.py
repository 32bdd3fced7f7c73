"""Client side of the per-file delta protocol (manifest -> missing blobs -> PUT -> commit).

Works with any `DeltaTarget` (transport/base.py): the agent over HTTP (`AgentTarget`) and the
embedded store (`LocalStoreTarget`, same calls through the Store API). The server verifies every
blob's sha256 and the assembled package's Ray URI, so a file edited after it was hashed is
refused there (a ContentChanged here) instead of being published under a URI that does not
describe it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import RtenvError
from rtenv_cli.core.transport.base import DeltaTarget
from rtenv_cli.core.watch.snapshot import EntryState, Snapshot
from rtenv_cli.core.watch.zipcache import ContentChanged

_CHUNK = 1 << 20


@dataclass(frozen=True)
class DeltaResult:
    uri: str
    blobs_sent: int
    bytes_sent: int  # blob bytes plus the manifest JSON (what crossed the wire, roughly)
    package_bytes: int | None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def send_blobs(snap: Snapshot, target: DeltaTarget, shas: Iterable[str],
               files: Mapping[str, str] | None = None) -> tuple[int, int]:
    """Upload the blobs `shas` of `snap` (one batch where the target takes batches); return
    (count, bytes). `files`: sha256 -> path of a file that has it, where the caller knows
    (else every file of the snapshot is looked at). A file edited after the snapshot read it
    is a ContentChanged."""
    entries = _blob_entries(snap, shas, files)
    if entries:
        _sending(snap, entries, lambda: target.put_blobs(
            [(sha, snap.root / e.relpath) for sha, e in entries]))
    return len(entries), sum(e.size for _sha, e in entries)


# Whether a save's blobs and manifest go in one request (target.publish), not two: bench_watch's
# ablation rows turn it off.
ONE_REQUEST = True


def publish(snap: Snapshot, target: DeltaTarget, manifest: Mapping[str, Any],
            shas: Iterable[str], files: Mapping[str, str]) -> int:
    """The blobs `shas` (`files`: as for send_blobs) and the commit of `manifest`, in one
    request where ONE_REQUEST; the blob bytes sent."""
    if not ONE_REQUEST:
        sent = send_blobs(snap, target, shas, files)[1]
        target.commit_manifest(manifest)
        return sent
    entries = _blob_entries(snap, shas, files)
    _sending(snap, entries, lambda: target.publish(
        manifest, [(sha, snap.root / e.relpath) for sha, e in entries]))
    return sum(e.size for _sha, e in entries)


def _blob_entries(snap: Snapshot, shas: Iterable[str], files: Mapping[str, str] | None
                  ) -> list[tuple[str, EntryState]]:
    by_rel = files if files is not None else {e.sha256 or "": e.relpath for e in snap.files()}
    entries = []
    for sha in dict.fromkeys(shas):
        entry = snap.entries.get(by_rel.get(sha, ""))
        if entry is None or entry.sha256 != sha:
            raise RtenvError(f"the target asked for blob {sha[:12]}… that is not in the manifest")
        entries.append((sha, entry))
    return entries


def _sending(snap: Snapshot, entries: list[tuple[str, EntryState]],
             send: Callable[[], object]) -> None:
    """`send()` the blobs `entries`; a failure because one of their files changed since the
    snapshot read it is a ContentChanged naming it."""
    try:
        send()
    except (RtenvError, OSError) as exc:
        # The store refuses a blob whose bytes do not hash to `sha`: the file was edited after
        # the snapshot read it; or it is gone (deleted, renamed) before it could be read. Say
        # so precisely rather than surfacing a checksum error or an OSError.
        for sha, e in entries:
            try:
                now = _sha256(snap.root / e.relpath)
            except OSError:
                raise ContentChanged(e.relpath) from exc
            if now != sha:
                raise ContentChanged(e.relpath) from exc
        raise


@dataclass
class Held:
    """What a delta target holds of one source: the manifest last committed, as path ->
    entry, and the paths of its directory entries."""

    uri: str
    entries: dict[str, dict[str, Any]]
    dirs: set[str]

    @classmethod
    def of(cls, manifest: Mapping[str, Any]) -> Held:
        entries = {e["path"]: e for e in manifest["entries"]}
        return cls(str(manifest["uri"]), entries, {p for p, e in entries.items() if e["is_dir"]})

    def apply(self, uri: str, upsert: list[dict[str, Any]], remove: list[str]) -> None:
        """The target committed `uri` as these changes to the manifest held."""
        for path in remove:
            self.entries.pop(path, None)
            self.dirs.discard(path)
        for entry in upsert:
            self.entries[entry["path"]] = entry
            (self.dirs.add if entry["is_dir"] else self.dirs.discard)(entry["path"])
        self.uri = uri


# Whether a save's manifest is worked out from the paths it touched (`changes`), not from the
# whole tree's (`relative_manifest`): benchmarks/bench_watch.py's ablation rows turn it off.
INCREMENTAL = True


def changes(snap: Snapshot, held: Held) -> tuple[list[dict[str, Any]], list[str]]:
    """(entries to upsert, paths to remove) that turn `held` into `snap.manifest()` now: only
    the paths the snapshot touched since `held` was committed (`Snapshot.touched`) and the
    directory entries (those of empty directories: few) are looked at, never every file."""
    dirs = {e["path"]: e for e in snap.dir_entries()}
    upsert, remove = [], []
    for path in sorted(snap.touched | held.dirs | dirs.keys()):
        new = dirs.get(path) or snap.file_entry(path)
        old = held.entries.get(path)
        if new is None:
            if old is not None:
                remove.append(path)
        elif new is not old and new != old:
            upsert.append(new)
    return upsert, remove


def relative_manifest(base: Mapping[str, Any], manifest: Mapping[str, Any]) -> dict[str, Any]:
    """`manifest` as changes to `base` (both whole manifests): the agent's `base` form."""
    old = {e["path"]: e for e in base["entries"]}
    new = {e["path"]: e for e in manifest["entries"]}
    upsert = []
    for path, entry in new.items():
        before = old.get(path)
        if before is not entry and before != entry:  # identity first: Snapshot reuses dicts
            upsert.append(entry)
    return {"uri": manifest["uri"], "kind": manifest["kind"], "name": manifest["name"],
            "base": base["uri"], "upsert": upsert,
            "remove": [p for p in old if p not in new]}


def push_delta(snap: Snapshot, target: DeltaTarget,
               manifest: Mapping[str, Any] | None = None) -> DeltaResult:
    """The whole protocol: the manifest (`snap.manifest()` unless the caller has it), the
    blobs the target lacks, the commit."""
    import json

    manifest = dict(manifest) if manifest is not None else snap.manifest()
    manifest_bytes = len(json.dumps(manifest))
    missing = target.missing_blobs(manifest)
    count, sent = send_blobs(snap, target, missing)
    result = target.commit_manifest(manifest)
    return DeltaResult(str(result.get("uri", snap.uri)), count,
                       sent + 2 * manifest_bytes, result.get("package_bytes"))
