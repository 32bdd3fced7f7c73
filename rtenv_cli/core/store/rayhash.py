"""Verify that a package's bytes match the Ray URI it is stored under.

Ray names a directory package `_ray_pkg_<16 hex>.zip` after the XOR of one SHA-1 per path
(`sha1(relpath + content)` for files, `sha1(relpath)` for directories, the root included as "."),
folded into 8 bytes. A zip holds only files and empty directories, so the directory set is rebuilt
from the entries' parents. py_modules zips carry their directory as a top-level prefix that the
hash does not see, and a single-file module hashes without the root: every layout Ray produces is
tried, and the package is accepted when one of them yields the name. Archives named after a SHA-1
of the whole file (`_ray_pkg_<40 hex>.zip|.tar.gz|.tar.xz`) are checked byte for byte.

A directory whose children Ray's excludes all drop is hashed by name but has no zip entry: the
uploader names such directories (`extra_dirs`). Every archive is first checked as the agent will
unpack it (unpack.py): unsafe, corrupt or oversized archives are refused here already, and each
member is inflated once, within the limits, so a small upload cannot cost minutes of CPU.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import PackagingError
from rtenv_cli.core.packaging.hashing import acc_of
from rtenv_cli.core.store.unpack import (
    ArchiveError,
    Limits,
    Member,
    check_member_name,
    check_tree,
    open_zip,
    parents,
    plan_tar,
    plan_zip,
    read_chunks,
    zip_member,
)

DIR_HASH_RE = re.compile(r"^_ray_pkg_([0-9a-f]{16})\.zip$")
FILE_SHA1_RE = re.compile(r"^_ray_pkg_([0-9a-f]{40})\.(zip|tar\.gz|tar\.xz)$")
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,200}$")
_CHUNK = 1 << 20


class ContentMismatchError(PackagingError):
    """A well-formed package whose content hashes to another name than the one it has."""


def check_name(name: str) -> None:
    """Refuse names that are not plain file names (no slashes, no dot-dot)."""
    if not NAME_RE.match(name) or ".." in name:
        raise PackagingError(f"invalid package name {name!r}",
                             hint="use a Ray package name such as _ray_pkg_<hex>.zip")


def _clean_extra(extra_dirs: Iterable[str], label: str, limits: Limits) -> set[str]:
    dirs: set[str] = set()
    for n, rel in enumerate(extra_dirs):
        if n >= limits.max_members:
            raise ArchiveError(f"{label}: more than {limits.max_members} extra directories")
        norm = check_member_name(rel, label, limits)
        if norm != rel or norm == ".":
            raise ArchiveError(f"{label}: extra directory {rel!r} is not a plain relative path")
        dirs.add(norm)
        dirs.update(parents(norm))
    return dirs


def _layouts(members: list[Member]) -> dict[str, tuple[int, list[str]]]:
    """Layout name -> (prefix length to cut, every relative path in it)."""
    files = [m for m in members if m.kind != "dir"]
    names = [m.name for m in members if m.name != "."]
    tops = {n.split("/", 1)[0] for n in names}
    layouts = {"flat": (0, names)}
    if len(tops) == 1 and all("/" in m.name for m in files):
        prefix = next(iter(tops))
        layouts["py_module"] = (len(prefix) + 1, [n[len(prefix) + 1:] for n in names
                                                  if n != prefix])
    return layouts


def _file_digests(zf: Any, files: list[Member], cuts: list[int], label: str
                  ) -> list[dict[str, bytes]]:
    """sha1(relpath + content) of every file, per layout; each member is inflated once."""
    out: list[dict[str, bytes]] = [{} for _ in cuts]
    for m in files:
        hashers = [hashlib.sha1(m.name[cut:].encode()) for cut in cuts]  # noqa: S324 - Ray's
        if m.kind == "link":  # its content is its target, read and checked when planned
            for h in hashers:
                h.update(m.link.encode())
        elif m.size:  # an empty member's CRC was checked when planned
            with zip_member(zf, m, label) as fh:
                for chunk in read_chunks(fh, m.size, m.name, label):
                    for h in hashers:
                        h.update(chunk)
        for digests, cut, h in zip(out, cuts, hashers, strict=True):
            digests[m.name[cut:]] = h.digest()
    return out


def _fold(rels: list[str], digests: dict[str, bytes], extra: set[str], label: str) -> bytes:
    if clash := extra.intersection(digests):
        raise ArchiveError(f"{label}: extra directory {min(clash)!r} is a file of the package")
    dirs = {"."} | extra
    for rel in rels:
        dirs.update(parents(rel))
    dirs.update(r for r in rels if r not in digests)
    named = (hashlib.sha1(d.encode()).digest() for d in dirs)  # noqa: S324 - Ray's scheme
    return acc_of([*named, *digests.values()])


def _digests_for_zip(path: Path, extra_dirs: Iterable[str] = (),
                     limits: Limits | None = None) -> dict[str, bytes]:
    """The Ray hash of `path` under every layout Ray produces (see module doc).

    The zip is checked as the agent will unpack it (names, links, limits, no shared or
    overlapping entries), and each member is inflated once, bounded by its declared size.
    """
    limits = limits or Limits()
    label = path.name
    with open_zip(path, limits) as zf:
        members = plan_zip(zf, label, limits)
        check_tree(members, label)
        extra = _clean_extra(extra_dirs, label, limits)
        layouts = _layouts(members)
        files = [m for m in members if m.kind != "dir"]
        per_layout = _file_digests(zf, files, [cut for cut, _ in layouts.values()], label)
    accs = {layout: _fold(rels, digests, extra, label)
            for (layout, (_cut, rels)), digests in zip(layouts.items(), per_layout, strict=True)}
    if len(files) == 1 and len(members) == 1:  # a single-file module: no "." in its hash
        named = [hashlib.sha1(d.encode()).digest() for d in extra]  # noqa: S324 - Ray's scheme
        accs["single_file"] = acc_of([per_layout[0][files[0].name], *named])
    return accs


def content_named(name: str) -> bool:
    """Whether `name` is one of Ray's content names (`_ray_pkg_<16 hex>.zip`, or a file's
    SHA-1): verify_package checks the content against it. Other names say nothing of it."""
    return bool(DIR_HASH_RE.match(name) or FILE_SHA1_RE.match(name))


def verify_package(name: str, path: Path, *, extra_dirs: Iterable[str] = ()) -> None:
    """Raise PackagingError unless the file at `path` is what `name` says it is.

    `extra_dirs` are relative directories ("/"-separated, no prefix) that Ray's URI hashes but
    its zip does not hold (every child excluded: Ray hashes the name, writes no entry); they are
    folded into every layout's hash. Only `_ray_pkg_<16 hex>.zip` names use them.
    """
    check_name(name)
    if match := DIR_HASH_RE.match(name):
        want = match.group(1)
        accs = _digests_for_zip(path, extra_dirs)
        if want not in {acc.hex() for acc in accs.values()}:
            raise ContentMismatchError(
                f"content of {name} does not match its name (hash {accs['flat'].hex()})",
                hint="the upload was truncated or altered; push it again",
            )
        return
    if match := FILE_SHA1_RE.match(name):
        if match.group(2) == "zip":  # checked as the agent will unpack it
            with open_zip(path, Limits()) as zf:
                check_tree(plan_zip(zf, path.name, Limits()), path.name)
        else:
            check_tree(plan_tar(path, Limits()), path.name)
        h = hashlib.sha1()  # noqa: S324 - Ray names archives by SHA-1
        with path.open("rb") as fh:
            while chunk := fh.read(_CHUNK):
                h.update(chunk)
        if h.hexdigest() != match.group(1):
            raise ContentMismatchError(f"content of {name} does not match its name",
                                       hint="the upload was truncated or altered; push it again")
        return
    if name.startswith("_ray_pkg_"):
        raise PackagingError(f"{name} is not a Ray package name",
                             hint="Ray names packages _ray_pkg_<16 or 40 hex>.zip")
