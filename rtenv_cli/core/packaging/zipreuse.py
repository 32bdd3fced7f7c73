"""Reuse the compressed members of the previous build of the same source.

Ray only takes whole zips, so a re-push after a one-file edit re-sends the package; what it
need not do is compress 10,000 unchanged files again, or even look at them one by one. The last
zip built for a source is kept (hard-linked) under `<rtenv home>/build/last/` with a sidecar
naming each member's file stat (size, mtime_ns, inode, mode: the digest cache's key, so
"unchanged" means what it means there) and the zip's parsed index (taken only while the zip's
central directory still has the digest it was read from). The next build writes only the
changed files (through the normal writer, into a small zip of their own) and `splice`s: members
come verbatim from either zip, neighbours as one byte range (`os.copy_file_range`: the bytes
stay in the kernel), and the central directory is the old records with new offsets. The result
is byte-identical to a fresh build. `ZipIndex` reads a central directory without building
zipfile objects.

`ZipAppender` appends members whose bytes are already made (a worker's batch of local headers
and data, a member of another zip) to a `zipfile.ZipFile` being written: it is the one place
that touches zipfile's internals (see its doc).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import marshal
import os
import struct
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from rtenv_cli.core.errors import PackagingError

_LOCAL_HEADER = 30
_ZIP64_LIMIT = 0xFFFFFFFF
_DATA_DESCRIPTOR_FLAG = 0x08
_CHUNK = 1 << 20


class ZipAppender:
    """Raw appends to a `zipfile.ZipFile` open for writing.

    zipfile has no public API to add a member whose local header and data already exist (a
    worker's batch, a member of another zip), nor to set a member's compression level or make
    its local header. This class is the only code in rtenv that reaches into zipfile's
    internals to do so: `ZipFile.fp/start_dir/filelist/NameToInfo/_didModify` and
    `ZipInfo.FileHeader/_compresslevel`, documented in zipfile's source and stable since
    Python 3.6. The central directory zipfile writes on close then lists these members as its
    own.
    """

    def __init__(self, zf: Any) -> None:
        self.zf = zf

    @staticmethod
    def local_header(info: Any, zip64: bool = False) -> bytes:
        """The local header zipfile writes for `info` (its sizes and crc already set)."""
        return bytes(info.FileHeader(zip64))

    @staticmethod
    def set_level(info: Any, level: int) -> None:
        """The deflate level zipfile uses for `info` when it compresses it itself."""
        info._compresslevel = level

    def _add(self, info: Any) -> None:
        self.zf.filelist.append(info)
        self.zf.NameToInfo[info.filename] = info

    def append_members(self, fd: int, size: int, members: Sequence[tuple[Any, int]]) -> None:
        """Append the first `size` bytes of file `fd`: members (local header and data) made as
        zipfile makes them, each `(info, offset in fd)`; copy_range fails if fd is short."""
        zf = self.zf
        zf.fp.flush()
        copy_range(fd, zf.fp.fileno(), 0, size, zf.start_dir)
        for info, at in members:
            info.header_offset = zf.start_dir + at
            self._add(info)
        zf.start_dir += size
        zf.fp.seek(zf.start_dir)
        zf._didModify = True

    def append_buffers(self, bufs: Sequence[bytes], members: Sequence[tuple[Any, int]]) -> None:
        """Append `bufs`, members made as zipfile makes them (local header and data), each
        `(info, offset in the concatenation of bufs)`."""
        zf = self.zf
        at = zf.start_dir
        for buf in bufs:
            zf.fp.write(buf)
        for info, offset in members:
            info.header_offset = at + offset
            self._add(info)
        zf.start_dir = at + sum(map(len, bufs))
        zf._didModify = True

    def copy_member(self, src: Any, info: Any, name: str) -> None:
        """Append member `info` of ZipFile `src` (open for reading) as `name`, raw; its local
        header is what zipfile would write for it (zip64 sizes kept where the source had
        them)."""
        dst = self.zf
        src_fp = src.fp
        src_fp.seek(info.header_offset)
        header = src_fp.read(_LOCAL_HEADER)
        name_len, extra_len = struct.unpack("<HH", header[26:30])
        src_fp.seek(info.header_offset + _LOCAL_HEADER + name_len)
        zip64 = _ZIP64_EXTRA in _extra_tags(src_fp.read(extra_len))
        zi = copy.copy(info)
        zi.filename = name
        zi.flag_bits &= ~_DATA_DESCRIPTOR_FLAG  # sizes go into the local header below
        zi.header_offset = dst.start_dir  # tracked: BufferedRandom.tell() flushes
        zi.extra = b""
        header = zi.FileHeader(zip64=zip64 or zi.file_size > _ZIP64_LIMIT
                               or zi.compress_size > _ZIP64_LIMIT)
        dst.fp.write(header)
        remaining = info.compress_size
        while remaining:
            chunk = src_fp.read(min(_CHUNK, remaining))
            if not chunk:
                raise PackagingError(f"previous package is truncated at {name}")
            dst.fp.write(chunk)
            remaining -= len(chunk)
        self._add(zi)
        dst.start_dir = zi.header_offset + len(header) + info.compress_size
        dst._didModify = True


_ZIP64_EXTRA = 0x0001


def central_directory_offset(zf: Any) -> int:
    """Where an open ZipFile's central directory starts (zipfile keeps it as `start_dir` and
    has no public accessor): the end of the space local members may occupy."""
    return int(zf.start_dir)


def _extra_tags(extra: bytes) -> set[int]:
    tags = set()
    pos = 0
    while pos + 4 <= len(extra):
        tag, size = struct.unpack_from("<HH", extra, pos)
        tags.add(tag)
        pos += 4 + size
    return tags


StatKey = tuple[int, int, int, int]  # size, mtime_ns, inode, mode

_CD = struct.Struct("<4s4B4HL2L5H2L")  # zipfile.structCentralDir: one central record's head
_EOCD = struct.Struct("<4s4H2LH")  # zipfile.structEndArchive
_CD_SIG, _EOCD_SIG = b"PK\x01\x02", b"PK\x05\x06"
_ATTR_AT = 38  # where a central record holds external_attr (the Unix mode in its high half)
_OFFSET_AT = 42  # where a central record holds its member's local-header offset
_ZIP64_OFFSET = (1 << 31) - 1  # zipfile.ZIP64_LIMIT: beyond it zipfile writes zip64 fields
_MAX_COUNT = 0xFFFF  # zipfile.ZIP_FILECOUNT_LIMIT
_IN_ZIP64 = 0xFFFFFFFF  # a size or offset that lives in a zip64 extra field
# marshal: quicker to load than JSON (benchmarks/results/
# fastpaths.json: "load a zip sidecar of 10,000 members (marshal)")
_SIDECAR, _SIDECAR_VERSION = ".state", 1


Known = tuple[bytes, dict[str, tuple[int, int, bytes]]]  # (central directory's sha1, members)


class Unspliceable(Exception):
    """The zip would need zip64 fields (over 2 GiB, over 65,535 members): zipfile writes those."""


class Member(NamedTuple):  # a tuple: 10,000 of them are built on every re-push
    start: int  # offset of its local header
    end: int  # just past its data: the next member's header, or the central directory
    record: bytes  # its central-directory record, as zipfile wrote it

    @property
    def mode(self) -> int:
        """The Unix mode in its external_attr."""
        return int.from_bytes(self.record[_ATTR_AT:_ATTR_AT + 4], "little") >> 16


@dataclass(frozen=True)
class ZipIndex:
    """A zip's members by name, read from its central directory alone, and the zip kept open.

    Building a zipfile.ZipInfo object per member costs more; this reads the
    records with one struct each (benchmarks/results/
    fastpaths.json: "index a zip of 10,000 members (zipreuse.ZipIndex)"). A zip this cannot
    splice (zip64 fields, a comment, members that overlap) gives None from `read`, and the
    caller builds afresh. The descriptor stays open until `close()`: the offsets are the ones
    of the file that was read, even if another process replaces the path meanwhile.
    """

    path: Path
    members: dict[str, Member]
    fd: int
    size: int
    cd_digest: bytes = b""  # sha1 of the central directory the members were read from

    @classmethod
    def read(cls, path: Path, known: Known | None = None) -> ZipIndex | None:
        """`known`: (cd_digest, members) of an earlier read of this zip; taken as they are when
        the central directory still has that digest (a re-push; benchmarks/results/
        fastpaths.json: "index a zip of 10,000 members again (digest known)")."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        index = None
        try:
            index = cls._read(path, fd, known)
        except OSError:
            pass
        finally:
            if index is None:
                os.close(fd)
        return index

    @classmethod
    def _read(cls, path: Path, fd: int, known: Known | None) -> ZipIndex | None:
        size = os.fstat(fd).st_size
        if size < _EOCD.size:
            return None
        sig, _d, _cd_disk, _n_disk, count, cd_size, cd_start, comment = _EOCD.unpack(
            os.pread(fd, _EOCD.size, size - _EOCD.size))
        # a zip64 zip has its zip64 end record between the central directory and this one
        if sig != _EOCD_SIG or comment or cd_start + cd_size != size - _EOCD.size:
            return None
        cd = os.pread(fd, cd_size, cd_start)
        digest = hashlib.sha1(cd).digest()  # noqa: S324 - a cache key, not a signature
        members: dict[str, Member] | None = None
        if known is not None:
            with contextlib.suppress(TypeError, ValueError, IndexError, AttributeError):
                if known[0] == digest and len(known[1]) == count:
                    members = {name: Member(*m) for name, m in known[1].items()}
        if members is None:
            members = cls._parse(cd, count, cd_start)
        return cls(path, members, fd, size, digest) if members is not None else None

    @property
    def known(self) -> Known:
        """What `read(path, known)` takes to skip parsing this zip again."""
        return self.cd_digest, {name: (m.start, m.end, m.record)
                                 for name, m in self.members.items()}

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def __enter__(self) -> ZipIndex:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @staticmethod
    def _parse(cd: bytes, count: int, cd_start: int) -> dict[str, Member] | None:
        heads: list[tuple[int, str, bytes]] = []
        pos = 0
        try:
            for _ in range(count):
                f = _CD.unpack_from(cd, pos)
                n, m, k = f[12], f[13], f[14]
                if f[0] != _CD_SIG or _IN_ZIP64 in (f[10], f[11], f[18]):
                    return None
                raw = cd[pos + _CD.size:pos + _CD.size + n]
                name = raw.decode("utf-8" if f[5] & 0x800 else "cp437")
                end = pos + _CD.size + n + m + k
                heads.append((f[18], name, cd[pos:end]))
                pos = end
        except (struct.error, UnicodeDecodeError):
            return None
        if pos != len(cd):
            return None
        heads.sort()
        members: dict[str, Member] = {}
        for i, (start, name, record) in enumerate(heads):
            end = heads[i + 1][0] if i + 1 < len(heads) else cd_start
            if end <= start:
                return None
            members[name] = Member(start, end, record)
        return members


def _check_fits(count: int, size: int) -> None:
    """Unspliceable when a zip of `count` members and at least `size` bytes needs zip64."""
    if count > _MAX_COUNT:
        raise Unspliceable(f"{count} members")
    if size > _ZIP64_OFFSET:
        raise Unspliceable("over 2 GiB")


class Spliced(NamedTuple):
    size: int
    known: Known  # its index, for `ZipIndex.read(out, known)` to take without parsing


def splice(out: Path, parts: list[tuple[ZipIndex, str]]) -> Spliced:
    """Write zip `out` whose members are, in this order, the named members of the given zips,
    each copied verbatim (local header and data); returns its size and index.

    Local headers hold no offsets, so a member moves as it is; only its central record gets the
    new offset. Neighbours in a source are copied as one byte range (`os.copy_file_range`
    keeps the bytes in the kernel). The result is what zipfile would have written for the same
    members in the same order; Unspliceable where zipfile would add zip64 fields.
    """
    _check_fits(len(parts), 0)
    runs: list[tuple[ZipIndex, int, int, int]] = []  # source, start, length, new offset
    records: list[bytes] = []
    members: dict[str, tuple[int, int, bytes]] = {}
    pos = 0
    pack = struct.Struct("<L").pack
    for src, name in parts:
        m = src.members[name]
        if pos > _ZIP64_OFFSET:
            raise Unspliceable(f"{name} would start beyond 2 GiB")
        record = m.record[:_OFFSET_AT] + pack(pos) + m.record[_OFFSET_AT + 4:]
        records.append(record)
        members[name] = (pos, pos + m.end - m.start, record)
        last = runs[-1] if runs else None
        if last is not None and last[0] is src and last[1] + last[2] == m.start:
            runs[-1] = (src, last[1], last[2] + m.end - m.start, last[3])
        else:
            runs.append((src, m.start, m.end - m.start, pos))
        pos += m.end - m.start
    cd = b"".join(records)
    if pos > _ZIP64_OFFSET or len(cd) > _ZIP64_OFFSET:
        raise Unspliceable("the central directory would start beyond 2 GiB")
    end = _EOCD.pack(_EOCD_SIG, 0, 0, len(parts), len(parts), len(cd), pos, 0)
    digest = hashlib.sha1(cd).digest()  # noqa: S324 - ZipIndex's cache key, not a signature
    size = pos + len(cd) + len(end)
    with open(out, "wb") as fh:
        for src, start, length, at in runs:
            copy_range(src.fd, fh.fileno(), start, length, at)
        os.pwrite(fh.fileno(), cd + end, pos)
    return Spliced(size, (digest, members))


T = TypeVar("T")


def splice_changed(out: Path, previous: ZipIndex, order: Sequence[tuple[str, bool]],
                   write_changed: Callable[[Path], T]) -> tuple[T, Spliced]:
    """Write zip `out` from `previous` and the changed members: `order` names every member of
    `out`, in order, with whether it comes from `previous`; `write_changed(path)` writes the
    others into a zip of their own at `path` (removed afterwards). Returns its result and the
    splice.

    What cannot splice is refused before anything is written where the members kept from
    `previous` already tell (Unspliceable, as from `splice`).
    """
    _check_fits(len(order), sum(previous.members[name].end - previous.members[name].start
                                for name, old in order if old))
    part = out.with_name(out.name + ".changed")
    try:
        result = write_changed(part)
        new = ZipIndex.read(part)
        if new is None:
            raise Unspliceable("the changed files need zip64")
        with new:
            spliced = splice(out, [(previous if old else new, name) for name, old in order])
    finally:
        part.unlink(missing_ok=True)
    return result, spliced


@dataclass(frozen=True)
class PreviousZip:
    """The last zip built for a source, with the stat of the file behind each member."""

    index: ZipIndex
    # member name -> stat of the file it was built from (or the writer's other reuse key)
    stats: Mapping[str, Hashable]

    def reusable(self, name: str, stat: Hashable) -> bool:
        return self.stats.get(name) == stat and name in self.index.members

    def close(self) -> None:
        self.index.close()


def copy_range(src_fd: int, dst_fd: int, offset: int, count: int, dst_offset: int) -> None:
    """Copy `count` bytes at `offset` of one file to `dst_offset` of another, in the kernel
    (`os.copy_file_range`) where it can."""
    done = 0
    try:
        while done < count:
            n = os.copy_file_range(src_fd, dst_fd, count - done, offset + done,
                                   dst_offset + done)
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
        raise PackagingError(f"a file being copied into a package ended early, at offset "
                             f"{offset + done} of {offset + count}",
                             hint="another process may have truncated it: push again")


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
        # rtenv's own file in the user's cache dir: see digest_cache._MARSHAL
        version, zip_id, known, stats = marshal.loads(  # noqa: S302
            slot.with_suffix(_SIDECAR).read_bytes())
    except Exception:  # missing, torn, another format: build afresh
        return None
    if version != _SIDECAR_VERSION:
        return None
    index = ZipIndex.read(slot.with_suffix(".zip"), known)
    if index is None:
        return None
    st = os.fstat(index.fd)
    if (st.st_ino, st.st_size) != zip_id:  # the sidecar describes another build's zip
        index.close()
        return None
    return PreviousZip(index, stats)


def remember(root: Path, key: str, built: Path, stats: dict[str, StatKey],
             known: Known | None = None) -> None:
    """Keep `built` (hard link, else copy) as the previous zip of (root, key); best effort.
    `known`: its index, when the caller has it (a splice does), else it is read."""
    import shutil

    slot = _slot(root, key)
    try:
        slot.parent.mkdir(parents=True, exist_ok=True)
        tmp = slot.with_suffix(f".{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)
        try:
            os.link(built, tmp)
        except OSError:  # another file system: a copy
            shutil.copyfile(built, tmp)
        st = os.stat(tmp)
        # the old zip keeps a second name until a thread drops it: freeing its pages takes
        # tens of milliseconds, which then overlap the upload instead of preceding it
        with contextlib.suppress(OSError):  # none yet
            os.link(slot.with_suffix(".zip"), slot.with_suffix(f".{os.getpid()}.old"))
        os.replace(tmp, slot.with_suffix(".zip"))
    except OSError:
        return
    import threading

    # zip first, then the sidecar (written by the thread, also off the upload's path). The
    # sidecar names the zip it describes (inode, size): after a crash in between, or when two
    # processes remember builds of the same source at once, a sidecar beside another build's
    # zip is ignored and the next build starts afresh. Not a daemon: the process exits once
    # both are done.
    thread = threading.Thread(target=_finish_remember,
                              args=(slot, (st.st_ino, st.st_size), stats, known),
                              name="rtenv-remember-zip")
    _pending[slot] = thread
    thread.start()


_pending: dict[Path, Any] = {}  # slot -> the thread still writing its sidecar


def wait_remembered() -> None:
    """Wait until every build this process remembered has its sidecar written."""
    for thread in list(_pending.values()):
        thread.join()


def _finish_remember(slot: Path, zip_id: tuple[int, int], stats: dict[str, StatKey],
                     known: Known | None) -> None:
    from rtenv_cli.core.fsutil import atomic_write_bytes

    # the sidecar also keeps the zip's parsed index, keyed by its central directory's digest
    if known is None:
        index = ZipIndex.read(slot.with_suffix(".zip"))
        if index is not None:
            index.close()
            known = index.known
    if known is not None:
        with contextlib.suppress(OSError):
            atomic_write_bytes(slot.with_suffix(_SIDECAR),
                               marshal.dumps((_SIDECAR_VERSION, zip_id, known, stats)))
    for stale in slot.parent.glob("*.old"):  # this run's old zip, and any a crash left
        stale.unlink(missing_ok=True)
