"""Per-entry state of one package source and Ray's URI kept up to date in O(changed entries).

Ray names a directory package after the XOR of `sha1(relpath [+ content])` over every path its
walk keeps (root "." included), folded into 8 bytes from b"00000000" (packaging/hashing.py
computes it for a whole walk).
XOR is its own inverse, so replacing one entry is `acc ^= old ^ new`: an edit costs one stat and
one read of the edited file, never a re-walk and re-hash of the tree.

An entry whose (size, mtime_ns, ino, mode) is unchanged is trusted ("confirm by stat"), except
when its mtime is within RACY_NS of the moment it was hashed: a write in the same timestamp tick
would be invisible to stat (git's "racy clean" problem), so such entries are re-read when an event
names them.
"""

from __future__ import annotations

import hashlib
import os
import stat as stat_mod
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rtenv_cli.core.watch.filters import IgnoreRules, is_ignore_file

EMPTY_ACC = b"0" * 8  # Ray's initial accumulator: eight ASCII zeros
RACY_NS = 2_000_000_000
_CHUNK = 1 << 20


def fold(acc: bytes, digest: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(acc, digest, strict=False))


def uri_for_acc(acc: bytes) -> str:
    return f"gcs://_ray_pkg_{acc.hex()}.zip"


@dataclass(frozen=True)
class EntryState:
    relpath: str
    is_dir: bool
    size: int
    mtime_ns: int
    ino: int
    mode: int
    digest: bytes  # Ray's sha1(relpath [+ content])
    sha256: str | None  # content digest for the delta protocol (files only)
    hashed_at_ns: int = 0

    def same_stat(self, st: os.stat_result) -> bool:
        return (self.size, self.mtime_ns, self.ino, self.mode) == (
            st.st_size, st.st_mtime_ns, st.st_ino, st.st_mode)

    @property
    def racy(self) -> bool:
        return self.mtime_ns >= self.hashed_at_ns - RACY_NS


@dataclass(frozen=True)
class Change:
    added: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    ignore_rules_changed: bool = False

    def __bool__(self) -> bool:
        return bool(self.added or self.modified or self.removed)

    def merge(self, other: Change) -> Change:
        return Change(self.added + other.added, self.modified + other.modified,
                      self.removed + other.removed,
                      self.ignore_rules_changed or other.ignore_rules_changed)

    def files(self) -> tuple[str, ...]:
        return self.added + self.modified + self.removed

    def then(self, later: Change) -> Change:
        """This change followed by `later`, as one net change (a file added then removed is
        no change, removed then added back is modified, modified twice is modified once)."""
        gone, back = set(later.removed), set(later.added)
        added = [x for x in self.added if x not in gone]
        added += [x for x in later.added if x not in self.removed]
        modified = [x for x in self.modified if x not in gone]
        modified += [x for x in (*later.modified, *(x for x in later.added if x in self.removed))
                     if x not in self.added and x not in self.modified]
        removed = [x for x in self.removed if x not in back]
        removed += [x for x in later.removed if x not in self.added]
        return Change(tuple(dict.fromkeys(added)), tuple(dict.fromkeys(modified)),
                      tuple(dict.fromkeys(removed)),
                      self.ignore_rules_changed or later.ignore_rules_changed)


def hash_entry(path: Path, rel: str, st: os.stat_result, is_dir: bool) -> EntryState:
    sha1 = hashlib.sha1(rel.encode())  # noqa: S324 - Ray's package naming scheme
    sha256 = None
    size = st.st_size
    if not is_dir:
        h256 = hashlib.sha256()
        size = 0
        try:
            with path.open("rb") as fh:
                while chunk := fh.read(_CHUNK):
                    sha1.update(chunk)
                    h256.update(chunk)
                    size += len(chunk)
        except OSError:
            pass  # Ray hashes an unreadable file by its name only
        sha256 = h256.hexdigest()
    return EntryState(rel, is_dir, size if not is_dir else 0, st.st_mtime_ns, st.st_ino,
                      st.st_mode, sha1.digest(), sha256, time.time_ns())


@dataclass
class Snapshot:
    """One working_dir or py_module directory as Ray would package it."""

    root: Path
    kind: str = "working_dir"
    excludes: Sequence[str] = ()
    env: Mapping[str, str] | None = None
    entries: dict[str, EntryState] = field(default_factory=dict)
    acc: bytes = EMPTY_ACC
    rules: IgnoreRules = field(init=False)
    hashed_bytes: int = 0  # bytes read by the last update (to show it is incremental)
    # symlinks the walk followed to a path inside the root: link's rel -> its target's rel. Ray
    # packages a link as its target's content, so an event on the target changes the link too
    links: dict[str, str] = field(default_factory=dict)
    _manifest_memo: dict[str, tuple[Any, dict[str, Any]]] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    # paths whose entry was added, replaced or removed since a publisher last cleared it (a
    # delta publisher's changes since its last push: watch/delta.py's `changes`)
    touched: set[str] = field(default_factory=set, init=False, repr=False, compare=False)
    _shape: int = field(default=0, init=False, repr=False, compare=False)  # +1: a path added/gone
    _leaf_memo: tuple[int, list[str]] | None = field(default=None, init=False, repr=False,
                                                     compare=False)

    def __post_init__(self) -> None:
        self.root = Path(self.root).absolute()
        self.rules = IgnoreRules(self.root, kind=self.kind, excludes=self.excludes, env=self.env)

    @property
    def uri(self) -> str:
        return uri_for_acc(self.acc)

    @property
    def name(self) -> str | None:
        return self.root.name if self.kind == "py_module" else None

    def files(self) -> list[EntryState]:
        return [e for e in self.entries.values() if not e.is_dir]

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.entries.values() if not e.is_dir)

    # -- walking -----------------------------------------------------------------------------
    def _walk(self, start_rel: str) -> dict[str, tuple[Path, os.stat_result, bool]]:
        """Ray's `_dir_travel` from `start_rel` (its ancestors' ignore files applied)."""
        found: dict[str, tuple[Path, os.stat_result, bool]] = {}
        if self.rules.is_ignored(start_rel):
            return found
        from rtenv_cli.core.packaging.ignore import first_match

        rules = self.rules
        active: list[Any] = [rules.top] if rules.top is not None else []
        parts = [p for p in start_rel.split("/") if p and p != "."]
        current = self.root
        for i in range(len(parts) + 1):
            if i:
                current = current / parts[i - 1]
            if i < len(parts) and current.is_dir():
                active.extend(rules.dir_matchers(current, "/".join(parts[:i]) or "."))

        prefix = "" if start_rel == "." else start_rel + "/"
        self.links = {k: v for k, v in self.links.items()
                      if not (start_rel in (k, ".") or k.startswith(prefix))}
        root = str(self.root)

        def travel(path: Path, rel: str) -> None:
            added = 0
            try:
                st = path.stat()
            except OSError:
                return  # broken symlink, vanished: Ray skips what is neither file nor dir
            self._note_link(path, rel, root)
            is_dir = stat_mod.S_ISDIR(st.st_mode)
            if is_dir:
                matchers = rules.dir_matchers(path, rel)
                active.extend(matchers)
                added = len(matchers)
            try:
                if first_match(active, rel) is not None:
                    return
                if is_dir:
                    found[rel] = (path, st, True)
                    try:
                        names = os.listdir(path)
                    except OSError:
                        names = []
                    for name in names:
                        travel(path / name, name if rel == "." else f"{rel}/{name}")
                elif stat_mod.S_ISREG(st.st_mode):
                    found[rel] = (path, st, False)
            finally:
                if added:
                    del active[len(active) - added:]

        travel(self.root / start_rel if start_rel != "." else self.root, start_rel)
        return found

    def _note_link(self, path: Path, rel: str, root: str) -> None:
        """Remember `rel` when it is a symlink to a path inside the root (see `links`)."""
        if os.path.islink(path):
            real = os.path.realpath(path)
            if real.startswith(root + os.sep):
                self.links[rel] = real[len(root) + 1:].replace(os.sep, "/")

    def _apply(self, scope: str, found: Mapping[str, tuple[Path, os.stat_result, bool]],
               named: set[str]) -> Change:
        prefix = "" if scope == "." else scope + "/"
        old_keys = [k for k in self.entries if scope in (k, ".") or k.startswith(prefix)]
        added: list[str] = []
        modified: list[str] = []
        removed: list[str] = []
        for key in old_keys:
            if key not in found:
                gone = self.entries.pop(key)
                self.touched.add(key)
                self._shape += 1
                self.acc = fold(self.acc, gone.digest)
                if not gone.is_dir:
                    removed.append(key)
        for rel, (path, st, is_dir) in found.items():
            old = self.entries.get(rel)
            if old is not None and is_dir and old.is_dir:
                if not old.same_stat(st):  # keep the stat fresh for reconcile(); digest = name
                    self.entries[rel] = replace(old, mtime_ns=st.st_mtime_ns, ino=st.st_ino,
                                                mode=st.st_mode, size=st.st_size)
                continue
            if old is not None and old.is_dir == is_dir and (
                    old.same_stat(st) and not (rel in named and old.racy)):
                continue
            new = hash_entry(path, rel, st, is_dir)
            if not is_dir:
                self.hashed_bytes += new.size
            if old is not None:
                self.acc = fold(self.acc, old.digest)
                if old.digest != new.digest and not is_dir:
                    modified.append(rel)
            elif not is_dir:
                added.append(rel)
            if old is None or old.is_dir != is_dir:
                self._shape += 1
            self.acc = fold(self.acc, new.digest)
            self.entries[rel] = new
            self.touched.add(rel)
        return Change(tuple(sorted(added)), tuple(sorted(modified)), tuple(sorted(removed)))

    def full_scan(self) -> Change:
        """Walk everything; rehash only entries whose stat changed (also the reconcile scan)."""
        self.hashed_bytes = 0
        return self._apply(".", self._walk("."), set())

    def update(self, paths: Iterable[str]) -> Change:
        """Re-check the given absolute or root-relative paths (hints from the watcher)."""
        self.hashed_bytes = 0
        rels: set[str] = set()
        for p in paths:
            rel = self.relpath(p)
            if rel is not None:
                rels.add(rel)
        if any(is_ignore_file(r) for r in rels):
            return Change(ignore_rules_changed=True).merge(self.full_scan())
        for _ in range(len(self.links)):  # a path reached through links (a link to a link...)
            more = {link + rel[len(target):] for link, target in self.links.items()
                    for rel in rels if rel == target or rel.startswith(target + "/")} - rels
            if not more:
                break
            rels |= more
        change = Change()
        # Outermost scopes first; a scope already re-walked covers its descendants.
        done: list[str] = []
        for rel in sorted(rels, key=lambda r: (r.count("/"), r)):
            if any(rel == d or rel.startswith(d + "/") for d in done):
                continue
            scope = self._existing_scope(rel)
            change = change.merge(self._apply(scope, self._walk(scope), rels))
            done.append(scope)
        self._refresh_parents(rels)
        return change

    def reconcile(self) -> Change:
        """Catch missed events cheaply: one stat per known entry, no ignore matching.

        A file whose stat changed, or a directory whose mtime changed (an entry was added,
        removed or renamed in it), is re-checked through `update`; nothing else is read.
        """
        suspects: list[str] = []
        for rel, entry in list(self.entries.items()):
            path = self.root if rel == "." else self.root / rel
            try:
                st = path.stat()
            except OSError:
                suspects.append(rel)
                continue
            if entry.is_dir:
                if (st.st_mtime_ns, st.st_ino) != (entry.mtime_ns, entry.ino):
                    suspects.append(rel)
            elif not entry.same_stat(st):
                suspects.append(rel)
        if not suspects:
            self.hashed_bytes = 0
            return Change()
        return self.update(str(self.root / r) if r != "." else str(self.root) for r in suspects)

    def _refresh_parents(self, rels: Iterable[str]) -> None:
        for rel in rels:
            parent = rel.rsplit("/", 1)[0] if "/" in rel else "."
            entry = self.entries.get(parent)
            if entry is None or not entry.is_dir or parent == rel:
                continue
            try:
                st = (self.root if parent == "." else self.root / parent).stat()
            except OSError:
                continue
            if not entry.same_stat(st):
                self.entries[parent] = replace(entry, mtime_ns=st.st_mtime_ns, ino=st.st_ino,
                                               mode=st.st_mode, size=st.st_size)

    def _existing_scope(self, rel: str) -> str:
        """`rel` if its parent is already a packaged directory, else the nearest such ancestor."""
        parts = rel.split("/")
        for i in range(len(parts) - 1, 0, -1):
            parent = "/".join(parts[:i])
            if parent in self.entries and self.entries[parent].is_dir:
                return "/".join(parts[: i + 1])
        return parts[0] if "." in self.entries else "."

    def relpath(self, path: str) -> str | None:
        p = os.path.abspath(path) if os.path.isabs(path) else str(self.root / path)
        root = str(self.root)
        if p == root:
            return "."
        if not p.startswith(root + os.sep):
            return None
        return p[len(root) + 1:].replace(os.sep, "/")

    # -- package layout ------------------------------------------------------------------------
    def leaf_dirs(self) -> list[str]:
        """Directories with no packaged entry below them (they need their own zip entry);
        worked out again only when a path was added or removed since."""
        if self._leaf_memo is not None and self._leaf_memo[0] == self._shape:
            return list(self._leaf_memo[1])
        # every ancestor of an entry is itself an entry, so immediate parents are enough
        parents = {rel.rsplit("/", 1)[0] if "/" in rel else "." for rel in self.entries
                   if rel != "."}
        leaves = sorted(r for r, e in self.entries.items()
                        if e.is_dir and r not in parents and r != ".") + (
            ["."] if "." in self.entries and "." not in parents else [])
        self._leaf_memo = (self._shape, leaves)
        return list(leaves)

    def manifest(self) -> dict[str, Any]:
        """The delta protocol's manifest; entry dicts are reused while their entry is unchanged
        (so comparing two manifests is mostly identity checks: see delta.relative_manifest)."""
        memo = self._manifest_memo
        fresh: dict[str, tuple[Any, dict[str, Any]]] = {}
        entries: list[dict[str, Any]] = []
        for e in sorted(self.files(), key=lambda e: e.relpath):
            hit = memo.get(e.relpath)
            if hit is None or hit[0] is not e:
                hit = (e, _file_entry(e))
            fresh[e.relpath] = hit
            entries.append(hit[1])
        entries += self.dir_entries()
        self._manifest_memo = fresh
        return {"uri": self.uri, "kind": self.kind, "name": self.name, "entries": entries}

    def file_entry(self, rel: str) -> dict[str, Any] | None:
        """The manifest entry of the file `rel` (the same dict while its entry is unchanged);
        None when `rel` is not a packaged file."""
        e = self.entries.get(rel)
        if e is None or e.is_dir:
            return None
        hit = self._manifest_memo.get(rel)
        if hit is None or hit[0] is not e:
            hit = (e, _file_entry(e))
            self._manifest_memo[rel] = hit
        return hit[1]

    def dir_entries(self) -> list[dict[str, Any]]:
        """The manifest's directory entries: Ray zips a directory only when it is empty on disk
        (its children may all be ignored); its stat now, as the zip `rtenv push` would write
        has it. The root is always hashed: listed only when it is zipped ("./", an empty
        package)."""
        from rtenv_cli.core.packaging.build import is_empty_dir, zip_time

        entries = []
        for rel in self.leaf_dirs():
            path = self.root / rel
            try:
                st, empty = path.stat(), is_empty_dir(path)
            except OSError:
                st, empty = None, False
            if rel != "." or empty:
                entries.append({"path": rel, "is_dir": True,
                                "mode": (st.st_mode if st else self.entries[rel].mode) & 0o7777,
                                "size": 0, "sha256": None, "in_zip": empty,
                                # only a zipped directory has a date (an ignored child's
                                # churn must not change the entry of one that is not)
                                "zip_time": zip_time(st.st_mtime_ns) if st and empty else None})
        return entries


def _file_entry(e: EntryState) -> dict[str, Any]:
    from rtenv_cli.core.packaging.build import zip_time

    return {"path": e.relpath, "is_dir": False, "mode": e.mode & 0o7777, "size": e.size,
            "sha256": e.sha256, "zip_time": zip_time(e.mtime_ns)}
