"""Rebuild a package zip reusing the already-compressed members of unchanged files.

Ray's dashboard only takes whole zips, so each re-push to Ray re-sends everything; what can be
saved is the client-side work. A member whose (relpath, digest) is unchanged since the previous
build is copied as raw compressed bytes from the previous zip: its local header is re-written at
the new offset and its data copied without inflating or deflating. The stdlib `zipfile` has no
public API for that, so this uses its documented-by-source internals (`ZipInfo.FileHeader`,
`ZipFile.fp/filelist/NameToInfo/start_dir`), which have been stable since Python 3.6; the central
directory is still written by `ZipFile.close()`. Changed files are compressed fresh, and the
content read is hashed on the way: if it no longer matches the snapshot digest (the file changed
after it was hashed) ContentChanged is raised and nothing is published.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import PackagingError
from rtenv_cli.core.packaging.zipreuse import PreviousZip, RawRuns
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


def build_zip(snap: Snapshot, dest_dir: Path, previous: BuiltZip | None = None,
              *, compresslevel: int = 1) -> BuiltZip:
    """Write `snap` as Ray's zip layout under `dest_dir/_ray_pkg_<h>.zip`."""
    import zipfile

    uri = snap.uri
    prefix = f"{snap.name}/" if snap.kind == "py_module" else ""
    dest_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".building-", suffix=".zip", dir=dest_dir)
    os.close(fd)
    tmp = Path(tmp_name)
    reused = compressed = 0
    digests: dict[str, bytes] = {}
    src_zip = None
    try:
        if previous is not None and previous.path.exists():
            src_zip = PreviousZip(zipfile.ZipFile(previous.path), {})
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED,
                             compresslevel=compresslevel, strict_timestamps=False) as zf:
            runs = RawRuns(zf, src_zip) if src_zip is not None else None
            for entry in sorted(snap.files(), key=lambda e: e.relpath):
                name = prefix + entry.relpath
                digests[entry.relpath] = entry.digest
                old = src_zip.zf.NameToInfo.get(name) if src_zip is not None else None
                if (runs is not None and old is not None and previous is not None
                        and previous.digests.get(entry.relpath) == entry.digest):
                    runs.add(old, zipfile.ZipInfo(name))
                    reused += 1
                    continue
                if runs is not None:
                    runs.flush()
                _write_fresh(zf, snap.root, entry, name)
                compressed += 1
            if runs is not None:
                runs.flush()
            for rel in snap.leaf_dirs():
                name = prefix + ("" if rel == "." else rel + "/")
                if not name:
                    name = "./"  # Ray's empty working_dir zip holds a single "./" entry
                info = zipfile.ZipInfo(name, _ZIP_EPOCH)
                info.external_attr = ((snap.entries[rel].mode & 0xFFFF) << 16) | 0x10
                zf.writestr(info, b"")
        final = dest_dir / uri.removeprefix("gcs://")
        tmp.replace(final)
        return BuiltZip(uri, final, final.stat().st_size, reused, compressed, digests)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        if src_zip is not None:
            src_zip.close()


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


def copy_to(built: BuiltZip, dest: Path) -> Path:
    shutil.copyfile(built.path, dest)
    return dest
