"""Rebuild a package zip reusing the already-compressed members of unchanged files.

Ray only takes whole zips, so each re-push to Ray re-sends everything; what can be saved is the
client-side work. The changed files (their (relpath, digest) differs from the previous build's)
are compressed fresh into a zip of their own, hashed on the way: if what is read no longer
matches the snapshot digest (the file changed after it was hashed) ContentChanged is raised and
nothing is published. `zipreuse.splice` then assembles the package from both zips, unchanged
members copied verbatim as byte ranges of the previous zip.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import PackagingError
from rtenv_cli.core.packaging.zipreuse import Known, Unspliceable, ZipIndex, splice_changed
from rtenv_cli.core.watch.snapshot import Snapshot

_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
_CHUNK = 1 << 20


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
    # relpath -> digest of what is in this zip (the next build's reuse key)
    digests: dict[str, bytes]
    known: Known | None = None  # its index, when a splice wrote it: the next build's, unparsed
    # build_zip(background=True): a thread may still be writing `path`; ready(n) returns once
    # its first n bytes are there (None: all), raising if the write failed
    ready: Callable[[int | None], None] | None = None

    def wait(self) -> bool:
        """Wait until `path` is complete; False when writing it failed."""
        if self.ready is not None:
            try:
                self.ready(None)
            except PackagingError:
                return False
        return True


def build_zip(snap: Snapshot, dest_dir: Path, previous: BuiltZip | None = None,
              *, compresslevel: int = 1, background: bool = False) -> BuiltZip:
    """Write `snap` as Ray's zip layout under `dest_dir/_ray_pkg_<h>.zip`. `background`: a
    spliced zip is written by a thread, which the result's `ready` gates (an upload may stream
    it meanwhile)."""
    uri = snap.uri
    prefix = f"{snap.name}/" if snap.kind == "py_module" else ""
    digests: dict[str, bytes] = {}
    members: list[tuple[str, Any]] = []  # (name, snapshot entry), in zip order: files, dirs
    for entry in sorted(snap.files(), key=lambda e: e.relpath):
        digests[entry.relpath] = entry.digest
        members.append((prefix + entry.relpath, entry))
    for rel in snap.leaf_dirs():
        # Ray's empty working_dir zip holds a single "./" entry
        members.append((prefix + ("" if rel == "." else rel + "/") or "./", snap.entries[rel]))
    dest_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".building-", suffix=".zip", dir=dest_dir)
    os.close(fd)
    tmp = Path(tmp_name)
    index = None
    try:
        usable = previous is not None and previous.wait()
        index = (ZipIndex.read(previous.path, previous.known)
                 if previous is not None and usable else None)
        reuse = _reusable(members, index, previous)
        spliced = None
        try:
            if index is None:
                raise Unspliceable("no previous zip")
            changed = [m for m in members if m[0] not in reuse]
            _none, spliced = splice_changed(
                tmp, index, [(name, name in reuse) for name, _e in members],
                lambda part: _write_members(part, snap.root, changed, compresslevel),
                background=background)
        except Unspliceable:
            reuse.clear()
            _write_members(tmp, snap.root, members, compresslevel)
        final = dest_dir / uri.removeprefix("gcs://")
        tmp.replace(final)
        fresh_files = sum(1 for name, _e in members if name not in reuse
                          and not name.endswith("/"))
        if spliced is None:
            return BuiltZip(uri, final, final.stat().st_size, len(reuse), fresh_files, digests)
        gate = spliced.gate
        return BuiltZip(uri, final, spliced.size, len(reuse), fresh_files, digests,
                        spliced.known, gate.wait if gate is not None else None)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        if index is not None:
            index.close()


def _reusable(members: list[tuple[str, Any]], index: ZipIndex | None,
              previous: BuiltZip | None) -> set[str]:
    """Names whose member in the previous zip is what a fresh build would write: same content
    digest and same mode (Ray's digest leaves the mode out)."""
    if index is None or previous is None:
        return set()
    out = set()
    for name, entry in members:
        m = index.members.get(name)
        if (m is not None and not name.endswith("/")
                and previous.digests.get(entry.relpath) == entry.digest
                and m.mode == entry.mode & 0xFFFF):
            out.add(name)
    return out


def _write_members(out: Path, root: Path, members: list[tuple[str, Any]],
                   compresslevel: int) -> None:
    """A zip of `members`: files compressed fresh (and checked), directories as empty members."""
    import zipfile

    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED,
                         compresslevel=compresslevel, strict_timestamps=False) as zf:
        for name, entry in members:
            if name.endswith("/"):
                info = zipfile.ZipInfo(name, _ZIP_EPOCH)
                info.external_attr = ((entry.mode & 0xFFFF) << 16) | 0x10
                zf.writestr(info, b"")
            else:
                _write_fresh(zf, root, entry, name)


def _write_fresh(zf: Any, root: Path, entry: Any, name: str) -> None:
    """Compress one file into `zf`, hashing it on the way; ContentChanged if it is no longer
    what the snapshot hashed."""
    import zipfile

    info = zipfile.ZipInfo(name, _ZIP_EPOCH)
    info.external_attr = (entry.mode & 0xFFFF) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    sha1 = hashlib.sha1(entry.relpath.encode())  # noqa: S324 - Ray's scheme
    try:
        with (root / entry.relpath).open("rb") as src, \
                zf.open(info, "w", force_zip64=entry.size > 1 << 30) as out:
            while chunk := src.read(_CHUNK):
                sha1.update(chunk)
                out.write(chunk)
    except OSError as exc:
        raise ContentChanged(entry.relpath) from exc
    if sha1.digest() != entry.digest:
        raise ContentChanged(entry.relpath)


def discard(built: BuiltZip | None, keep: BuiltZip | None = None) -> None:
    if built is not None and (keep is None or built.path != keep.path):
        built.path.unlink(missing_ok=True)

