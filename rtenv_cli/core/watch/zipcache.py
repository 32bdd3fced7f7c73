"""The package zip of a watched source, written by packaging's writer from the snapshot.

Ray only takes whole zips, so each re-push to Ray re-sends everything; what can be saved is the
client-side work. The zip is written by `packaging.build.write_package_zip` (the writer `rtenv
push` uses, so a watch push publishes the bytes `rtenv push` would: stored, or deflated where
it shrinks when stored it would not fit the target) from the snapshot's entries:
members whose file (stat and content digest) is unchanged since the previous zip are copied raw
from it (`zipreuse.splice`), the others are read, hashed and compressed. If what is read no
longer matches the snapshot digest (the file changed after it was hashed) ContentChanged is
raised and nothing is published.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rtenv_cli.core.errors import PackagingError
from rtenv_cli.core.packaging.zipreuse import Known, PreviousZip, ZipIndex
from rtenv_cli.core.watch.snapshot import Snapshot


class ContentChanged(PackagingError):
    """A file changed between hashing and packaging: re-snapshot, never publish."""

    def __init__(self, relpath: str) -> None:
        super().__init__(f"{relpath} changed while it was being packaged",
                         hint="rtenv re-snapshots and pushes again", path=relpath)
        self.relpath = relpath


@dataclass(frozen=True)
class BuiltZip:
    uri: str
    path: Path
    zip_bytes: int
    reused: int  # members copied raw from the previous zip
    compressed: int  # members compressed fresh
    # member -> (stat, digest) of the file it was written from (the next build's reuse key)
    stats: dict[str, Any] = field(default_factory=dict)
    known: Known | None = None  # its index, when a splice wrote it: the next build's, unparsed
    layout: str = "ray"
    # the snapshot's entries as packaging's, reused by the next build (see snapshot_scan)
    entries: dict[str, tuple[Any, Any]] = field(default_factory=dict, repr=False,
                                                compare=False)
    deflated: bool = False  # what shrinks is deflated (packaging.build's `compress`)


def snapshot_scan(snap: Snapshot, memo: dict[str, tuple[Any, Any]] | None = None) -> Any:
    """The snapshot as packaging's PackageScan: its files, and its directories with nothing
    below them, each marked as Ray's zip has it (a directory only when empty on disk).
    `memo` (relpath -> (snapshot entry, Entry)) is refreshed in place: an unchanged snapshot
    entry keeps its Entry (a re-push builds only the edited ones)."""
    from rtenv_cli.core.packaging.build import is_empty_dir
    from rtenv_cli.core.packaging.walk import Entry, PackageScan

    memo = {} if memo is None else memo
    fresh: dict[str, tuple[Any, Any]] = {}
    root = str(snap.root)
    entries = []
    for e in snap.files():
        hit = memo.get(e.relpath)
        if hit is None or hit[0] is not e:
            hit = (e, Entry(e.relpath, f"{root}/{e.relpath}", False, e.size, e.mode,
                            e.mtime_ns, e.ino))
        fresh[e.relpath] = hit
        entries.append(hit[1])
    memo.clear()
    memo.update(fresh)
    for rel in snap.leaf_dirs():
        path = snap.root if rel == "." else snap.root / rel
        try:  # its stat now: the snapshot's may predate the last change inside it
            st = os.stat(path)
            empty = is_empty_dir(path)
        except OSError as exc:
            raise ContentChanged(rel) from exc
        entries.append(Entry(rel, str(path), True, 0, st.st_mode, st.st_mtime_ns, st.st_ino,
                             in_zip=empty))
    files = [e for e in entries if not e.is_dir]
    return PackageScan(snap.root, "py_module" if snap.kind == "py_module" else "working_dir",
                       tuple(entries), len(files), sum(e.size for e in files))


def build_zip(snap: Snapshot, dest_dir: Path, previous: BuiltZip | None = None,
              *, layout: Literal["ray", "remote"] = "ray", limit: int | None = None) -> BuiltZip:
    """Write `snap` as its package zip under `dest_dir/_ray_pkg_<h>.zip` (`layout`: see
    packaging.build; stored, deflated where it shrinks when stored it would pass `limit`, the
    target's upload limit, as `rtenv push` decides), splicing the members of `previous` (built
    alike) whose file did not change."""
    from rtenv_cli.core.packaging.build import fits_stored, write_package_zip

    uri = snap.uri
    memo = dict(previous.entries) if previous is not None else {}
    scan = snapshot_scan(snap, memo)
    compress = fits_stored(scan, layout, limit) is False
    digest = {e.relpath: e.digest for e in snap.files()}

    def key(e: Any) -> Hashable:  # the stat, and the content the snapshot hashed
        return (e.size, e.mtime_ns, e.ino, e.mode, digest[e.relpath])

    dest_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".building-", suffix=".zip", dir=dest_dir)
    os.close(fd)
    tmp = Path(tmp_name)
    prev = None
    try:
        alike = (previous is not None and previous.layout == layout
                 and previous.deflated == compress)
        index = ZipIndex.read(previous.path, previous.known) if alike and previous else None
        prev = PreviousZip(index, previous.stats) if index is not None and previous else None
        result = write_package_zip(scan, tmp, layout=layout, previous=prev, key=key,
                                   compress=compress)
        for e in result.changed:
            raise ContentChanged(e.relpath)
        for rel, (got, _sha) in result.digests.items():
            if got != digest[rel]:
                raise ContentChanged(rel)
        final = dest_dir / uri.removeprefix("gcs://")
        tmp.replace(final)
        fresh_files = len(result.digests)
        spliced = result.spliced
        if spliced is None:
            return BuiltZip(uri, final, final.stat().st_size, result.reused, fresh_files,
                            result.stats or {}, layout=layout, entries=memo,
                            deflated=compress)
        return BuiltZip(uri, final, spliced.size, result.reused, fresh_files,
                        result.stats or {}, spliced.known, layout, memo, compress)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        if prev is not None:
            prev.close()


def discard(built: BuiltZip | None, keep: BuiltZip | None = None) -> None:
    if built is not None and (keep is None or built.path != keep.path):
        built.path.unlink(missing_ok=True)
