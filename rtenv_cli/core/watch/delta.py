"""Client side of the per-file delta protocol (manifest -> missing blobs -> PUT -> commit).

Works with any target exposing `missing_blobs(manifest)`, `put_blob(sha256, path)` and
`commit_manifest(manifest)`: the agent over HTTP (`AgentTarget`) and the embedded store
(`LocalStoreTarget`, same calls through the Store API). The server verifies every blob's sha256
and the assembled package's Ray URI, so a file edited after it was hashed is refused there (a
ContentChanged here) instead of being published under a URI that does not describe it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import RtenvError
from rtenv_cli.core.watch.snapshot import Snapshot
from rtenv_cli.core.watch.zipcache import ContentChanged

_CHUNK = 1 << 20


@dataclass(frozen=True)
class DeltaResult:
    uri: str
    blobs_sent: int
    bytes_sent: int  # blob bytes plus the manifest JSON (what crossed the wire, roughly)
    zip_bytes: int | None


def supports_delta(target: Any) -> bool:
    return all(callable(getattr(target, n, None))
               for n in ("missing_blobs", "put_blob", "commit_manifest"))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def push_delta(snap: Snapshot, target: Any) -> DeltaResult:
    import json

    manifest = snap.manifest()
    manifest_bytes = len(json.dumps(manifest))
    missing = target.missing_blobs(manifest)
    by_sha = {e.sha256: e for e in snap.files()}
    sent = 0
    for sha in missing:
        entry = by_sha.get(sha)
        if entry is None:
            raise RtenvError(f"the target asked for blob {sha[:12]}… that is not in the manifest")
        path = snap.root / entry.relpath
        try:
            target.put_blob(sha, path)
        except RtenvError as exc:
            # The store refuses a blob whose bytes do not hash to `sha`: the file was edited
            # after the snapshot read it. Say so precisely rather than surfacing a checksum error.
            try:
                now = _sha256(path)
            except OSError:
                raise ContentChanged(entry.relpath) from exc
            if now != sha:
                raise ContentChanged(entry.relpath) from exc
            raise
        sent += entry.size
    result = target.commit_manifest(manifest)
    return DeltaResult(str(result.get("uri", snap.uri)), len(missing),
                       sent + 2 * manifest_bytes, result.get("zip_bytes"))
