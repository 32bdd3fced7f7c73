"""Ray 2.60's package walk (`_dir_travel`): which entries are hashed and which are zipped.

Pre-order from the root (relative path "."), following symlinks for files and directories.
Each directory's own .gitignore/.rayignore join the active matchers before the directory is
tested; a matched path is dropped with its subtree. Every kept path is hashed (directories by
name); files and directories with no children on disk are zipped. Where Ray hangs or silently
ships something odd, we raise a PackagingError instead (FIFOs, symlink loops, non-UTF-8 names,
unreadable files) or warn (broken symlinks and sockets: hashed by name, not zipped, like Ray).

A directory's listing is kept between scans of the same package (`$RTENV_HOME/scans/`, like
git's untracked cache): while the directory's inode, mtime and ctime are those it was listed
with, and its own ignore files' are too, its children's names and what the walk decided for
each (file, directory, ignored by which rule) are reused without listing or matching it again;
every kept file is still stat'ed (its size, mode and times go to the digest cache) and must
still be a regular file. Adding, removing or renaming a child changes its directory's mtime; a
listing whose ctime was within _RACY_NS of its listing time is not trusted (a change in the
same clock tick would not show); an ignore file that changed makes its directory and everything
below it listed afresh. A directory holding a broken link or a socket is always listed.

The validator walks with packscan.py (beside this module) instead, on these same ignore
matchers: it must go on where this walk raises (each problem becomes a finding), name ignored
`.py` files at any depth (RTE121), and stop at a bound on huge trees; this walk must stop at the
first problem and read every file it keeps. Two walks for two contracts;
tests/test_routes_agree.py and the parity suite check that both keep the same files as Ray.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
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
# The listing cache (module doc). False lists every directory: the benchmark's ablation row
# flips it to show what it buys (benchmarks/results/trees.json: "ablation: re-push in process,
# every directory listed (no listing cache)", beside the row it ablates).
LISTINGS = True
_RACY_NS = 2_000_000_000  # a directory changed this close to its listing is listed again
_FILE, _DIR, _LINK_DIR, _IGNORED = 0, 1, 2, 3  # what the walk decided for a child
_IGNORE_FILES = (".gitignore", ".rayignore")
# A directory's listing: ((st_ino, st_mtime_ns, st_ctime_ns), listed at (ns), its ignore files'
# ((name, st_ino, st_mtime_ns, st_ctime_ns, st_size), ...), its children ((name, what, rule of
# an ignored one), ...) in listing order, the rule that ignores the directory itself or None).
Listing = tuple[tuple[int, int, int], int, tuple[tuple[str, int, int, int, int], ...],
                tuple[tuple[str, int, str | None], ...], str | None]


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
    old: Mapping[str, Listing] = field(default_factory=dict)  # the last scan's listings
    new: dict[str, Listing] = field(default_factory=dict)  # this scan's
    now_ns: int = 0
    listed: bool = False  # some directory was listed afresh


def _check_name(path: str) -> None:
    try:
        path.encode()
    except UnicodeEncodeError:
        raise PackagingError(f"file name is not valid UTF-8: {path!r}",
                             hint="rename it (Ray cannot hash it) or exclude it",
                             path=path) from None


def _dir_entry(st: _State, path: str, rel: str, s: os.stat_result, names: Sequence[object]
               ) -> None:
    st.entries.append(Entry(rel, path, True, 0, s.st_mode, s.st_mtime_ns, s.st_ino,
                            in_zip=not names))  # Ray zips empty directories with their mode


def _stamp(s: os.stat_result) -> tuple[int, int, int]:
    return s.st_ino, s.st_mtime_ns, s.st_ctime_ns


def _ignore_stamps(path: str, names: Sequence[str]
                   ) -> tuple[tuple[str, int, int, int, int], ...]:
    out = []
    for name in _IGNORE_FILES:
        if name in names:
            i = os.stat(os.path.join(path, name))
            out.append((name, *_stamp(i), i.st_size))
    return tuple(out)


def _list(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return list(it)
    except OSError as exc:
        raise PackagingError(f"cannot list {path}: {exc.strerror}", path=path,
                             hint="fix its permissions or exclude it") from exc


def _ignored(st: _State, rel: str, rule: str) -> None:
    if rel == ".":
        st.root_excluded = True
    elif "/" not in rel:
        st.ignored_top.append((rel, rule))


def _visit_dir(  # noqa: PLR0917 - recursive walker, internal
        st: _State, path: str, rel: str, matchers: list[Matcher],
               chain: tuple[tuple[int, int], ...], s: os.stat_result | None,
               reuse: bool = True) -> None:
    """A directory Ray's walk reaches: its ignore files join, then it is tested, then walked
    (`reuse`: its listing and those below may come from the last scan, module doc)."""
    try:
        s = s if s is not None else os.stat(path)  # before the listing: a change after shows
    except OSError as exc:
        raise PackagingError(f"cannot stat {path}: {exc.strerror}", path=path) from exc
    if reuse and rel in st.old:
        done = _replay(st, path, rel, matchers, chain, s, st.old[rel])
        if done:
            return
        reuse = done is not None  # None: an ignore file changed, so every rule below may have
    st.listed = True
    children = _list(path)
    names = [c.name for c in children]
    has_ignore = ".gitignore" in names or ".rayignore" in names
    added = ignore_file_matchers(path, rel, st.env) if has_ignore else []
    igns = _ignore_stamps(path, names) if has_ignore else ()
    active = matchers + added
    rule = first_match(active, rel)
    if rule is not None:
        _ignored(st, rel, rule)
        st.new[rel] = (_stamp(s), st.now_ns, igns, (), rule)
        return
    _dir_entry(st, path, rel, s, names)
    hit = any_match(active)
    kids: list[tuple[str, int, str | None]] | None = []
    for c in children:
        crel = c.name if rel == "." else f"{rel}/{c.name}"
        what = _visit_child(st, c, crel, active, chain, hit, reuse)
        if what is None:
            kids = None
        elif kids is not None:
            kids.append((c.name, *what))
    if kids is not None:
        st.new[rel] = (_stamp(s), st.now_ns, igns, tuple(kids), None)


def _replay(  # noqa: PLR0917 - recursive walker, internal
        st: _State, path: str, rel: str, matchers: list[Matcher],
        chain: tuple[tuple[int, int], ...], s: os.stat_result, rec: Listing) -> bool | None:
    """Walk a directory from its listing `rec` of the last scan: True when done; False when the
    listing is stale (nothing walked yet); None when an ignore file changed."""
    _, _, igns, kids, rule = rec
    fresh = _fresh(path, s, rec)
    if not fresh:
        return fresh
    if rule is not None:
        _ignored(st, rel, rule)
        st.new[rel] = rec
        return True
    head = path if path.endswith("/") else path + "/"  # as os.scandir joins
    made = _file_entries(head, "" if rel == "." else rel + "/", kids)
    if made is None:
        return False
    st.new[rel] = rec
    _dir_entry(st, path, rel, s, kids)
    active: list[Matcher] | None = None  # the rules, read only if a directory below is listed
    for (name, what, rule_), e in zip(kids, made, strict=True):
        if e is not None:
            st.entries.append(e)
            continue
        crel = name if rel == "." else f"{rel}/{name}"
        if what == _IGNORED:
            if "/" not in crel:
                st.ignored_top.append((crel, rule_ or ""))
        else:
            if active is None:
                active = matchers + (ignore_file_matchers(path, rel, st.env) if igns else [])
            _enter(st, head + name, crel, active, chain, what == _LINK_DIR, True)
    return True


def _fresh(path: str, s: os.stat_result, rec: Listing) -> bool | None:
    """Whether listing `rec` still holds for the directory at `path` (stat `s`): False when the
    directory changed (or may have: racy), None when one of its ignore files did."""
    stamp, listed, igns, _kids, _rule = rec
    if _stamp(s) != tuple(stamp) or stamp[2] >= listed - _RACY_NS:
        return False
    for name, *was in igns:
        try:
            i = os.stat(os.path.join(path, name))
        except OSError:
            return None
        if [*_stamp(i), i.st_size] != was or was[2] >= listed - _RACY_NS:
            return None
    return True


def _file_entries(head: str, prefix: str, kids: Sequence[tuple[str, int, str | None]]
                  ) -> list[Entry | None] | None:
    """Each kept file's Entry, from a stat (None for the other children; `head`: the
    directory's path and a slash, `prefix`: its relpath and a slash), or None when one is no
    longer a regular file. The replay's inner loop, once per file of the tree: the Entry is
    made by tuple.__new__ with every field, which skips NamedTuple's Python-level __new__."""
    out: list[Entry | None] = []
    new, isreg, stat_ = tuple.__new__, stat.S_ISREG, os.stat
    for name, what, _rule in kids:
        if what != _FILE:
            out.append(None)
            continue
        fspath = head + name
        try:
            f = stat_(fspath)
        except OSError:
            return None
        if not isreg(f.st_mode):
            return None
        out.append(new(Entry, (prefix + name, fspath, False, f.st_size, f.st_mode,
                               f.st_mtime_ns, f.st_ino, True, False)))
    return out


def _enter(  # noqa: PLR0917 - recursive walker, internal
        st: _State, path: str, rel: str, matchers: list[Matcher],
        chain: tuple[tuple[int, int], ...], link: bool, reuse: bool) -> None:
    """Walk a child directory (`link`: reached through a symlink, so checked for a loop)."""
    s = None
    if link:  # only a symlinked directory can lead back into its ancestors
        s = os.stat(path)
        key = (s.st_dev, s.st_ino)
        if key in chain:
            raise PackagingError(f"symlink loop at {path}",
                                 hint="Ray would package this tree ~40 times over; remove "
                                 "the link or exclude it", path=path)
        chain = (*chain, key)
    _visit_dir(st, path, rel, matchers, chain, s, reuse)


def _visit_child(  # noqa: PLR0917 - recursive walker, internal
        st: _State, c: os.DirEntry[str], rel: str, matchers: list[Matcher],
        chain: tuple[tuple[int, int], ...], hit: Callable[[str], bool], reuse: bool
        ) -> tuple[int, str | None] | None:
    """Walk one child; (what the walk decided, the rule that ignores it), None for what is
    never reused (a broken link, a socket)."""
    if not c.name.isascii():
        _check_name(rel)
    path = c.path
    link = c.is_symlink()
    try:
        is_dir = c.is_dir()  # follows symlinks; no syscall for plain entries
    except OSError:
        is_dir = False
    if is_dir:
        _enter(st, path, rel, matchers, chain, link, reuse)
        return (_LINK_DIR if link else _DIR), None
    rule = first_match(matchers, rel) if hit(rel) else None
    if rule is not None:
        if "/" not in rel:
            st.ignored_top.append((rel, rule))
        return _IGNORED, rule
    return (_FILE, None) if _file_entry(st, c, rel, path, link) else None


def _file_entry(st: _State, c: os.DirEntry[str], rel: str, path: str, link: bool) -> bool:
    """A kept non-directory: a file (True), or what Ray hashes by name (broken link, socket)."""
    try:
        s = c.stat()
    except OSError as exc:
        if not link or not isinstance(exc, (FileNotFoundError, OSError)):
            raise PackagingError(f"cannot stat {path}: {exc.strerror}", path=path) from exc
        st.warnings.append(f"{rel}: broken symlink (hashed by name only, not packaged, as Ray)")
        st.entries.append(Entry(rel, path, False, 0, 0, special=True, in_zip=False))
        return False
    if stat.S_ISREG(s.st_mode):
        st.entries.append(Entry(rel, path, False, s.st_size, s.st_mode, s.st_mtime_ns,
                                s.st_ino))
        return True
    if stat.S_ISFIFO(s.st_mode):
        raise PackagingError(f"{path} is a named pipe (FIFO)",
                             hint="Ray hangs forever reading it; exclude it", path=path)
    if stat.S_ISSOCK(s.st_mode):
        st.warnings.append(f"{rel}: socket (hashed by name only, not packaged, as Ray)")
        st.entries.append(Entry(rel, path, False, 0, s.st_mode, special=True, in_zip=False))
        return False
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


def _listings_file(root: Path, kind: Kind, excludes: Sequence[str], env: Mapping[str, str]
                   ) -> Path | None:
    """Where the listings of this package's scans are kept: one file per root and rules (None
    when the home is not this user's alone: the listings are a cache, never trusted from it)."""
    import hashlib
    import json

    from rtenv_cli.core.errors import RtenvError
    from rtenv_cli.core.packaging.ignore import DEFAULT_EXCLUDES_ENV, IGNORE_GITIGNORE_ENV
    from rtenv_cli.core.paths import rtenv_home

    key = json.dumps([str(root), kind, list(excludes), env.get(DEFAULT_EXCLUDES_ENV),
                      env.get(IGNORE_GITIGNORE_ENV)])
    try:
        home = rtenv_home()
    except RtenvError:  # no home this user alone can write: no listings, read or kept
        return None
    return home / "scans" / hashlib.sha256(key.encode(errors="surrogateescape")).hexdigest()[:32]


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
    where = _listings_file(root, kind, excludes, env) if LISTINGS else None
    if where is not None:
        from rtenv_cli.core.fsutil import read_cache

        old = read_cache(where)
        st.old, st.now_ns = (old if isinstance(old, dict) else {}), time.time_ns()
    _visit_dir(st, str(root), ".", [base] if base else [], ((rs.st_dev, rs.st_ino),), rs)
    if where is not None and (st.listed or st.new.keys() != st.old.keys()):
        from rtenv_cli.core.fsutil import write_cache

        with suppress(OSError):  # a cache: a failed write costs a listing next time
            write_cache(where, st.new)
    entries = tuple(st.entries)
    files = [e for e in entries if not e.is_dir and not e.special]
    py_dirs = tuple(name for name, _ in st.ignored_top
                    if (root / name).is_dir() and _has_py(str(root / name)))
    return PackageScan(root, kind, entries, len(files), sum(e.size for e in files),
                       py_dirs, st.root_excluded, tuple(st.warnings), False,
                       tuple(st.ignored_top))
