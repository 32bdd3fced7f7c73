"""Reuse the compressed members of the previous build of the same source.

Ray's dashboard only takes whole zips, so a re-push after a one-file edit re-sends the package;
what it need not do is compress 10,000 unchanged files again. The last zip built for a source is
kept (hard-linked) under `<rtenv home>/build/last/` with a sidecar naming each member's file
stat (size, mtime_ns, inode, mode: the digest cache's key, so "unchanged" means what it means
there). The next build copies those members' raw compressed bytes without inflating or
deflating: a run of members that were adjacent in the previous zip is copied as one byte range
(local headers hold no offsets, so they move verbatim; `os.copy_file_range` keeps the bytes in
the kernel), and only their central-directory records are written anew with the new offsets.

The stdlib `zipfile` has no public API for appending raw members, so `copy_raw` and `copy_run`
use its source-documented internals (`ZipInfo.FileHeader`,
`ZipFile.fp/filelist/NameToInfo/start_dir`), stable since Python 3.6; the central directory is
still written by `ZipFile.close()`.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import PackagingError

_LOCAL_HEADER = 30
_ZIP64_LIMIT = 0xFFFFFFFF
_DATA_DESCRIPTOR_FLAG = 0x08
_CHUNK = 1 << 20


def copy_raw(dst: Any, src_fp: Any, info: Any, name: str) -> None:
    """Append member `info` of the zip open on `src_fp` to ZipFile `dst` as `name`, raw."""
    src_fp.seek(info.header_offset)
    header = src_fp.read(_LOCAL_HEADER)
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    src_fp.seek(info.header_offset + _LOCAL_HEADER + name_len + extra_len)
    zi = copy.copy(info)
    zi.filename = name
    zi.flag_bits &= ~_DATA_DESCRIPTOR_FLAG  # sizes go into the local header below
    zi.header_offset = dst.start_dir  # tracked: BufferedRandom.tell() flushes
    zi.extra = b""
    header = zi.FileHeader(zip64=zi.file_size > _ZIP64_LIMIT or zi.compress_size > _ZIP64_LIMIT)
    dst.fp.write(header)
    remaining = info.compress_size
    while remaining:
        chunk = src_fp.read(min(_CHUNK, remaining))
        if not chunk:
            raise PackagingError(f"previous package is truncated at {name}")
        dst.fp.write(chunk)
        remaining -= len(chunk)
    dst.filelist.append(zi)
    dst.NameToInfo[zi.filename] = zi
    dst.start_dir = zi.header_offset + len(header) + info.compress_size
    dst._didModify = True


StatKey = tuple[int, int, int, int]  # size, mtime_ns, inode, mode


@dataclass
class PreviousZip:
    """The last zip built for a source, open for raw copies."""

    zf: zipfile.ZipFile
    stats: dict[str, StatKey]  # member name -> stat of the file it was built from
    _ends: dict[int, int] | None = None  # header offset -> where the member's bytes end

    def member(self, name: str, stat: StatKey) -> Any | None:
        if self.stats.get(name) != stat:
            return None
        return self.zf.NameToInfo.get(name)

    def end_of(self, info: Any) -> int:
        """The offset just past member `info` (its header, data and any data descriptor):
        the next member's header, or the central directory."""
        if self._ends is None:
            starts = sorted(i.header_offset for i in self.zf.filelist)
            self._ends = dict(zip(starts, [*starts[1:], self.zf.start_dir], strict=True))
        return self._ends[info.header_offset]

    def close(self) -> None:
        self.zf.close()


class RawRuns:
    """Members of `previous` to append raw to ZipFile `dst`, in order: neighbours there are
    gathered and copied as one byte range (`copy_run`). `flush()` before anything else is
    written to `dst`, and before it is closed."""

    def __init__(self, dst: Any, previous: PreviousZip) -> None:
        self.dst, self.previous = dst, previous
        self.run: list[tuple[Any, Any]] = []

    def add(self, old: Any, new: Any) -> None:
        """Append member `old` of `previous` as `new` (same name)."""
        if self.run and old.header_offset != self.previous.end_of(self.run[-1][0]):
            self.flush()
        self.run.append((old, new))

    def flush(self) -> None:
        if self.run:
            copy_run(self.dst, self.previous, self.run)
            self.run = []


def copy_run(dst: Any, previous: PreviousZip, members: list[tuple[Any, Any]]) -> None:
    """Append members of `previous` that lie back to back there, as one byte range, to ZipFile
    `dst`. `members` pairs each previous ZipInfo with the new one (same name; its offset and
    sizes are filled in here)."""
    start = members[0][0].header_offset
    end = previous.end_of(members[-1][0])
    shift = dst.start_dir - start  # tracked: BufferedRandom.tell() flushes
    for old, new in members:  # the central record says what the copied local header says
        new.compress_type, new.flag_bits, new.CRC = old.compress_type, old.flag_bits, old.CRC
        new.file_size, new.compress_size = old.file_size, old.compress_size
        new.extract_version, new.extra = old.extract_version, old.extra
        new.date_time, new.external_attr = old.date_time, old.external_attr
        new.create_system, new.create_version = old.create_system, old.create_version
        new.header_offset = old.header_offset + shift
        dst.filelist.append(new)
        dst.NameToInfo[new.filename] = new
    dst.fp.flush()
    _copy_range(previous.zf.fp, dst.fp, start, end - start, dst.start_dir)
    dst.start_dir += end - start
    dst.fp.seek(dst.start_dir)
    dst._didModify = True


def _copy_range(src: Any, dst: Any, offset: int, count: int, dst_offset: int) -> None:
    src_fd, dst_fd = src.fileno(), dst.fileno()
    done = 0
    try:
        while done < count:
            n = os.copy_file_range(src_fd, dst_fd, count - done, offset + done, dst_offset + done)
            if n == 0:
                break
            done += n
    except (AttributeError, OSError):  # no copy_file_range here (or across these files)
        while done < count:
            chunk = os.pread(src_fd, min(_CHUNK, count - done), offset + done)
            if not chunk:
                break
            done += os.pwrite(dst_fd, chunk, dst_offset + done)
    if done != count:
        raise PackagingError(f"previous package is truncated at offset {offset + done}")


def _slot(root: Path, key: str) -> Path:
    from rtenv_cli.core.paths import rtenv_home

    digest = hashlib.sha256(f"{root}\0{key}".encode()).hexdigest()[:24]
    return rtenv_home() / "build" / "last" / digest


def open_previous(root: Path, key: str) -> PreviousZip | None:
    """The last zip built for (root, key), or None (none yet, or unreadable: build afresh)."""
    slot = _slot(root, key)
    pending = _pending.pop(slot, None)
    if pending is not None:  # this process's last build of the same source is still filing
        pending.join()
    try:
        stats = {k: tuple(v) for k, v in json.loads(slot.with_suffix(".json").read_text()).items()}
        zf = zipfile.ZipFile(slot.with_suffix(".zip"))
    except (OSError, ValueError, zipfile.BadZipFile):
        return None
    return PreviousZip(zf, stats)  # type: ignore[arg-type]


def remember(root: Path, key: str, built: Path, stats: dict[str, StatKey]) -> None:
    """Keep `built` (hard link, else copy) as the previous zip of (root, key); best effort."""
    import shutil

    slot = _slot(root, key)
    try:
        slot.parent.mkdir(parents=True, exist_ok=True)
        tmp = slot.with_suffix(f".{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)
        try:
            os.link(built, tmp)
        except OSError:
            shutil.copyfile(built, tmp)
        # the old zip keeps a second name until a thread drops it: freeing its pages takes
        # tens of milliseconds, which then overlap the upload instead of preceding it
        with contextlib.suppress(OSError):  # none yet
            os.link(slot.with_suffix(".zip"), slot.with_suffix(f".{os.getpid()}.old"))
        os.replace(tmp, slot.with_suffix(".zip"))
    except OSError:
        return
    import threading

    # zip first, then the sidecar (written by the thread, also off the upload's path): a crash
    # in between leaves the older sidecar beside the newer zip, and a file whose stat still
    # matches the older build is unchanged in the newer one too, so a reused member is still
    # the file's content. Not a daemon: the process exits once both are done.
    thread = threading.Thread(target=_finish_remember, args=(slot, stats),
                              name="rtenv-remember-zip")
    _pending[slot] = thread
    thread.start()


_pending: dict[Path, Any] = {}  # slot -> the thread still writing its sidecar


def _finish_remember(slot: Path, stats: dict[str, StatKey]) -> None:
    from rtenv_cli.core.fsutil import atomic_write_text

    with contextlib.suppress(OSError):
        atomic_write_text(slot.with_suffix(".json"), json.dumps(stats))
    for stale in slot.parent.glob("*.old"):  # this run's old zip, and any a crash left
        stale.unlink(missing_ok=True)
