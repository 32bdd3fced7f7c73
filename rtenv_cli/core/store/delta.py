"""The per-file delta protocol: manifests over a content-addressed blob store.

A manifest names a package by its Ray URI and lists its entries::

    {"uri": "gcs://_ray_pkg_<16hex>.zip", "kind": "working_dir" | "py_module",
     "name": "<top-level dir for a py_module>" | null,
     "entries": [{"path": "a/b.py", "is_dir": false, "mode": 420, "size": 12, "sha256": "...",
                  "zip_time": [2026, 1, 2, 3, 4, 6]},
                 {"path": "data", "is_dir": true, "mode": 493, "in_zip": false, ...}]}

Directories listed are those with no entry below them: `in_zip` says whether Ray's zip has them
(empty on disk) or only hashes their name (children all excluded; default true, as older
clients meant). `zip_time` is the member's date_time in the client's zip (its local mtime, as
Ray dates members), so the zip assembled here is byte for byte the one the client would build
(default 1980-01-01).

or, relative to a package the store already holds, only what changed (an edit costs bytes and
work in proportion to the edit, not to the tree)::

    {"uri": ..., "kind": ..., "name": ..., "base": "gcs://_ray_pkg_<old>.zip",
     "upsert": [<entries as above>], "remove": ["old/path.py", ...]}

`commit` checks that every blob is present (each was verified against its sha256 on upload),
computes Ray's hash of the file set from one digest per entry, `sha1(relpath + content)`, reusing
the base's digests for unchanged entries, refuses the package unless that hash is its name, and
publishes it as a manifest (Store.put_manifest). The zip Ray's nodes read is assembled from the
blobs when it is first needed (Store.package_file), not on every save.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rtenv_cli.core.errors import PackagingError
from rtenv_cli.core.store.store import SHA256_RE, Store

BASE_UNKNOWN = "base package unknown"  # the client then sends the whole manifest
# commit takes `_in_place` where it applies (benchmarks/bench_watch.py's ablation rows turn it off)
IN_PLACE = True


@dataclass(frozen=True)
class ManifestEntry:
    path: str
    is_dir: bool
    mode: int
    size: int
    sha256: str | None
    in_zip: bool = True
    zip_time: tuple[int, ...] | None = None

    @classmethod
    def parse(cls, item: Mapping[str, Any]) -> ManifestEntry:
        path = str(item["path"])
        is_dir = bool(item.get("is_dir"))
        norm = "." if path == "." and is_dir else _check_path(path)  # ".": an empty package
        sha = None if is_dir else str(item["sha256"])
        if sha is not None and not SHA256_RE.match(sha):
            raise PackagingError(f"manifest entry {path!r} has an invalid sha256")
        when = item.get("zip_time")
        if when is not None:
            when = tuple(int(x) for x in when)
            if len(when) != 6 or not 1980 <= when[0] <= 2107:  # noqa: PLR2004 - zip's date range
                raise PackagingError(f"manifest entry {path!r} has an invalid zip_time",
                                     hint="[year, month, day, hour, minute, second]")
        return cls(norm, is_dir, int(item.get("mode", 0o644)), int(item.get("size", 0)), sha,
                   bool(item.get("in_zip", True)) if is_dir else True, when)

    def row(self, digest: str | None) -> Row:
        return [self.path, self.is_dir, self.mode, self.size, self.sha256, digest, self.in_zip,
                list(self.zip_time) if self.zip_time is not None else None]


def _check_path(path: str) -> str:
    norm = posixpath.normpath(path)
    if path.startswith("/") or norm.startswith("..") or "\\" in path or norm == ".":
        raise PackagingError(f"manifest path {path!r} is not a relative path in the tree")
    return norm


@dataclass(frozen=True)
class Manifest:
    uri: str
    kind: str
    name: str | None
    entries: tuple[ManifestEntry, ...] = ()
    base: str | None = None
    upsert: tuple[ManifestEntry, ...] = ()
    remove: tuple[str, ...] = ()

    @property
    def package_name(self) -> str:
        return self.uri.removeprefix("gcs://")

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Manifest:
        try:
            uri, kind = str(data["uri"]), str(data.get("kind", "working_dir"))
            base = data.get("base")
            raw = data["entries"] if base is None else ()
            upsert = data.get("upsert", ()) if base is not None else ()
            remove = data.get("remove", ()) if base is not None else ()
            entries = tuple(ManifestEntry.parse(item) for item in raw)
            ups = tuple(ManifestEntry.parse(item) for item in upsert)
            gone = tuple(_check_path(str(p)) for p in remove)
        except (KeyError, TypeError) as exc:
            raise PackagingError(f"manifest lacks {exc}",
                                 hint="send uri, kind and entries (or base, upsert, remove)"
                                 ) from exc
        for value in (uri, base):
            if value is not None and not str(value).startswith("gcs://"):
                raise PackagingError(f"manifest uri {value!r} is not a gcs:// package URI")
        if kind not in ("working_dir", "py_module"):
            raise PackagingError(f"manifest kind {kind!r} not understood",
                                 hint="working_dir or py_module")
        name = data.get("name")
        return cls(uri, kind, str(name) if name else None, entries,
                   str(base) if base is not None else None, ups, gone)

    def shas(self) -> list[str]:
        return sorted({e.sha256 for e in (*self.entries, *self.upsert) if e.sha256})


# A published manifest's entry: [path, is_dir, mode, size, sha256 | None, ray digest (16 hex),
# in_zip, zip_time | None]; manifests published before the last two have six fields
Row = list[Any]

HASHED_DIRS_HEADER = "X-Rtenv-Hashed-Dirs"  # on a package PUT: JSON list (see hashed_dirs_header)


def hashed_dirs_header(dirs: Sequence[str]) -> dict[str, str]:
    """The request header declaring a package's hashed-but-not-zipped paths (packaging's
    `hashed_not_zipped`), which the store needs to verify it; none when there are none."""
    import json

    return {HASHED_DIRS_HEADER: json.dumps(list(dirs), separators=(",", ":"))} if dirs else {}


def parse_hashed_dirs(value: str | None) -> tuple[str, ...]:
    """The paths of a `X-Rtenv-Hashed-Dirs` header (none without the header)."""
    import json

    if not value:
        return ()
    try:
        dirs = json.loads(value)
    except ValueError:
        dirs = None
    if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
        raise PackagingError(f"{HASHED_DIRS_HEADER} is not a JSON list of paths",
                             hint='e.g. ["data", "tests/fixtures"]')
    return tuple(dirs)


def missing(store: Store, manifest: Manifest) -> list[str]:
    shas = manifest.shas()
    have = store.has_blobs(shas)
    return [s for s in shas if s not in have]


def _rows(store: Store, manifest: Manifest) -> dict[str, Row]:
    """path -> row for the package, digests filled where the base already knows them."""
    if manifest.base is None:
        return {e.path: e.row(None) for e in manifest.entries}
    base = store.load_manifest(manifest.base.removeprefix("gcs://"))
    if base is None or base.get("kind") != manifest.kind or base.get("name") != manifest.name:
        raise PackagingError(f"{BASE_UNKNOWN}: {manifest.base}",
                             hint="send the whole manifest (entries) instead")
    rows = {row[0]: row for row in base["entries"]}  # shared, never mutated: see below
    for path in manifest.remove:
        rows.pop(path, None)
    for e in manifest.upsert:
        old = rows.get(e.path)
        same = old is not None and old[1] == e.is_dir and old[4] == e.sha256
        rows[e.path] = e.row(old[5] if same and old is not None else None)
    return rows


def ray_acc(store: Store, rows: dict[str, Row]) -> bytes:
    """Ray's 8-byte hash of the package; fills the missing per-entry digests in `rows`.

    One XOR per entry over integers (the fold of packaging.hashing, much faster in Python than
    over bytes: benchmarks/results/fastpaths.json: "fold 10,000 digests as one integer XOR");
    directories are every ancestor of an entry plus the empty ones, root included.
    """
    from rtenv_cli.core.packaging.hashing import EMPTY_ACC, entry_digest, file_digests

    dirs = {"."}
    acc = int.from_bytes(EMPTY_ACC, "big")
    for path, row in rows.items():
        parent = path
        while "/" in parent:
            parent = parent.rsplit("/", 1)[0]
            if parent in dirs:
                break
            dirs.add(parent)
        if row[1]:
            dirs.add(path)
            continue
        if row[5] is None:
            digest, sha = file_digests(path, store.blob_path(row[4]))
            if sha != row[4]:  # the blob store is content-addressed; this is disk corruption
                raise PackagingError(f"blob {row[4][:12]} of {path} is corrupt on disk",
                                     hint="run `rtenv cache purge` on the agent and push again")
            row[5] = digest[:8].hex()
        acc ^= int(row[5], 16)
    for d in dirs:
        acc ^= int.from_bytes(entry_digest(d, None, True)[:8], "big")
    return acc.to_bytes(8, "big")


def _in_place(store: Store, manifest: Manifest) -> tuple[list[Row], list[int], bytes] | None:
    """The fast path of an edit: when the delta only replaces files of the base in place (no
    path added or removed, files before and after), the package's rows are the base's, in
    its order, with those replaced, and Ray's hash is the base's with each replaced digest
    XORed out and the new one in: the set of directories is the base's. Work in proportion to
    the edit, not to the tree. The base's name is its hash: `commit` verified it against its
    rows before publishing it, as it does this one. None when the delta is not of this kind
    (the caller then hashes every row: `ray_acc`); else (rows, indices replaced, hash)."""
    import bisect

    from rtenv_cli.core.packaging.hashing import PREFIX, file_digests

    if manifest.base is None or manifest.remove or not manifest.upsert:
        return None
    base = store.load_manifest(manifest.base.removeprefix("gcs://"))
    if base is None or base.get("kind") != manifest.kind or base.get("name") != manifest.name:
        return None  # `_rows` says why
    base_hex = manifest.base.removeprefix(PREFIX).removesuffix(".zip")
    try:
        acc = int(base_hex, 16)
    except ValueError:
        return None
    old: list[Row] = base["entries"]
    new = {e.path: e for e in manifest.upsert}  # the last of a path wins, as in `_rows`
    at = {}
    for path, e in new.items():
        i = bisect.bisect_left(old, path, key=lambda row: row[0])
        if e.is_dir or i == len(old) or old[i][0] != path or old[i][1] or old[i][5] is None:
            return None  # added, a directory, or a base row without its digest
        at[path] = i
    rows = list(old)  # rows are shared with the base's, never mutated
    for path, i in at.items():
        e, prev = new[path], old[i]
        digest = prev[5]
        if prev[4] != e.sha256:
            raw, sha = file_digests(path, store.blob_path(e.sha256 or ""))
            if sha != e.sha256:
                raise PackagingError(f"blob {sha[:12]} of {path} is corrupt on disk",
                                     hint="run `rtenv cache purge` on the agent and push again")
            digest = raw[:8].hex()
        acc ^= int(prev[5], 16) ^ int(digest, 16)
        rows[i] = e.row(digest)
    return rows, list(at.values()), acc.to_bytes(8, "big")


def commit(store: Store, manifest: Manifest) -> dict[str, Any]:
    """Verify the package against its name and publish it (see module doc)."""
    from rtenv_cli.core.packaging.hashing import uri_for_acc

    name = manifest.package_name
    if store.hold_package(name):  # pinned, as a fresh commit is, for the create that follows
        return {"uri": manifest.uri, "package_bytes": store.package_size(name)}
    lacking = missing(store, manifest)
    if lacking:
        raise PackagingError(f"{len(lacking)} blob(s) missing for {manifest.uri}",
                             hint="upload the missing blobs, then commit again")
    fast = _in_place(store, manifest) if IN_PLACE else None
    if fast is not None:
        entries, changed, acc = fast
        like = (str(manifest.base).removeprefix("gcs://"), changed)
    else:
        rows = _rows(store, manifest)
        acc, entries, like = ray_acc(store, rows), sorted(rows.values()), None
    got = uri_for_acc(acc)
    if got != manifest.uri:
        raise PackagingError(f"{manifest.uri} does not match its files (they hash to {got})",
                             hint="a file changed while it was pushed; push again")
    doc = {"uri": manifest.uri, "kind": manifest.kind, "name": manifest.name, "entries": entries}
    size = sum(row[3] for row in entries if not row[1])
    store.put_manifest(name, doc, size, like=like)
    return {"uri": manifest.uri, "package_bytes": size}
