"""Publish a tree to a cluster's KV (see manifest.py for the keys): the contents the cluster
lacks, packed, then the manifest, last.

What the cluster has is learnt from one prefix listing of the pack indexes (`x:`), each index
fetched once and kept under `$RTENV_HOME/trees/idx/` (a pack's id is the sha256 of its bytes, so
an index never changes). A content is sent only when no pack of the cluster holds it; small
files are packed into PACK_BYTES objects (one KV Put each, PARALLEL at a time) and a file above
it goes alone. The manifest goes after every pack it names, so a pusher killed at any point
leaves packs no manifest names (the gc collects them after its grace period), never a manifest
naming missing contents. It is written as a delta against the last manifest this home pushed
for the same source, when the cluster still has that one (a one-file edit: the file and a
manifest of changes, not the tree).

`publish_tree` takes a file list (from a scan or a watch's snapshot) and returns what it sent.
A watch passes a `TreeState` it keeps per source: what the cluster has and the last manifest stay
in memory between saves (no listing, no index or manifest read back, the last manifest saved
to the home once, by `TreeState.save`), so a save costs its change, not a re-read of the tree's
records.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import PackagingError
from rtenv_cli.core.transport.ray_kv import RayKV
from rtenv_cli.core.trees.manifest import (
    MAX_DEPTH,
    FileEntry,
    Manifest,
    decode,
    decode_index,
    dump_local,
    encode_index,
    load_local,
)

# Packs are small for the GCS's memory, not for speed: the gcs_server (under the jemalloc Ray
# preloads) receives each Put whole into buffers it then frees to arenas that keep freed pages
# until later traffic ticks their 10 s decay, so what it holds beyond the stored bytes grows
# with the bytes in flight, PACK_BYTES x PARALLEL (benchmarks/results/trees.json: the GCS
# memory rows, and their ablation at 4 MiB).
PACK_BYTES = 512 << 10
PARALLEL = 4
# A pack of this many bytes or more (half a full one) is spooled to a temporary file as it is
# read and sent from there by sendfile (RayKV.put_file); smaller ones (a re-push's edits) go in
# memory. SPOOL False: every pack in memory, through h2's framing, for the ablation rows, e.g.
# cold.json: "ablation: tree push with in-memory puts, 10k files/200 MB random".
SPOOL_BYTES = PACK_BYTES // 2
SPOOL = True


@dataclass(frozen=True)
class SourceFile:
    """One file of a tree: its path in the tree, where to read it, and what it should be."""

    path: str
    fspath: str
    mode: int
    size: int
    digest: str  # sha256 hex


@dataclass(frozen=True)
class PublishResult:
    manifest_id: str
    uri: str
    file_count: int
    total_bytes: int
    files_sent: int
    packs_sent: int
    content_bytes_sent: int
    manifest_bytes: int  # 0 when the cluster had the manifest already
    delta: bool  # the manifest was written as a delta against an earlier one

    @property
    def bytes_sent(self) -> int:
        return self.content_bytes_sent + self.manifest_bytes

    def to_dict(self) -> dict[str, Any]:
        return {"manifest": self.manifest_id, "uri": self.uri, "file_count": self.file_count,
                "total_bytes": self.total_bytes, "files_sent": self.files_sent,
                "packs_sent": self.packs_sent, "bytes_sent": self.bytes_sent,
                "manifest_bytes": self.manifest_bytes, "delta": self.delta}


@dataclass
class TreeState:
    """What a watch keeps between publishes of one source (see the module doc)."""

    have: dict[str, tuple[str, int, int]] | None = None  # content -> (pack, offset, size)
    last: Manifest | None = None  # the last manifest published, and its chain's depth
    depth: int | None = None
    saved: bool = True  # `last` is in the home (the base of a one-shot push's delta)
    entries: dict[str, FileEntry] = field(default_factory=dict)  # reused while unchanged

    def save(self, cache: Path | None = None) -> None:
        """Keep the last manifest in the home, as a one-shot push does after each push."""
        if self.last is not None and not self.saved:
            _save_full(cache if cache is not None else state_dir(), self.last, self.depth)
            self.saved = True


class ContentChanged(PackagingError):
    """A file changed between its hashing and its upload."""


def state_dir() -> Path:
    from rtenv_cli.core.paths import rtenv_home

    return rtenv_home() / "trees"


def files_of_scan(scan: Any, digests: Mapping[str, tuple[bytes, str | None]], kind: str
                  ) -> tuple[list[SourceFile], dict[str, int]]:
    """(files, empty dirs -> mode) of a packaging scan, at the paths Ray's zip gives them: a
    py_module directory's under its name, a single-file module as its name."""
    prefix = "" if kind == "working_dir" or scan.single_file else scan.root.name + "/"
    files, dirs = [], {}
    for e in scan.entries:
        if e.special or not e.in_zip:
            continue
        path = prefix + e.relpath if e.relpath != "." else prefix.rstrip("/")
        if e.is_dir:
            if path:  # an empty working_dir root is the tree itself
                dirs[path] = e.mode & 0o777
            continue
        digest = digests[e.relpath][1]
        assert digest is not None  # noqa: S101 - digest_entries gives every file a sha256
        files.append(SourceFile(path, e.fspath, e.mode & 0o777, e.size, digest))
    return files, dirs


def _cluster_contents(kv: RayKV, cache: Path) -> dict[str, tuple[str, int, int]]:
    """sha256 -> (pack, offset, size) of every content in the cluster's packs."""
    out: dict[str, tuple[str, int, int]] = {}
    ids = [k.removeprefix("x:") for k in kv.keys("x:")]
    want = [p for p in ids if not (cache / "idx" / p).is_file()]
    if want:
        (cache / "idx").mkdir(parents=True, exist_ok=True)
        for start in range(0, len(want), 64):
            for key, raw in kv.multi_get([f"x:{p}" for p in want[start:start + 64]]).items():
                from rtenv_cli.core.fsutil import atomic_write_bytes

                atomic_write_bytes(cache / "idx" / key.removeprefix("x:"), raw)
    for pack in ids:
        try:
            _t, files = decode_index((cache / "idx" / pack).read_bytes())
        except OSError:
            continue  # deleted by a gc since the listing
        for digest, offset, size in files:
            out.setdefault(digest, (pack, offset, size))
    return out


def _packs(missing: Sequence[SourceFile]) -> list[list[SourceFile]]:
    out: list[list[SourceFile]] = []
    cur: list[SourceFile] = []
    size = 0
    for f in sorted(missing, key=lambda f: f.path):
        if f.size >= PACK_BYTES:
            out.append([f])
            continue
        if size + f.size > PACK_BYTES and cur:
            out.append(cur)
            cur, size = [], 0
        cur.append(f)
        size += f.size
    if cur:
        out.append(cur)
    return out


def _read(f: SourceFile) -> bytes:
    try:
        with open(f.fspath, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise PackagingError(f"cannot read {f.fspath}: {exc.strerror}", path=f.fspath,
                             hint="fix its permissions or exclude it") from exc
    if hashlib.sha256(data).hexdigest() != f.digest:
        raise ContentChanged(f"{f.fspath} changed while it was being pushed", path=f.fspath,
                             hint="push again once the file is saved")
    return data


def _send_pack(kv: RayKV, files: list[SourceFile], now: float
               ) -> tuple[str, list[tuple[str, int, int]], int]:
    """Put one pack (spooled through a file when large: SPOOL), then its index; (pack id, its
    index, bytes sent)."""
    import tempfile

    parts, index, offset = [], [], 0
    whole = hashlib.sha256()
    spool = None
    if SPOOL and sum(f.size for f in files) >= SPOOL_BYTES:
        spool = tempfile.NamedTemporaryFile(prefix="rtenv-pack-")  # noqa: SIM115 - closed below
    try:
        for f in files:
            data = _read(f)
            whole.update(data)
            if spool is not None:
                spool.write(data)
            else:
                parts.append(data)
            index.append((f.digest, offset, len(data)))
            offset += len(data)
        pack = whole.hexdigest()[:40]
        if spool is not None:
            spool.flush()
            kv.put_file(f"p:{pack}", Path(spool.name), offset)
        else:
            kv.put(f"p:{pack}", b"".join(parts))
    finally:
        if spool is not None:
            spool.close()
    raw_index = encode_index(index, now)
    kv.put(f"x:{pack}", raw_index)
    return pack, index, offset + len(raw_index)


def _last_key(address: str, label: str, kind: str) -> str:
    return hashlib.sha256(json.dumps([address, label, kind]).encode()).hexdigest()[:32]


def _load_full(cache: Path, ident: str) -> tuple[Manifest, int | None] | None:
    """A manifest this home pushed (or found), and the depth of its chain when it wrote it."""
    try:
        return load_local((cache / "man" / ident).read_bytes())
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def _save_full(cache: Path, m: Manifest, depth: int | None) -> None:
    from rtenv_cli.core.fsutil import atomic_write_bytes

    (cache / "man").mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(cache / "man" / m.id, dump_local(m, depth))


def _depth(kv: RayKV, ident: str) -> int:
    raw = kv.get(f"m:{ident}")
    return int(decode(raw).get("depth", 0)) if raw else MAX_DEPTH


def _send_missing(kv: RayKV, missing: list[SourceFile], have: dict[str, tuple[str, int, int]],
                  now: float, on_progress: Callable[[int], None] | None
                  ) -> tuple[int, int, int]:
    """Pack and put `missing`, PARALLEL at a time; (bytes, files, packs) sent. `have` learns
    where each content went."""
    import queue

    plan = _packs(missing)
    if not plan:
        return 0, 0, 0
    conns: queue.SimpleQueue[RayKV] = queue.SimpleQueue()
    opened = [kv.fork() for _ in range(min(PARALLEL, len(plan)))]
    for c in opened:
        conns.put(c)

    def send(group: list[SourceFile]) -> tuple[str, list[tuple[str, int, int]], int]:
        conn = conns.get()  # one call at a time per connection
        try:
            return _send_pack(conn, group, now)
        finally:
            conns.put(conn)

    sent = files = 0
    try:
        with ThreadPoolExecutor(len(opened)) as pool:
            for group, (pack, index, nbytes) in zip(plan, pool.map(send, plan), strict=True):
                for digest, offset, size in index:
                    have[digest] = (pack, offset, size)
                sent += nbytes
                files += len(group)
                if on_progress:
                    on_progress(sum(f.size for f in group))
    finally:
        for c in opened:
            c.close()
    return sent, files, len(plan)


def _write_manifest(kv: RayKV, manifest: Manifest, base_id: str | None, cache: Path,
                    state: TreeState | None = None) -> tuple[int, bool, int | None]:
    """Put `manifest` (a delta against `base_id` when this home, or `state`, has that one and
    the chain is short); (bytes sent, delta, depth). Nothing when the cluster has it already."""
    ident = manifest.id
    if kv.exists(f"m:{ident}"):
        return 0, False, None
    depth: int | None = None
    found: tuple[Manifest, int | None] | None = None
    if state is not None and state.last is not None and state.last.id == base_id:
        found = state.last, state.depth
    elif base_id and base_id != ident:
        found = _load_full(cache, base_id)
    if found is not None and base_id and kv.exists(f"m:{base_id}"):
        base_depth = found[1]
        depth = (base_depth if base_depth is not None else _depth(kv, base_id)) + 1
    if found is not None and depth is not None and depth <= MAX_DEPTH:
        value, delta = manifest.encode(found[0], base_id, depth), True
    else:
        value, delta, depth = manifest.encode(), False, 0
    kv.put(f"m:{ident}", value)
    lost = manifest.packs - {k.removeprefix("x:") for k in kv.keys("x:")}
    if lost:  # a gc took a pack this push reused (trees/gc.py): never leave that manifest
        kv.delete(f"m:{ident}")
        raise PackagingError(f"{len(lost)} packs this push reused were collected while it ran",
                             hint="push again")
    return len(value), delta, depth


def publish_tree(kv: RayKV, kind: str, files: Iterable[SourceFile], dirs: Mapping[str, int],
                 *, label: str, on_progress: Callable[[int], None] | None = None,
                 cache: Path | None = None, state: TreeState | None = None) -> PublishResult:
    """Publish the tree (`files`, empty `dirs`) of source `label` (its path: the base of the
    next push's delta) to `kv`'s cluster; see the module doc (`state`: a watch's)."""
    from rtenv_cli.core.fsutil import atomic_write_text

    cache = cache if cache is not None else state_dir()
    files = list(files)
    now = time.time()
    have = state.have if state is not None and state.have is not None else \
        _cluster_contents(kv, cache)
    missing: dict[str, SourceFile] = {}
    for f in files:
        if f.digest not in have:
            missing.setdefault(f.digest, f)
    sent, files_sent, packs_sent = _send_missing(kv, list(missing.values()), have, now,
                                                 on_progress)
    manifest = Manifest(kind, _entries(files, have, state.entries if state else {}), dict(dirs))
    ident = manifest.id
    last_file = cache / "last" / _last_key(kv.address, label, kind)
    kv.put(f"t:{ident}", str(now).encode())  # the grace period first: gc never sees m: alone
    if state is not None and state.last is not None:
        base_id: str | None = state.last.id
    else:
        base_id = last_file.read_text().strip() if last_file.is_file() else None
    manifest_bytes, delta, depth = _write_manifest(kv, manifest, base_id, cache, state)
    if state is None:
        _save_full(cache, manifest, depth)
    else:
        state.have, state.entries = have, manifest.files
        state.last, state.depth, state.saved = manifest, depth, False
    last_file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(last_file, ident)
    return PublishResult(ident, manifest.uri, len(files), manifest.total_bytes, files_sent,
                         packs_sent, sent, manifest_bytes, delta)


def _entries(files: list[SourceFile], have: Mapping[str, tuple[str, int, int]],
             before: Mapping[str, FileEntry]) -> dict[str, FileEntry]:
    """The manifest's entries, each one of `before` when unchanged (compared by identity)."""
    out = {}
    for f in files:
        pack, offset, _size = have[f.digest]
        e = before.get(f.path)
        if e is None or (e.mode, e.size, e.digest, e.pack, e.offset) != (
                f.mode, f.size, f.digest, pack, offset):
            e = FileEntry(f.path, f.mode, f.size, f.digest, pack, offset)
        out[f.path] = e
    return out


def publish_scan(kv: RayKV, scan: Any, digests: Mapping[str, tuple[bytes, str | None]],
                 kind: str, *, on_progress: Callable[[int], None] | None = None
                 ) -> PublishResult:
    """`publish_tree` of a packaging scan (push's one source discovery)."""
    files, dirs = files_of_scan(scan, digests, kind)
    return publish_tree(kv, kind, files, dirs, label=os.fspath(scan.root),
                        on_progress=on_progress)
