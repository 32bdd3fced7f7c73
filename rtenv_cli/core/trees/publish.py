"""Publish a tree to a cluster's KV (see manifest.py for the keys): the contents the cluster
lacks, packed, then the manifest, last.

What the cluster has is learnt from one prefix listing of the pack indexes (`x:`), each index
fetched once and kept under `$RTENV_HOME/trees/idx/` (a pack's id is the sha256 of its index,
`pack_id`, so an index never changes), and their union kept merged per cluster in `trees/have/`
(read whole while the listing names the same packs; else updated by the packs gone and the packs
new). A
content is sent only when no pack of the cluster holds it; small files are packed into
PACK_BYTES objects (one KV Put each, one at a time) and a file above it goes alone. The
manifest goes after every pack it names, so a pusher killed at any point leaves packs no
manifest names (the gc collects them after its grace period), never a manifest naming missing
contents. It is written as a delta against the last manifest this home pushed for the same
source, when the cluster still has that one (a one-file edit: the file and a manifest of
changes, not the tree).

`publish_tree` takes a file list (from a scan or a watch's snapshot) and returns what it sent.
Its `TreeState` holds the last manifest of the source as records (a file whose mode, size and
content are the base's keeps the base's record: only the others are looked up, and only they
go into the delta) and what the cluster has. A one-shot push loads it from the home
(`trees/base/`, one marshalled file with a checksum: a torn or foreign file reads as no base,
which costs a full manifest, never a wrong one) and saves it after; a watch keeps it in memory
between saves (no listing, no index read back) and saves it once, by `TreeState.save`. The
home's files are caches written by rename without fsync: whatever a crash leaves of them is
either whole or refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from rtenv_cli.core.errors import PackagingError
from rtenv_cli.core.fsutil import read_cache, write_cache
from rtenv_cli.core.transport.ray_kv import RayKV
from rtenv_cli.core.trees.manifest import (
    MAX_DEPTH,
    SCHEME,
    decode,
    decode_index,
    encode_doc,
    encode_index,
    tree_id,
    value_doc,
)

# Packs are small for the GCS's memory, not for speed: the gcs_server (under the jemalloc Ray
# preloads) receives each Put whole into buffers it then frees to arenas that keep freed pages
# until later traffic ticks their 10 s decay, so what it holds beyond the stored bytes grows
# with the Puts in flight and their size, as measured by
# trees.json: "GCS memory growth after a cold push + 20 one-file edits" and its 1 MiB ablation
# (larger packs, or two Puts in flight, held more in earlier runs: README, "The GCS's memory"):
# one Put of PACK_BYTES at a time. Reading the next pack in a thread meanwhile did not pay
# (README: the removed fast paths), so a pack is read, then sent.
PACK_BYTES = 512 << 10
# A file's content is read into its pack and checked to be what the scan hashed by its stat, not
# hashed again (cold.json: "ablation: tree push hashing each file again, 1k files/200 MB
# random", its CPU time): the size, mtime and inode the scan saw, after the read, as the zip
# path checks its members (packaging/build.py) and the digest cache trusts them. A file whose
# ctime is within RACY_NS of the read is hashed again (a write in the same timestamp tick as
# the scan's stat would not show in its stat: git's "racy clean" files; any write or utime
# sets the ctime to now). A file given without its stat (mtime_ns -1: a watch's snapshot, whose
# files are being edited) is always hashed again. A content that slipped through anyway
# (rewritten at the same size with its mtime put back, more than RACY_NS before the push) is
# refused by every node, which checks each content's sha256 before it stores it
# (materialize.py): a build of a tree holding the old content fails, naming it, until a gc
# takes that pack; never a wrong file.
RACY_NS = 2_000_000_000
# The one-shot push's base from the home (`trees/base/`): False ignores it, so every push
# compares the tree with nothing and writes a full manifest; the benchmark's ablation row flips
# it to show what the base buys (benchmarks/results/trees.json: "ablation: re-push in process,
# no base from the home (the tree compared with nothing)").
HOME_BASE = True
# A file of the tree as the manifest has it: FileEntry's fields (path, mode, size, sha256, pack,
# offset) as a plain tuple (marshal stores tuples, not NamedTuples).
Rec = tuple[str, int, int, str, str, int]


class SourceFile(NamedTuple):  # a tuple: 10k of them are built per push
    """One file of a tree: its path in the tree, where to read it, and what it should be."""

    path: str
    fspath: str
    mode: int
    size: int
    digest: str  # sha256 hex
    mtime_ns: int = -1  # the stat the digest was taken at (-1: unknown; see RACY_NS)
    ino: int = 0


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
    """A source's last publish and what the cluster has (see the module doc)."""

    have: dict[str, tuple[str, int, int]] | None = None  # content -> (pack, offset, size)
    alive: set[str] | None = None  # the packs of the last listing (None: `have` trusted)
    last: str | None = None  # the id of the last manifest published for the source
    depth: int | None = None  # its chain's depth (None: unknown, asked of the cluster)
    kind: str = ""
    recs: dict[str, Rec] = field(default_factory=dict)  # its files by path
    dirs: dict[str, int] = field(default_factory=dict)  # its empty directories
    saved: bool = True  # the home has it (the base of the next one-shot push)
    where: Path | None = None  # the home file it is saved to (set by publish_tree)

    def save(self) -> None:
        """Keep the last manifest in the home, as a one-shot push does after each push."""
        if self.where is not None and self.last is not None and not self.saved:
            write_cache(self.where, (self.last, self.kind, self.depth, self.dirs, self.recs))
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
    new = tuple.__new__  # once per file of the tree: NamedTuple's Python-level __new__ skipped
    for rel, fspath, is_dir, size, mode, mtime, ino, in_zip, special in scan.entries:
        if special or not in_zip:
            continue
        path = prefix + rel if rel != "." else prefix.rstrip("/")
        if is_dir:
            if path:  # an empty working_dir root is the tree itself
                dirs[path] = mode & 0o777
            continue
        digest = digests[rel][1]
        assert digest is not None  # noqa: S101 - digest_entries gives every file a sha256
        files.append(new(SourceFile, (path, fspath, mode & 0o777, size, digest, mtime, ino)))
    return files, dirs


def _cluster_contents(kv: RayKV, cache: Path
                      ) -> tuple[dict[str, tuple[str, int, int]], set[str], bool]:
    """(sha256 -> (pack, offset, size) of every content in the cluster's packs, the packs,
    whether that differs from the merged file of the home)."""
    ids = [k.removeprefix("x:") for k in kv.keys("x:")]
    alive = set(ids)
    merged = read_cache(_have_file(cache, kv.address))
    out: dict[str, tuple[str, int, int]] = {}
    known: set[str] = set()
    if isinstance(merged, tuple) and len(merged) == 2:  # noqa: PLR2004 - (packs, contents)
        known, out = set(merged[0]), merged[1]
        if known == alive:
            return out, alive, False
        if known - alive:  # a gc took packs: their contents may lie in others too
            known, out = set(), {}
    new = [p for p in ids if p not in known]
    want = [p for p in new if not (cache / "idx" / p).is_file()]
    if want:
        (cache / "idx").mkdir(parents=True, exist_ok=True)
        for start in range(0, len(want), 64):
            for key, raw in kv.multi_get([f"x:{p}" for p in want[start:start + 64]]).items():
                from rtenv_cli.core.fsutil import atomic_write_bytes

                atomic_write_bytes(cache / "idx" / key.removeprefix("x:"), raw)
    for pack in new:
        try:
            _t, files = decode_index((cache / "idx" / pack).read_bytes())
        except OSError:
            alive.discard(pack)  # deleted by a gc since the listing
            continue
        for digest, offset, size in files:
            out.setdefault(digest, (pack, offset, size))
    return out, alive, True


def _have_file(cache: Path, address: str) -> Path:
    return cache / "have" / hashlib.sha256(address.encode()).hexdigest()[:32]


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


def _read_into(f: SourceFile, buf: memoryview, now_ns: int) -> None:
    """Read `f` into `buf` (exactly its size), checked to be the content its digest names:
    ContentChanged when it is not (see RACY_NS)."""
    try:
        with open(f.fspath, "rb", buffering=0) as fh:
            got = 0
            while got < f.size:  # one read, but for a file beyond a read's 2 GiB limit
                n = fh.readinto(buf[got:])
                if not n:
                    break
                got += n
            st = os.fstat(fh.fileno())
    except OSError as exc:
        raise PackagingError(f"cannot read {f.fspath}: {exc.strerror}", path=f.fspath,
                             hint="fix its permissions or exclude it") from exc
    if got != f.size or st.st_size != f.size or (
            (st.st_mtime_ns, st.st_ino) != (f.mtime_ns, f.ino)
            if f.mtime_ns >= 0 and st.st_ctime_ns < now_ns - RACY_NS else
            hashlib.sha256(buf).hexdigest() != f.digest):
        raise ContentChanged(f"{f.fspath} changed while it was being pushed", path=f.fspath,
                             hint="push again once the file is saved")


def pack_id(index: Sequence[tuple[str, int, int]]) -> str:
    """A pack's id: the sha256 of its index (the contents' digests, in order, and sizes), which
    names its bytes as well as their own sha256 would, without hashing them again."""
    h = hashlib.sha256()
    for digest, _offset, size in index:
        h.update(f"{digest} {size}\n".encode())
    return h.hexdigest()[:40]


def _fill_pack(files: list[SourceFile]) -> tuple[str, list[tuple[str, int, int]], bytearray]:
    """One pack: `files` read into one buffer (checked: `_read_into`); (its id, index, bytes)."""
    index, offset = [], 0
    for f in files:
        index.append((f.digest, offset, f.size))
        offset += f.size
    buf = bytearray(offset)
    view = memoryview(buf)
    now_ns = time.time_ns()
    for f, (_d, at, size) in zip(files, index, strict=True):
        _read_into(f, view[at:at + size], now_ns)
    return pack_id(index), index, buf


def _last_key(address: str, label: str, kind: str) -> str:
    return hashlib.sha256(json.dumps([address, label, kind]).encode()).hexdigest()[:32]


def _load_base(path: Path, kind: str) -> TreeState:
    """The state a one-shot push starts from: the last manifest this home pushed for the
    source (`TreeState.save`), or none."""
    found = read_cache(path) if HOME_BASE else None
    try:
        last, kind_, depth, dirs, recs = found  # type: ignore[misc]
        if kind_ == kind and isinstance(last, str) and isinstance(recs, dict):
            return TreeState(last=last, depth=depth, kind=kind, recs=recs, dirs=dirs)
    except (TypeError, ValueError):
        pass
    return TreeState()


def _depth(kv: RayKV, ident: str) -> int:
    raw = kv.get(f"m:{ident}")
    return int(decode(raw).get("depth", 0)) if raw else MAX_DEPTH


def _send_missing(kv: RayKV, missing: list[SourceFile], have: dict[str, tuple[str, int, int]],
                  now: float, on_progress: Callable[[int], None] | None
                  ) -> tuple[int, int, int]:
    """Pack and put `missing`, one Put at a time (see PACK_BYTES), each pack then its index;
    (bytes, files, packs) sent. `have` learns where each content went."""
    plan = _packs(missing)
    sent = files = 0
    for group in plan:
        pack, index, buf = _fill_pack(group)
        kv.put(f"p:{pack}", buf)
        raw_index = encode_index(index, now)
        kv.put(f"x:{pack}", raw_index)
        for digest, offset, size in index:
            have[digest] = (pack, offset, size)
        sent += len(buf) + len(raw_index)
        files += len(group)
        if on_progress:
            on_progress(len(buf))
    return sent, files, len(plan)


def _write_manifest(kv: RayKV, ident: str, recs: dict[str, Rec], changed: list[str],
                    state: TreeState, *, kind: str, dirs: dict[str, int]
                    ) -> tuple[int, bool, int | None]:
    """Put manifest `ident` (the tree `recs`, `dirs`): a delta against `state`'s last one
    (whose records differ in the paths `changed` and lack the paths gone) when the cluster has
    that one and the chain is short, else whole; (bytes sent, delta, depth). Nothing when the
    cluster has it already."""
    if kv.exists(f"m:{ident}"):
        return 0, False, None
    base_id, depth = state.last, None
    if base_id is not None and base_id != ident and kv.exists(f"m:{base_id}"):
        depth = (state.depth if state.depth is not None else _depth(kv, base_id)) + 1
    if base_id is not None and depth is not None and depth <= MAX_DEPTH:
        doc = value_doc(kind, dirs, [recs[p] for p in changed], base_id=base_id, depth=depth,
                        deleted=sorted(state.recs.keys() - recs.keys()))
        value, delta = encode_doc(doc), True
    else:
        value, delta, depth = encode_doc(value_doc(kind, dirs, recs.values())), False, 0
    kv.put(f"m:{ident}", value)
    lost = {r[4] for r in recs.values()} - {k.removeprefix("x:") for k in kv.keys("x:")}
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
    cache = cache if cache is not None else state_dir()
    files = list(files)
    now = time.time()
    where = cache / "base" / _last_key(kv.address, label, kind)
    oneshot = state is None
    if state is None:
        state = _load_base(where, kind)
    elif state.where is None and state.last is None:  # a watch's first save: the home's base
        home = _load_base(where, kind)
        state.last, state.depth, state.kind = home.last, home.depth, home.kind
        state.recs, state.dirs = home.recs, home.dirs
    state.where = where
    refreshed = state.have is None or oneshot
    if refreshed:
        state.have, state.alive, refreshed = _cluster_contents(kv, cache)
    have = state.have
    assert have is not None  # noqa: S101 - set just above
    base = state.recs if state.last is not None and state.kind == kind else {}
    alive = state.alive
    recs, changed = _compare(files, base, alive)
    missing: dict[str, SourceFile] = {}
    for f in changed:
        if f.digest not in have:
            missing.setdefault(f.digest, f)
    sent, files_sent, packs_sent = _send_missing(kv, list(missing.values()), have, now,
                                                 on_progress)
    if alive is not None and packs_sent:
        alive.update(have[d][0] for d in missing)
    for f in changed:
        pack, offset, _size = have[f.digest]
        recs[f.path] = (f.path, f.mode, f.size, f.digest, pack, offset)
    dirs = dict(dirs)
    if base and not changed and len(recs) == len(base) and dirs == state.dirs:
        ident = state.last
        assert ident is not None  # noqa: S101 - base is set only with it
    else:
        ident = tree_id(kind, recs.values(), dirs)
    kv.put(f"t:{ident}", str(now).encode())  # the grace period first: gc never sees m: alone
    manifest_bytes, delta, depth = _write_manifest(kv, ident, recs, [f.path for f in changed],
                                                   state if base else TreeState(), kind=kind,
                                                   dirs=dirs)
    state.last, state.depth, state.kind, state.recs, state.dirs = ident, depth, kind, recs, dirs
    state.saved = False
    if oneshot:
        state.save()
        if (refreshed or packs_sent) and alive is not None:
            write_cache(_have_file(cache, kv.address), (sorted(alive), have))
    return PublishResult(ident, SCHEME + ident, len(files), sum(f.size for f in files),
                         files_sent, packs_sent, sent, manifest_bytes, delta)


def _compare(files: list[SourceFile], base: Mapping[str, Rec], alive: set[str] | None
             ) -> tuple[dict[str, Rec], list[SourceFile]]:
    """(the records of the files as `base` has them, with its pack among `alive`; the other
    files), the module doc's shortcut: only the others are looked up and go into a delta."""
    recs: dict[str, Rec] = {}
    changed: list[SourceFile] = []
    for f in files:
        r = base.get(f.path)
        if r is not None and r[3] == f.digest and r[1] == f.mode and r[2] == f.size and (
                alive is None or r[4] in alive):
            recs[f.path] = r
        else:
            changed.append(f)
    return recs, changed


def publish_scan(kv: RayKV, scan: Any, digests: Mapping[str, tuple[bytes, str | None]],
                 kind: str, *, on_progress: Callable[[int], None] | None = None
                 ) -> PublishResult:
    """`publish_tree` of a packaging scan (push's one source discovery)."""
    files, dirs = files_of_scan(scan, digests, kind)
    return publish_tree(kv, kind, files, dirs, label=os.fspath(scan.root),
                        on_progress=on_progress)
