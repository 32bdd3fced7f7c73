"""Verify that a package's bytes match the Ray URI it is stored under.

Ray names a directory package `_ray_pkg_<16 hex>.zip` after the XOR of one SHA-1 per path
(`sha1(relpath + content)` for files, `sha1(relpath)` for directories, the root included as "."),
folded into 8 bytes. A zip holds only files and empty directories, so the directory set is rebuilt
from the entries' parents. py_modules zips carry their directory as a top-level prefix that the
hash does not see, and a single-file module hashes without the root: every layout Ray produces is
tried, and the package is accepted when one of them yields the name. Archives named after a SHA-1
of the whole file (`_ray_pkg_<40 hex>.zip|.tar.gz|.tar.xz`) are checked byte for byte.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from rtenv_cli.core.errors import PackagingError
from rtenv_cli.core.packaging.hashing import EMPTY_ACC, fold

DIR_HASH_RE = re.compile(r"^_ray_pkg_([0-9a-f]{16})\.zip$")
FILE_SHA1_RE = re.compile(r"^_ray_pkg_([0-9a-f]{40})\.(zip|tar\.gz|tar\.xz)$")
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,200}$")
_CHUNK = 1 << 20


def check_name(name: str) -> None:
    """Refuse names that are not plain file names (no slashes, no dot-dot)."""
    if not NAME_RE.match(name) or ".." in name:
        raise PackagingError(f"invalid package name {name!r}",
                             hint="use a Ray package name such as _ray_pkg_<hex>.zip")


def _digests_for_zip(path: Path, extra_dirs: Iterable[str] = ()) -> dict[str, bytes]:
    """The Ray hash of `path` under every layout Ray produces (see module doc)."""
    import zipfile

    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise PackagingError(f"not a zip archive: {exc}") from exc
    with zf:
        infos = zf.infolist()
        files = [i for i in infos if not i.is_dir()]
        names = [i.filename.rstrip("/") for i in infos]
        tops = {n.split("/", 1)[0] for n in names}
        prefix = next(iter(tops)) if len(tops) == 1 and all("/" in n for n in
                                                             (i.filename for i in files)) else None
        layouts: dict[str, list[str]] = {"flat": names}
        if prefix is not None:
            layouts["py_module"] = [n[len(prefix) + 1:] for n in names if n != prefix]
        accs: dict[str, bytes] = {}
        file_digests: dict[str, dict[str, bytes]] = {k: {} for k in layouts}
        for info in files:
            hashers = {}
            for layout in layouts:
                rel = info.filename if layout == "flat" else info.filename[len(prefix) + 1:]  # type: ignore[arg-type]
                hashers[layout] = (rel, hashlib.sha1(rel.encode()))  # noqa: S324 - Ray's scheme
            with zf.open(info) as fh:
                while chunk := fh.read(_CHUNK):
                    for _rel, h in hashers.values():
                        h.update(chunk)
            for layout, (rel, h) in hashers.items():
                file_digests[layout][rel] = h.digest()
        for layout, rels in layouts.items():
            dirs = {"."}
            for rel in rels:
                parts = PurePosixPath(rel).parts
                dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
            dirs.update(r for r in rels if r not in file_digests[layout])
            dirs.update(extra_dirs)
            acc = EMPTY_ACC
            for d in sorted(dirs):
                acc = fold(acc, hashlib.sha1(d.encode()).digest())  # noqa: S324 - Ray's scheme
            for digest in file_digests[layout].values():
                acc = fold(acc, digest)
            accs[layout] = acc
        if len(files) == 1 and len(infos) == 1:
            accs["single_file"] = fold(EMPTY_ACC, file_digests["flat"][files[0].filename])
        return accs


def verify_package(name: str, path: Path, *, extra_dirs: Iterable[str] = ()) -> None:
    """Raise PackagingError unless the file at `path` is what `name` says it is. `extra_dirs`:
    relpaths Ray hashed by name that the zip cannot show (directories whose children were all
    excluded), folded into every layout's hash."""
    check_name(name)
    if match := DIR_HASH_RE.match(name):
        want = match.group(1)
        accs = _digests_for_zip(path, tuple(extra_dirs))
        if want not in {acc.hex() for acc in accs.values()}:
            raise PackagingError(
                f"content of {name} does not match its name (hash {accs['flat'].hex()})",
                hint="the upload was truncated or altered; push it again",
            )
        return
    if match := FILE_SHA1_RE.match(name):
        h = hashlib.sha1()  # noqa: S324 - Ray names archives by SHA-1
        with path.open("rb") as fh:
            while chunk := fh.read(_CHUNK):
                h.update(chunk)
        if h.hexdigest() != match.group(1):
            raise PackagingError(f"content of {name} does not match its name",
                                 hint="the upload was truncated or altered; push it again")
        return
    if name.startswith("_ray_pkg_"):
        raise PackagingError(f"{name} is not a Ray package name",
                             hint="Ray names packages _ray_pkg_<16 or 40 hex>.zip")
