"""Safe extraction: every member is checked BEFORE anything is written.

Refused outright (Ray only warns and skips): absolute paths, drive letters, backslashes, `..`,
symlinks whose target leaves the tree, members that are neither file, directory nor link, and
decompression bombs (total size over a limit, or a member whose expansion ratio is absurd).
While writing, a member may not expand beyond the size its header declared.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from rtenv_cli.core.errors import PackagingError

MAX_TOTAL_BYTES = 8 * 2**30
MAX_RATIO = 200  # deflate tops out near 1000:1 only for pathological input
RATIO_MIN_BYTES = 1 << 20  # small members may compress very well (empty-ish files)
MAC_OS_DIR = "__MACOSX"


@dataclass(frozen=True)
class Limits:
    max_total_bytes: int = MAX_TOTAL_BYTES
    max_ratio: float = MAX_RATIO


class UnsafeArchiveError(PackagingError):
    kind = "unsafe-archive"


def _check_name(name: str, archive: str) -> str:
    if "\x00" in name or "\\" in name:
        raise UnsafeArchiveError(f"{archive}: unsafe member name {name!r}")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise UnsafeArchiveError(f"{archive}: absolute path {name!r}",
                                 hint="packages must hold relative paths only")
    norm = posixpath.normpath(name)
    if norm == ".." or norm.startswith("../") or ".." in name.split("/"):
        raise UnsafeArchiveError(f"{archive}: path escapes the tree {name!r}",
                                 hint="remove '..' components from the archive")
    return norm


def _check_link(name: str, target: str, archive: str) -> None:
    if target.startswith("/") or "\x00" in target:
        raise UnsafeArchiveError(f"{archive}: symlink {name!r} points outside the tree ({target})")
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
    if joined == ".." or joined.startswith("../"):
        raise UnsafeArchiveError(f"{archive}: symlink {name!r} escapes the tree ({target})")


@dataclass(frozen=True)
class _Member:
    name: str
    kind: str  # file | dir | link
    size: int
    mode: int
    link: str = ""


def _plan_zip(path: Path, limits: Limits) -> list[_Member]:
    import zipfile

    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise PackagingError(f"{path.name}: not a zip archive ({exc})") from exc
    members, total = [], 0
    with zf:
        for info in zf.infolist():
            name = _check_name(info.filename, path.name)
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                target = zf.read(info).decode("utf-8", "replace")
                _check_link(name, target, path.name)
                members.append(_Member(name, "link", 0, 0o777, target))
                continue
            if info.is_dir():
                members.append(_Member(name, "dir", 0, 0o755))
                continue
            total += info.file_size
            if (info.file_size > RATIO_MIN_BYTES
                    and info.file_size > limits.max_ratio * max(info.compress_size, 1)):
                raise UnsafeArchiveError(
                    f"{path.name}: {info.filename!r} expands {info.file_size} bytes from "
                    f"{info.compress_size} (ratio over {limits.max_ratio:g}): decompression bomb")
            members.append(_Member(name, "file", info.file_size, stat.S_IMODE(mode) or 0o644))
    if total > limits.max_total_bytes:
        raise UnsafeArchiveError(f"{path.name}: expands to {total} bytes, over the limit of "
                                 f"{limits.max_total_bytes}")
    return members


def _plan_tar(path: Path, limits: Limits) -> list[_Member]:
    import tarfile

    members, total = [], 0
    try:
        with tarfile.open(path, "r:*") as tf:
            for info in tf.getmembers():
                name = _check_name(info.name.removeprefix("./") or ".", path.name)
                if name == ".":
                    continue
                if info.issym():
                    _check_link(name, info.linkname, path.name)
                    members.append(_Member(name, "link", 0, 0o777, info.linkname))
                elif info.isdir():
                    members.append(_Member(name, "dir", 0, 0o755))
                elif info.isfile():
                    total += info.size
                    members.append(_Member(name, "file", info.size, info.mode & 0o777 or 0o644))
                else:
                    raise UnsafeArchiveError(f"{path.name}: unsupported member type for {name!r}")
    except tarfile.TarError as exc:
        raise PackagingError(f"{path.name}: not a tar archive ({exc})") from exc
    if total > limits.max_total_bytes:
        raise UnsafeArchiveError(f"{path.name}: expands to {total} bytes, over the limit of "
                                 f"{limits.max_total_bytes}")
    return members


def _copy_capped(src, dst_path: Path, cap: int, name: str) -> None:  # type: ignore[no-untyped-def]
    written = 0
    with dst_path.open("wb") as out:
        while chunk := src.read(1 << 20):
            written += len(chunk)
            if written > cap:
                raise UnsafeArchiveError(f"{name!r} expands beyond its declared size")
            out.write(chunk)


def _top_level_dir(members: list[_Member]) -> str | None:
    tops = {m.name.split("/", 1)[0] for m in members} - {MAC_OS_DIR}
    if len(tops) != 1:
        return None
    top = next(iter(tops))
    if any(m.name == top and m.kind != "dir" for m in members):
        return None
    return top if any("/" in m.name for m in members if m.name.split("/", 1)[0] == top) else None


def extract(archive: Path, dest: Path, *, strip_top_level: bool = False,
            limits: Limits | None = None) -> int:
    """Extract `archive` into the new directory `dest`; return the bytes written.

    `strip_top_level` mirrors Ray's handling of remote (file://, http(s)://) zips: a single
    top-level directory is removed.
    """
    limits = limits or Limits()
    is_zip = archive.suffix == ".zip" or _looks_zip(archive)
    members = _plan_zip(archive, limits) if is_zip else _plan_tar(archive, limits)
    strip = _top_level_dir(members) if strip_top_level else None
    dest.mkdir(parents=True, exist_ok=False)
    written = 0
    opener = _zip_reader(archive) if is_zip else _tar_reader(archive)
    # links last: no file is ever written through a link from the archive, and each link is
    # resolved once all exist (a chain of individually harmless links can still escape)
    ordered = sorted(members, key=lambda m: m.kind == "link")
    real_dest = os.path.realpath(dest)
    links: list[tuple[str, Path]] = []
    with opener as read:
        for m in ordered:
            rel = m.name
            if strip:
                if rel.split("/", 1)[0] == MAC_OS_DIR:
                    continue
                rel = rel[len(strip) + 1:] if rel.startswith(strip + "/") else ""
                if not rel:
                    continue
            target = dest / rel
            if m.kind == "dir":
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if m.kind == "link":
                os.symlink(m.link, target)
                links.append((m.name, target))
                continue
            with read(m.name) as src:
                _copy_capped(src, target, m.size, m.name)
            os.chmod(target, m.mode)
            written += m.size
    for name, link in links:
        if os.path.commonpath([real_dest, os.path.realpath(link)]) != real_dest:
            raise UnsafeArchiveError(f"{archive.name}: symlink {name!r} escapes the tree")
    return written


def _looks_zip(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(4) == b"PK\x03\x04"


class _zip_reader:
    def __init__(self, path: Path) -> None:
        import zipfile

        self.zf = zipfile.ZipFile(path)
        self._names = {posixpath.normpath(i.filename): i for i in self.zf.infolist()}

    def __enter__(self):  # type: ignore[no-untyped-def]
        return lambda name: self.zf.open(self._names[name])

    def __exit__(self, *exc: object) -> None:
        self.zf.close()


class _tar_reader:
    def __init__(self, path: Path) -> None:
        import tarfile

        self.tf = tarfile.open(path, "r:*")  # noqa: SIM115 - closed in __exit__
        self._names = {posixpath.normpath(i.name.removeprefix("./")): i
                       for i in self.tf.getmembers()}

    def __enter__(self):  # type: ignore[no-untyped-def]
        return lambda name: self.tf.extractfile(self._names[name])

    def __exit__(self, *exc: object) -> None:
        self.tf.close()


def dir_size(path: Path) -> int:
    """Bytes on disk below `path` (files and links, not following links)."""
    total = 0
    for root, dirs, files in os.walk(path):
        for name in files + dirs:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            total += st.st_blocks * 512 if not stat.S_ISDIR(st.st_mode) else 0
    return total


def rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
