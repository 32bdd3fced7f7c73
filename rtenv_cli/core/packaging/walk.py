"""Ray 2.60's package walk (`_dir_travel`): which entries are hashed and which are zipped.

Pre-order from the root (relative path "."), following symlinks for files and directories.
Each directory's own .gitignore/.rayignore join the active matchers before the directory is
tested; a matched path is dropped with its subtree. Every kept path is hashed (directories by
name); files and directories with no children on disk are zipped. Where Ray hangs or silently
ships something odd, we raise a PackagingError instead (FIFOs, symlink loops, non-UTF-8 names,
unreadable files) or warn (broken symlinks and sockets: hashed by name, not zipped, like Ray).

The validator walks with packscan.py (beside this module) instead, on these same ignore
matchers: it must go on where this walk raises (each problem becomes a finding), name ignored
`.py` files at any depth (RTE121), and stop at a bound on huge trees; this walk must stop at the
first problem and read every file it keeps. Two walks for two contracts;
tests/test_routes_agree.py and the parity suite check that both keep the same files as Ray.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from rtenv_cli.core.errors import PackagingError
from rtenv_cli.core.packaging.ignore import (
    Kind,
    Matcher,
    any_match,
    excludes_matcher,
    first_match,
    ignore_file_matchers,
)

_PY_SEARCH_LIMIT = 20_000  # entries looked at per ignored directory when searching for .py


# A tuple, with a str path: built once per entry of every scan, it costs a fraction of a
# dataclass or of a Path object per entry (benchmarks/results/
# fastpaths.json: "build 10,000 walk entries as NamedTuples", and the ablation rows after it).
class Entry(NamedTuple):
    relpath: str  # "." for the root; "/"-separated (Linux os.sep, as Ray hashes it)
    fspath: str  # the absolute path (`path` makes the Path when one is needed)
    is_dir: bool
    size: int
    mode: int  # st_mode (following symlinks)
    mtime_ns: int = 0
    ino: int = 0
    in_zip: bool = True  # files and empty directories; not dirs with children, not specials
    special: bool = False  # broken symlink or socket: hashed by name only, never zipped

    @property
    def path(self) -> Path:
        return Path(self.fspath)

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


def _dir_entry(st: _State, path: str, rel: str, s: os.stat_result | None, names: list[str]
               ) -> None:
    if s is None or not names:  # Ray zips empty directories with their mode and mtime
        s = s or os.stat(path)
    st.entries.append(Entry(rel, path, True, 0, s.st_mode, s.st_mtime_ns, s.st_ino,
                            in_zip=not names))


def _list(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return list(it)
    except OSError as exc:
        raise PackagingError(f"cannot list {path}: {exc.strerror}", path=path,
                             hint="fix its permissions or exclude it") from exc


def _visit_dir(  # noqa: PLR0917 - recursive walker, internal
        st: _State, path: str, rel: str, matchers: list[Matcher],
               chain: tuple[tuple[int, int], ...], s: os.stat_result | None) -> None:
    """A directory Ray's walk reaches: its ignore files join, then it is tested, then walked."""
    children = _list(path)
    names = [c.name for c in children]
    added = (ignore_file_matchers(path, rel, st.env)
             if ".gitignore" in names or ".rayignore" in names else [])
    active = matchers + added
    rule = first_match(active, rel)
    if rule is not None:
        if rel == ".":
            st.root_excluded = True
        elif "/" not in rel:
            st.ignored_top.append((rel, rule))
        return
    _dir_entry(st, path, rel, s, names)
    hit = any_match(active)
    for c in children:
        crel = c.name if rel == "." else f"{rel}/{c.name}"
        _visit_child(st, c, crel, active, chain, hit)


def _visit_child(  # noqa: PLR0917 - recursive walker, internal
        st: _State, c: os.DirEntry[str], rel: str, matchers: list[Matcher],
        chain: tuple[tuple[int, int], ...], hit: Callable[[str], bool]) -> None:
    if not c.name.isascii():
        _check_name(rel)
    path = c.path
    link = c.is_symlink()
    try:
        is_dir = c.is_dir()  # follows symlinks; no syscall for plain entries
    except OSError:
        is_dir = False
    if is_dir:
        s = None
        key = (0, 0)
        if link:  # only a symlinked directory can lead back into its ancestors
            s = os.stat(path)
            key = (s.st_dev, s.st_ino)
            if key in chain:
                raise PackagingError(f"symlink loop at {path}",
                                     hint="Ray would package this tree ~40 times over; remove "
                                     "the link or exclude it", path=path)
        _visit_dir(st, path, rel, matchers, (*chain, key) if link else chain, s)
        return
    rule = first_match(matchers, rel) if hit(rel) else None
    if rule is not None:
        if "/" not in rel:
            st.ignored_top.append((rel, rule))
        return
    _file_entry(st, c, rel, path, link)


def _file_entry(st: _State, c: os.DirEntry[str], rel: str, path: str, link: bool) -> None:
    """A kept non-directory: a file, or what Ray hashes by name (broken link, socket)."""
    try:
        s = c.stat()
    except OSError as exc:
        if not link or not isinstance(exc, (FileNotFoundError, OSError)):
            raise PackagingError(f"cannot stat {path}: {exc.strerror}", path=path) from exc
        st.warnings.append(f"{rel}: broken symlink (hashed by name only, not packaged, as Ray)")
        st.entries.append(Entry(rel, path, False, 0, 0, special=True, in_zip=False))
        return
    if stat.S_ISREG(s.st_mode):
        st.entries.append(Entry(rel, path, False, s.st_size, s.st_mode, s.st_mtime_ns,
                                s.st_ino))
    elif stat.S_ISFIFO(s.st_mode):
        raise PackagingError(f"{path} is a named pipe (FIFO)",
                             hint="Ray hangs forever reading it; exclude it", path=path)
    elif stat.S_ISSOCK(s.st_mode):
        st.warnings.append(f"{rel}: socket (hashed by name only, not packaged, as Ray)")
        st.entries.append(Entry(rel, path, False, 0, s.st_mode, special=True, in_zip=False))
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


_MEMO: dict[tuple[object, ...], PackageScan] | None = None


@contextmanager
def memoized_scans() -> Iterator[None]:
    """Within this block, scanning the same package twice returns the first scan.

    `rtenv push` validates (which scans for URIs and sizes) and then packages: one walk of
    the tree serves all of them. Outside the block every call walks afresh.
    """
    global _MEMO  # noqa: PLW0603 - a scoped, single-threaded memo
    outer, _MEMO = _MEMO, ({} if _MEMO is None else _MEMO)
    try:
        yield
    finally:
        _MEMO = outer


def scan_package(root: Path, *, kind: Kind, excludes: Sequence[str] = (),
                 env: Mapping[str, str] | None = None) -> PackageScan:
    """What Ray would hash and zip for `root` (a directory, or a single file)."""
    env = os.environ if env is None else env
    root = Path(root).absolute()
    if _MEMO is not None:
        from rtenv_cli.core.packaging.ignore import DEFAULT_EXCLUDES_ENV, IGNORE_GITIGNORE_ENV

        key = (str(root), kind, tuple(excludes), env.get(DEFAULT_EXCLUDES_ENV),
               env.get(IGNORE_GITIGNORE_ENV))
        if key not in _MEMO:
            _MEMO[key] = _scan(root, kind, excludes, env)
        return _MEMO[key]
    return _scan(root, kind, excludes, env)


def _scan(root: Path, kind: Kind, excludes: Sequence[str], env: Mapping[str, str]
          ) -> PackageScan:
    if root.is_file():
        s = root.stat()
        e = Entry(root.name, str(root), False, s.st_size, s.st_mode, s.st_mtime_ns, s.st_ino)
        return PackageScan(root, kind, (e,), 1, s.st_size, single_file=True)
    if not root.is_dir():
        raise PackagingError(f"{root}: no such file or directory", path=str(root),
                             hint="relative paths in a runtime_env resolve against the current "
                             "directory (--base-dir changes it)")
    st = _State(root, env)
    base = excludes_matcher(kind, excludes, env)
    rs = root.stat()
    _visit_dir(st, str(root), ".", [base] if base else [], ((rs.st_dev, rs.st_ino),), rs)
    entries = tuple(st.entries)
    files = [e for e in entries if not e.is_dir and not e.special]
    py_dirs = tuple(name for name, _ in st.ignored_top
                    if (root / name).is_dir() and _has_py(str(root / name)))
    return PackageScan(root, kind, entries, len(files), sum(e.size for e in files),
                       py_dirs, st.root_excluded, tuple(st.warnings), False,
                       tuple(st.ignored_top))
