"""Safe extraction: the whole archive is planned and checked BEFORE anything is written.

Refused outright (Ray only warns and skips): absolute paths, drive letters, backslashes, `..`,
empty names, names that are not UTF-8, a component over 255 bytes, members that are neither file,
directory nor symlink (hard links, devices, FIFOs), duplicate names (a file and a directory or
link of one name, two files of one name), encrypted members, compression methods other than
stored/deflate/bzip2/lzma, and zip entries that share or overlap their data.

Symlinks are resolved in the archive's own tree, following its other links (at most 40 hops, as
the kernel): a link whose target leaves the root at any step is refused, and so is any member
whose parent path passes through a link of the archive. Files and directories are written
first, through directory descriptors and O_NOFOLLOW, then links: nothing is written through a
link, and nothing outside `dest`.

Modes: files get 0o755 when any execute bit is set, else 0o644; directories 0o755 (no setuid,
setgid, sticky or group/world write bits).

Limits (`Limits`, checked on the declared sizes before writing, and again while writing):
- `max_members` 200,000 members (node_modules-sized trees fit; Ray's own zips are far smaller);
- `max_total_bytes` 4 GiB expanded, eight times Ray's 512 MiB GCS package limit;
- `max_ratio` 200: a member over 1 MiB, and the archive as a whole once it expands over 1 MiB,
  may not expand more than 200 times its compressed size (many small members count together);
- `max_path_bytes` 4096 bytes per member path (PATH_MAX), components 255 bytes (NAME_MAX).
A member may not expand beyond the size its header declares. Corrupt content (bad CRC, broken
deflate, a size that lies) raises ArchiveError naming the member; `dest` is then removed.
"""

from __future__ import annotations

import errno
import functools
import io
import os
import posixpath
import shutil
import stat
from collections import OrderedDict
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from rtenv_cli.core.errors import PackagingError

MAX_TOTAL_BYTES = 4 * 2**30
MAX_RATIO = 200  # deflate tops out near 1000:1 only for pathological input
RATIO_MIN_BYTES = 1 << 20  # small members may compress very well (empty-ish files)
MAX_MEMBERS = 200_000
MAX_PATH_BYTES = 4096
NAME_MAX = 255
MAX_LINK_HOPS = 40  # the kernel's own limit (ELOOP)
_LINK_WORK = 4_000_000  # path components walked resolving links, over the whole archive
MAC_OS_DIR = "__MACOSX"
ZIP_METHODS = {0: "stored", 8: "deflate", 12: "bzip2", 14: "lzma"}
_ZIP_HEADER = 30  # fixed part of a local file header
_TAR_HEADER_SLACK = 2048  # header blocks per tar member (its own, pax or GNU long name)
_CHUNK = 1 << 20
_FLAG_ENCRYPTED = 0x1
_FLAG_UTF8 = 0x800
_DIR_MODE = 0o755
_OPEN_DIRS = 128  # directory descriptors kept open while writing


@dataclass(frozen=True)
class Limits:
    """Bounds on one archive (see the module doc for the defaults and why)."""

    max_total_bytes: int = MAX_TOTAL_BYTES
    max_ratio: float = MAX_RATIO
    max_members: int = MAX_MEMBERS
    max_path_bytes: int = MAX_PATH_BYTES


class ArchiveError(PackagingError):
    """An archive that cannot be unpacked as it is: corrupt, unsupported, or over a limit."""


class UnsafeArchiveError(ArchiveError):
    """An archive that would write outside its directory or past a limit on purpose."""


@dataclass(frozen=True)
class Member:
    name: str  # normalised relative path, "/"-separated
    kind: str  # file | dir | link
    size: int = 0
    mode: int = _DIR_MODE  # the mode it is written with
    link: str = ""
    ref: Any = field(default=None, compare=False)  # ZipInfo, or the tar member's ordinal


def safe_mode(mode: int) -> int:
    """0o755 when any execute bit is set, else 0o644."""
    return 0o755 if mode & 0o111 else 0o644


def check_member_name(name: str, archive: str, limits: Limits) -> str:
    """The normalised relative path of member `name`; raise if it is not a safe one."""
    if not name or "\x00" in name or "\\" in name:
        raise UnsafeArchiveError(f"{archive}: unsafe member name {name!r}",
                                 hint="member names must be non-empty relative paths")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise UnsafeArchiveError(f"{archive}: absolute path {name!r}",
                                 hint="packages must hold relative paths only")
    if ".." in name.split("/"):
        raise UnsafeArchiveError(f"{archive}: path escapes the tree {name!r}",
                                 hint="remove '..' components from the archive")
    try:
        size = len(name) if name.isascii() else len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise ArchiveError(f"{archive}: member name {name!r} is not UTF-8",
                           hint="rename the file; rtenv needs UTF-8 file names") from None
    if size > limits.max_path_bytes:
        raise ArchiveError(f"{archive}: member path {name[:80]!r}... is {size} bytes, over "
                           f"the limit of {limits.max_path_bytes}", hint="shorten the path")
    norm = posixpath.normpath(name)
    if size > NAME_MAX and any(len(p.encode("utf-8")) > NAME_MAX for p in norm.split("/")):
        raise ArchiveError(f"{archive}: a component of {name[:80]!r}... is over {NAME_MAX} "
                           "bytes", hint="shorten the file name")
    return norm


def _check_link_target(name: str, target: str, archive: str) -> None:
    if not target or "\x00" in target or target.startswith("/"):
        raise UnsafeArchiveError(f"{archive}: symlink {name!r} points outside the tree "
                                 f"({target!r})", hint="links must be relative and stay inside")


# -- planning: zip ---------------------------------------------------------------------------------
def _zip_name(info: Any, archive: str) -> tuple[str, int]:
    """The member's name as UTF-8 text and its raw length; an unflagged name must be UTF-8 too
    (zip tools on Unix write UTF-8 without the flag; cp437 text would be mojibake on disk)."""
    orig = info.orig_filename
    if "\x00" in orig:
        raise UnsafeArchiveError(f"{archive}: member name {orig!r} holds a NUL byte")
    if orig.isascii():
        return orig, len(orig)
    if info.flag_bits & _FLAG_UTF8:
        return orig, len(orig.encode("utf-8"))
    raw = orig.encode("cp437")
    try:
        return raw.decode("utf-8"), len(raw)
    except UnicodeDecodeError:
        raise ArchiveError(f"{archive}: member name {raw!r} is not UTF-8",
                           hint="rebuild the archive with UTF-8 file names") from None


Source = Path | IO[bytes]  # an archive by path, or one already open (read from its start)


@contextmanager
def _reading(source: Source) -> Iterator[IO[bytes]]:
    """`source` open for reading at its start: a path is opened (and closed after); an open
    file is rewound and stays open (the agent's file:// archive, opened once beneath its
    root: it is never reopened by name)."""
    if isinstance(source, Path):
        with source.open("rb") as fh:
            yield fh
    else:
        source.seek(0)
        yield source


def _declared_count(fh: IO[bytes]) -> int:
    """The member count a zip's end records declare (zip64 included), 0 if none is found."""
    import struct

    size = fh.seek(0, os.SEEK_END)
    fh.seek(max(0, size - (1 << 16) - 22))
    tail = fh.read()
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) < at + 22:
        return 0
    count: int = struct.unpack_from("<H", tail, at + 10)[0]
    loc = at - 20
    if loc >= 0 and tail[loc:loc + 4] == b"PK\x06\x07":
        (rec,) = struct.unpack_from("<Q", tail, loc + 8)
        fh.seek(rec)
        head = fh.read(40)
        if len(head) == 40 and head[:4] == b"PK\x06\x06":  # noqa: PLR2004 - record size
            count = max(count, struct.unpack_from("<Q", head, 32)[0])
    return count


def _label(source: Source, label: str | None) -> str:
    return label or (source.name if isinstance(source, Path) else str(source.name))


def open_zip(source: Source, limits: Limits, label: str | None = None) -> Any:
    """An open ZipFile, or ArchiveError; its declared member count is checked first."""
    import zipfile

    label = _label(source, label)
    try:
        with _reading(source) as fh:
            count = _declared_count(fh)
        if count > limits.max_members:
            raise ArchiveError(f"{label}: {count} members, over the limit of "
                               f"{limits.max_members}")
        return zipfile.ZipFile(source if isinstance(source, Path) else _rewound(source))
    except UnicodeDecodeError as exc:
        raise ArchiveError(f"{label}: member name {exc.object!r} is flagged UTF-8 but is not",
                           hint="rebuild the archive with UTF-8 file names") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError,
            NotImplementedError) as exc:
        raise ArchiveError(f"{label}: not a readable zip archive ({exc})") from exc


def _rewound(fh: IO[bytes]) -> IO[bytes]:
    fh.seek(0)
    return fh


def plan_zip(zf: Any, label: str, limits: Limits) -> list[Member]:
    """Every member of the open zip `zf`, checked (names, methods, overlaps, sizes, limits)."""
    infos = zf.infolist()
    if len(infos) > limits.max_members:
        raise ArchiveError(f"{label}: {len(infos)} members, over the limit of "
                           f"{limits.max_members}")
    members: list[Member] = []
    spans: list[tuple[int, int, str]] = []
    total = packed = 0
    for info in infos:
        text, raw_len = _zip_name(info, label)
        if info.flag_bits & _FLAG_ENCRYPTED:
            raise ArchiveError(f"{label}: member {text!r} is encrypted",
                               hint="rtenv unpacks unencrypted archives only")
        if info.compress_type not in ZIP_METHODS:
            raise ArchiveError(f"{label}: member {text!r} uses compression method "
                               f"{info.compress_type}, which is not supported",
                               hint="use stored or deflate (zip's default)")
        spans.append((info.header_offset,
                      info.header_offset + _ZIP_HEADER + raw_len + info.compress_size, text))
        name = check_member_name(text, label, limits)
        mode = info.external_attr >> 16
        if stat.S_ISLNK(mode):
            if info.file_size > limits.max_path_bytes:
                raise UnsafeArchiveError(f"{label}: symlink {text!r} has a target of "
                                         f"{info.file_size} bytes")
            members.append(Member(name, "link", info.file_size, ref=info))
        elif text.endswith("/"):
            members.append(Member(name, "dir", ref=info))
        else:
            if (info.file_size > RATIO_MIN_BYTES
                    and info.file_size > limits.max_ratio * max(info.compress_size, 1)):
                raise UnsafeArchiveError(
                    f"{label}: {text!r} expands {info.file_size} bytes from "
                    f"{info.compress_size} (ratio over {limits.max_ratio:g}): decompression bomb")
            if info.file_size == 0 and info.CRC != 0:
                raise ArchiveError(f"{label}: member {text!r} is corrupt (empty, with a CRC)")
            total += info.file_size
            packed += info.compress_size
            members.append(Member(name, "file", info.file_size, safe_mode(mode), ref=info))
    from rtenv_cli.core.packaging.zipreuse import central_directory_offset

    _check_spans(spans, central_directory_offset(zf), label)
    _check_total(total, packed, label, limits)
    for i, m in enumerate(members):
        if m.kind == "link":
            members[i] = Member(m.name, "link", m.size, link=_read_link(zf, m, label), ref=m.ref)
    return members


def _check_spans(spans: list[tuple[int, int, str]], end: int, label: str) -> None:
    """Each entry's local header and data must lie before the next one's and before the
    central directory: shared or overlapping data would inflate the same bytes many times."""
    spans.sort()
    for (start, stop, name), nxt in zip(spans, [*spans[1:], (end, end, "")], strict=True):
        if start < 0 or stop > nxt[0]:
            what = f"the entry {nxt[2]!r}" if nxt[2] else "the central directory"
            raise UnsafeArchiveError(f"{label}: entry {name!r} overlaps {what}",
                                     hint="zip entries must not share data")


def _check_total(total: int, packed: int, label: str, limits: Limits) -> None:
    if total > limits.max_total_bytes:
        raise UnsafeArchiveError(f"{label}: expands to {total} bytes, over the limit of "
                                 f"{limits.max_total_bytes}")
    if total > RATIO_MIN_BYTES and total > limits.max_ratio * max(packed, 1):
        raise UnsafeArchiveError(f"{label}: expands to {total} bytes from {packed} (ratio over "
                                 f"{limits.max_ratio:g}): decompression bomb")


def _read_link(zf: Any, m: Member, label: str) -> str:
    with zip_member(zf, m, label) as src:
        data = read_all(src, m.size, m.name, label)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ArchiveError(f"{label}: symlink {m.name!r} has a target that is not UTF-8") from None


class zip_member:  # lower case: used like open()
    """`zf.open(member)`, with zipfile's errors (bad method, encryption) made ArchiveError."""

    def __init__(self, zf: Any, m: Member, label: str) -> None:
        self.zf, self.m, self.label = zf, m, label

    def __enter__(self) -> IO[bytes]:
        try:
            self.fh: IO[bytes] = self.zf.open(self.m.ref)
        except read_errors() as exc:
            raise ArchiveError(f"{self.label}: cannot read member {self.m.name!r} ({exc})",
                               hint="the archive is corrupt; build it again") from exc
        return self.fh

    def __exit__(self, *exc: object) -> None:
        self.fh.close()


@functools.cache
def read_errors() -> tuple[type[BaseException], ...]:
    """What reading a damaged archive raises (imported on first use: startup stays light)."""
    import bz2  # noqa: F401 - bz2 and lzma raise plain OSError/LZMAError while inflating
    import lzma
    import tarfile
    import zipfile
    import zlib

    return (zipfile.BadZipFile, tarfile.TarError, zlib.error, lzma.LZMAError, EOFError,
            NotImplementedError, RuntimeError, ValueError, OSError)



def read_chunks(src: IO[bytes], size: int, name: str, label: str) -> Iterator[bytes]:
    """The member's bytes in chunks; ArchiveError if they are corrupt or not `size` bytes."""
    seen = 0
    while True:
        try:
            chunk = src.read(_CHUNK)
        except read_errors() as exc:
            raise ArchiveError(f"{label}: member {name!r} is corrupt ({exc})",
                               hint="the archive is damaged; build or download it again"
                               ) from exc
        if not chunk:
            break
        seen += len(chunk)
        if seen > size:
            raise UnsafeArchiveError(f"{label}: member {name!r} expands beyond its declared "
                                     "size")
        yield chunk
    if seen != size:
        raise ArchiveError(f"{label}: member {name!r} holds {seen} bytes, its header says {size}",
                           hint="the archive is damaged; build or download it again")


def read_all(src: IO[bytes], size: int, name: str, label: str) -> bytes:
    return b"".join(read_chunks(src, size, name, label))


# -- planning: tar ---------------------------------------------------------------------------------
class _Capped(io.RawIOBase):
    """A decompressed tar stream that refuses to go past `cap` bytes (seeking forward in a
    compressed stream inflates everything skipped, so that is bounded too)."""

    def __init__(self, raw: Any, cap: int, label: str, *, owns: bool = True) -> None:
        super().__init__()
        self.raw, self.cap, self.label, self.pos, self.owns = raw, cap, label, 0, owns

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def _over(self, pos: int) -> None:
        if pos > self.cap:
            raise UnsafeArchiveError(f"{self.label}: the tar stream expands beyond {self.cap} "
                                     "bytes: decompression bomb")

    def read(self, n: int = -1) -> bytes:
        n = self.cap + 1 - self.pos if n < 0 else n
        self._over(self.pos + n)
        data = self.raw.read(n)
        self.pos += len(data)
        return data

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def seek(self, pos: int, whence: int = 0) -> int:
        target = {0: pos, 1: self.pos + pos}.get(whence)
        if target is None:
            raise io.UnsupportedOperation("seek from the end")
        self._over(target)
        self.pos = self.raw.seek(target)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def close(self) -> None:
        if self.owns:  # a decompressor of ours; never the caller's open archive
            self.raw.close()
        super().close()


@contextmanager
def _open_tar(source: Source, limits: Limits, label: str) -> Iterator[Any]:
    import bz2
    import gzip
    import lzma
    import tarfile

    with _reading(source) as fh:
        magic = fh.read(6)
        fh.seek(0)
        opener: Any = (gzip.open if magic.startswith(b"\x1f\x8b") else
                       lzma.open if magic.startswith(b"\xfd7zXZ\x00") else
                       bz2.open if magic.startswith(b"BZh") else None)
        stream = opener(fh, "rb") if opener is not None else fh  # neither closes `fh`
        cap = limits.max_total_bytes + (limits.max_members + 2) * _TAR_HEADER_SLACK
        with _Capped(stream, cap, label, owns=stream is not fh) as capped:
            try:  # the TarFile is closed by the `with tf` below
                tf = tarfile.open(fileobj=capped, mode="r:")  # noqa: SIM115
            except read_errors() as exc:
                raise ArchiveError(f"{label}: not a readable tar archive ({exc})") from exc
            with tf:
                yield tf


def _tar_members(tf: Any, label: str) -> Iterator[tuple[int, Any]]:
    ordinal = 0
    while True:
        try:
            info = tf.next()
        except read_errors() as exc:
            raise ArchiveError(f"{label}: corrupt tar archive after {ordinal} members ({exc})",
                               hint="the archive is damaged; build or download it again"
                               ) from exc
        if info is None:
            return
        yield ordinal, info
        ordinal += 1


def plan_tar(source: Source, limits: Limits, label: str | None = None) -> list[Member]:
    label = _label(source, label)
    with _reading(source) as fh:
        archive_size = fh.seek(0, os.SEEK_END)
    members: list[Member] = []
    total = 0
    with _open_tar(source, limits, label) as tf:
        for ordinal, info in _tar_members(tf, label):
            if ordinal >= limits.max_members:
                raise ArchiveError(f"{label}: more than {limits.max_members} members, over the "
                                   "limit")
            text = info.name
            if info.isdir() and text.removeprefix("./").rstrip("/") in ("", "."):
                continue  # the archive's own root
            name = check_member_name(text, label, limits)
            if info.issym():
                if len(info.linkname.encode("utf-8", "surrogateescape")) > limits.max_path_bytes:
                    raise UnsafeArchiveError(f"{label}: symlink {text!r} has an overlong target")
                try:
                    info.linkname.encode("utf-8")
                except UnicodeEncodeError:
                    raise ArchiveError(f"{label}: symlink {text!r} has a target that is not "
                                       "UTF-8") from None
                members.append(Member(name, "link", link=info.linkname, ref=ordinal))
            elif info.isdir():
                members.append(Member(name, "dir", ref=ordinal))
            elif info.isfile():
                total += info.size
                _check_total(total, archive_size, label, limits)  # before its data is skipped
                members.append(Member(name, "file", info.size, safe_mode(info.mode), ref=ordinal))
            else:
                what = "a hard link" if info.islnk() else "a device, FIFO or other special file"
                raise UnsafeArchiveError(f"{label}: member {text!r} is {what}, which rtenv does "
                                         "not unpack", hint="archive regular files only")
    return members


# -- the tree: duplicates, links ------------------------------------------------------------------
def parents(name: str) -> Iterator[str]:
    pos = name.find("/")
    while pos != -1:
        yield name[:pos]
        pos = name.find("/", pos + 1)


def check_tree(members: list[Member], label: str) -> None:
    """Refuse duplicates, members below a link, and links that leave the tree."""
    kinds: dict[str, str] = {}
    for m in members:
        if m.name == ".":
            if m.kind == "dir":
                continue
            raise UnsafeArchiveError(f"{label}: member {m.name!r} names the root itself")
        seen = kinds.get(m.name)
        if seen is not None and not (seen == m.kind == "dir"):
            raise UnsafeArchiveError(f"{label}: {m.name!r} appears twice (as {seen} and "
                                     f"{m.kind})", hint="an archive holds each path once")
        kinds[m.name] = m.kind
    links = {m.name: m.link for m in members if m.kind == "link"}
    for m in members:
        for parent in parents(m.name):
            kind = kinds.get(parent)
            if kind == "link":
                raise UnsafeArchiveError(f"{label}: {m.name!r} lies below the symlink "
                                         f"{parent!r} of the same archive")
            if kind == "file":
                raise UnsafeArchiveError(f"{label}: {m.name!r} lies below the file {parent!r}")
    resolver = _Resolver(links, label)
    for name, target in links.items():
        _check_link_target(name, target, label)
        resolver.resolve(name)


class _Resolver:
    """Resolves the archive's links inside its own tree, as the kernel will once written."""

    def __init__(self, links: dict[str, str], label: str) -> None:
        self.links, self.label = links, label
        self.done: dict[str, list[str]] = {}
        self.work = 0

    def resolve(self, name: str) -> list[str]:
        hops = [0]
        return self._follow(name, hops)

    def _follow(self, name: str, hops: list[int]) -> list[str]:
        if name in self.done:
            return self.done[name]
        hops[0] += 1
        if hops[0] > MAX_LINK_HOPS:
            raise UnsafeArchiveError(f"{self.label}: symlink {name!r} takes more than "
                                     f"{MAX_LINK_HOPS} links to resolve (a loop?)")
        stack = name.split("/")[:-1]
        for part in self.links[name].split("/"):
            self.work += 1 + len(stack)
            if self.work > _LINK_WORK:
                raise UnsafeArchiveError(f"{self.label}: symlinks too intricate to check")
            if part in ("", "."):
                continue
            if part == "..":
                if not stack:
                    raise UnsafeArchiveError(
                        f"{self.label}: symlink {name!r} escapes the tree "
                        f"({self.links[name]})", hint="links must stay inside the package")
                stack.pop()
                continue
            stack.append(part)
            here = "/".join(stack)
            if here in self.links:
                stack = list(self._follow(here, hops))
        self.done[name] = stack
        return stack


def top_level_dir(members: list[Member]) -> str | None:
    """Ray's single top-level directory of a remote zip (ignoring __MACOSX), or None."""
    tops = {m.name.split("/", 1)[0] for m in members} - {MAC_OS_DIR}
    if len(tops) != 1:
        return None
    top = next(iter(tops))
    if any(m.name == top and m.kind != "dir" for m in members):
        return None
    return top if any("/" in m.name for m in members if m.name.split("/", 1)[0] == top) else None


def _strip(members: list[Member], top: str) -> list[Member]:
    out = []
    for m in members:
        if m.name.startswith(top + "/"):
            out.append(Member(m.name[len(top) + 1:], m.kind, m.size, m.mode, m.link, m.ref))
    return out


# -- writing ---------------------------------------------------------------------------------------
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_ARCHIVE_ERRNOS = {errno.ENAMETOOLONG, errno.EEXIST, errno.ENOTDIR, errno.ELOOP, errno.EINVAL,
                   errno.EISDIR, errno.ENOENT}


class _Dirs:
    """Descriptors of the directories written to, opened component by component from the
    root without following links (a few are kept: members come grouped by directory)."""

    def __init__(self, root_fd: int) -> None:
        self.root_fd = root_fd
        self.open: OrderedDict[str, int] = OrderedDict()

    def fd(self, rel: str) -> int:
        if not rel:
            return self.root_fd
        fd = self.open.get(rel)
        if fd is not None:
            self.open.move_to_end(rel)
            return fd
        parent, _, name = rel.rpartition("/")
        fd = os.open(name, _DIR_FLAGS, dir_fd=self.fd(parent))
        self.open[rel] = fd
        if len(self.open) > _OPEN_DIRS:
            os.close(self.open.popitem(last=False)[1])
        return fd

    def close(self) -> None:
        for fd in self.open.values():
            os.close(fd)
        self.open.clear()


def _write_tree(members: list[Member], files: Iterator[tuple[Member, IO[bytes] | None]],
                root_fd: int, label: str) -> int:
    dirs = {parent for m in members for parent in parents(m.name)}
    dirs.update(m.name for m in members if m.kind == "dir" and m.name != ".")
    tree = _Dirs(root_fd)
    written = 0
    try:
        for rel in sorted(dirs, key=lambda d: d.split("/")):
            parent, _, name = rel.rpartition("/")
            pfd = tree.fd(parent)
            os.mkdir(name, _DIR_MODE, dir_fd=pfd)
            os.chmod(name, _DIR_MODE, dir_fd=pfd)  # umask: a store entry is readable by all
        for m, src in files:
            parent, _, name = m.name.rpartition("/")
            fd = os.open(name, _FILE_FLAGS, 0o600, dir_fd=tree.fd(parent))
            try:
                if src is not None:
                    for chunk in read_chunks(src, m.size, m.name, label):
                        view = memoryview(chunk)
                        while view:
                            view = view[os.write(fd, view):]
                os.fchmod(fd, m.mode)
            finally:
                os.close(fd)
            written += m.size
        for m in members:
            if m.kind == "link":
                parent, _, name = m.name.rpartition("/")
                os.symlink(m.link, name, dir_fd=tree.fd(parent))
    except OSError as exc:
        if exc.errno not in _ARCHIVE_ERRNOS:
            raise
        raise ArchiveError(f"{label}: cannot unpack a member ({exc.strerror}: {exc.filename})"
                           ) from exc
    finally:
        tree.close()
    return written


def _zip_files(zf: Any, members: list[Member], label: str
               ) -> Generator[tuple[Member, IO[bytes] | None], None, None]:
    """Files grouped by directory; an empty one is not opened (its CRC was checked)."""
    for m in sorted((m for m in members if m.kind == "file"),
                    key=lambda m: m.name.rpartition("/")[0]):
        if m.size == 0:
            yield m, None
            continue
        with zip_member(zf, m, label) as src:
            yield m, src


def _tar_files(source: Source, members: list[Member], limits: Limits, label: str
               ) -> Generator[tuple[Member, IO[bytes] | None], None, None]:
    wanted = {m.ref: m for m in members if m.kind == "file"}
    if not wanted:
        return
    with _open_tar(source, limits, label) as tf:
        for ordinal, info in _tar_members(tf, label):
            m = wanted.get(ordinal)
            if m is not None:
                src = tf.extractfile(info)
                yield m, src
                src.close()


def extract(archive: Source, dest: Path, *, strip_top_level: bool = False,
            limits: Limits | None = None, label: str | None = None) -> int:
    """Extract `archive` (a path, or a file already open: read from it, never reopened) into
    the new directory `dest`; return the bytes written. `label` names it in errors (default:
    its file name).

    `strip_top_level` mirrors Ray's handling of remote (file://, http(s)://) zips: a single
    top-level directory is removed. Raises ArchiveError (UnsafeArchiveError for attacks) and
    leaves nothing behind.
    """
    limits = limits or Limits()
    label = _label(archive, label)
    if isinstance(archive, Path):  # opened once, here, for every read below
        with _reading(archive) as fh:
            return extract(fh, dest, strip_top_level=strip_top_level, limits=limits,
                           label=label)
    is_zip = label.endswith(".zip") or _looks_zip(archive, label)
    zf = open_zip(archive, limits, label) if is_zip else None
    try:
        members = (plan_zip(zf, label, limits) if zf is not None
                   else plan_tar(archive, limits, label))
        top = top_level_dir(members) if strip_top_level else None
        if top is not None:
            members = _strip(members, top)
        check_tree(members, label)
        files = (_zip_files(zf, members, label) if zf is not None
                 else _tar_files(archive, members, limits, label))
        dest.mkdir(parents=True, exist_ok=False)
        try:
            root_fd = os.open(dest, _DIR_FLAGS & ~os.O_NOFOLLOW)
            try:
                return _write_tree(members, files, root_fd, label)
            finally:
                os.close(root_fd)
                files.close()
        except BaseException:
            shutil.rmtree(dest, ignore_errors=True)
            raise
    finally:
        if zf is not None:
            zf.close()


def _looks_zip(fh: IO[bytes], label: str) -> bool:
    try:
        with _reading(fh) as start:
            return start.read(4) == b"PK\x03\x04"
    except OSError as exc:
        raise ArchiveError(f"cannot read the archive {label}: {exc.strerror}") from exc


def rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
