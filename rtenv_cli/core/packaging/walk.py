"""Ray 2.60's package walk (`_dir_travel`): which entries are hashed and which are zipped.

Pre-order from the root (relative path "."), following symlinks for files and directories.
Each directory's own .gitignore/.rayignore join the active matchers before the directory is
tested; a matched path is dropped with its subtree. Every kept path is hashed (directories by
name); files and directories with no children on disk are zipped. Where Ray hangs or silently
ships something odd, we raise a PackagingError instead (FIFOs, symlink loops, non-UTF-8 names,
unreadable files) or warn (broken symlinks and sockets: hashed by name, not zipped, like Ray).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rtenv_cli.core.errors import PackagingError
from rtenv_cli.core.packaging.ignore import (
    Kind,
    Matcher,
    excludes_matcher,
    first_match,
    ignore_file_matchers,
)

_PY_SEARCH_LIMIT = 20_000  # entries looked at per ignored directory when searching for .py


@dataclass(frozen=True)
class Entry:
    relpath: str  # "." for the root; "/"-separated (Linux os.sep, as Ray hashes it)
    path: Path
    is_dir: bool
    size: int
    mode: int  # st_mode (following symlinks)
    mtime_ns: int = 0
    ino: int = 0
    in_zip: bool = True  # files and empty directories; not dirs with children, not specials
    special: bool = False  # broken symlink or socket: hashed by name only, never zipped

    def to_dict(self) -> dict[str, object]:
        return {"path": self.relpath, "is_dir": self.is_dir, "size": self.size,
                "mode": self.mode & 0o7777}


@dataclass(frozen=True)
class PackageScan:
    root: Path
    kind: str
    entries: tuple[Entry, ...]
    file_count: int
    total_bytes: int
    ignored_py_dirs: tuple[str, ...] = ()
    root_excluded: bool = False
    warnings: tuple[str, ...] = ()
    single_file: bool = False
    ignored_top: tuple[tuple[str, str], ...] = ()  # (top-level name, rule) that were dropped

    def files(self) -> list[Entry]:
        return [e for e in self.entries if not e.is_dir and not e.special]


@dataclass
class _State:
    root: Path
    env: Mapping[str, str]
    entries: list[Entry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    ignored_top: list[tuple[str, str]] = field(default_factory=list)
    root_excluded: bool = False


def _check_name(path: str) -> None:
    try:
        path.encode()
    except UnicodeEncodeError:
        raise PackagingError(f"file name is not valid UTF-8: {path!r}",
                             hint="rename it (Ray cannot hash it) or exclude it",
                             path=path) from None


def _visit(  # noqa: PLR0912 - one branch per file type, as Ray meets them
    st: _State, path: str, rel: str, matchers: list[Matcher],
           chain: tuple[tuple[int, int], ...]) -> None:
    _check_name(rel)
    try:
        s = os.stat(path)
    except OSError as exc:
        s = None
        if not os.path.islink(path) and not isinstance(exc, FileNotFoundError):
            raise PackagingError(f"cannot stat {path}: {exc.strerror}", path=path) from exc
    is_dir = s is not None and stat.S_ISDIR(s.st_mode)
    added = ignore_file_matchers(Path(path), rel, st.env) if is_dir else []
    active = matchers + added
    rule = first_match(active, rel)
    if rule is not None:
        if rel == ".":
            st.root_excluded = True
        elif "/" not in rel:
            st.ignored_top.append((rel, rule))
        return
    if s is None:
        st.warnings.append(f"{rel}: broken symlink (hashed by name only, not packaged, as Ray)")
        st.entries.append(Entry(rel, Path(path), False, 0, 0, special=True, in_zip=False))
        return
    if is_dir:
        key = (s.st_dev, s.st_ino)
        if key in chain:
            raise PackagingError(f"symlink loop at {path}",
                                 hint="Ray would package this tree ~40 times over; remove the "
                                 "link or exclude it", path=path)
        try:
            names = os.listdir(path)
        except OSError as exc:
            raise PackagingError(f"cannot list {path}: {exc.strerror}", path=path,
                                 hint="fix its permissions or exclude it") from exc
        st.entries.append(Entry(rel, Path(path), True, 0, s.st_mode, s.st_mtime_ns, s.st_ino,
                                in_zip=not names))
        for name in names:
            _visit(st, os.path.join(path, name), name if rel == "." else f"{rel}/{name}",
                   active, (*chain, key))
        return
    if stat.S_ISREG(s.st_mode):
        if not os.access(path, os.R_OK):
            raise PackagingError(f"cannot read {path}: permission denied", path=path,
                                 hint="fix its permissions or exclude it")
        st.entries.append(Entry(rel, Path(path), False, s.st_size, s.st_mode, s.st_mtime_ns,
                                s.st_ino))
    elif stat.S_ISFIFO(s.st_mode):
        raise PackagingError(f"{path} is a named pipe (FIFO)",
                             hint="Ray hangs forever reading it; exclude it", path=path)
    elif stat.S_ISSOCK(s.st_mode):
        st.warnings.append(f"{rel}: socket (hashed by name only, not packaged, as Ray)")
        st.entries.append(Entry(rel, Path(path), False, 0, s.st_mode, special=True,
                                in_zip=False))
    else:
        raise PackagingError(f"{path} is a device file", hint="exclude it", path=path)


def _has_py(d: str) -> bool:
    seen = 0
    for _dirpath, _dirs, files in os.walk(d):
        if any(f.endswith(".py") for f in files):
            return True
        seen += len(files) + len(_dirs)
        if seen > _PY_SEARCH_LIMIT:
            return False
    return False


def scan_package(root: Path, *, kind: Kind, excludes: Sequence[str] = (),
                 env: Mapping[str, str] | None = None) -> PackageScan:
    """What Ray would hash and zip for `root` (a directory, or a single file)."""
    env = os.environ if env is None else env
    root = Path(root).absolute()
    if root.is_file():
        s = root.stat()
        e = Entry(root.name, root, False, s.st_size, s.st_mode, s.st_mtime_ns, s.st_ino)
        return PackageScan(root, kind, (e,), 1, s.st_size, single_file=True)
    if not root.is_dir():
        raise PackagingError(f"{root}: no such file or directory", path=str(root),
                             hint="relative paths resolve against the runtime_env file's "
                             "directory (or the CWD for a directory argument)")
    st = _State(root, env)
    base = excludes_matcher(kind, excludes, env)
    _visit(st, str(root), ".", [base] if base else [], ())
    entries = tuple(st.entries)
    files = [e for e in entries if not e.is_dir and not e.special]
    py_dirs = tuple(name for name, _ in st.ignored_top
                    if (root / name).is_dir() and _has_py(str(root / name)))
    return PackageScan(root, kind, entries, len(files), sum(e.size for e in files),
                       py_dirs, st.root_excluded, tuple(st.warnings), False,
                       tuple(st.ignored_top))
