"""Persistent digest cache: (path, relpath, size, mtime_ns, inode, mode) -> (sha1, sha256).

The Ray entry digest is sha1(relpath + content), so the relative path is part of the key (the
same file under two package roots has two digests). Each package root has its own pair of
files: a base (one marshalled dict, quicker to load than a table scan of SQLite rows:
benchmarks/results/fastpaths.json: "load a digest cache of 10,000 files (marshal)") and a
journal that each store appends its rows to in one write (a re-push that hashed one file adds a
few hundred bytes instead of rewriting the base). A store that finds the journal long, or is
given the whole scan to prune to, folds the journal into a new base under a file lock. Any
unreadable file degrades to "no cache", never to a failed push.

Neither file is fsynced: a crash can at worst leave a torn journal tail (its frames are length-
prefixed and a short one is dropped) or a torn base (read as empty), which costs a re-hash,
never a wrong digest; an fsync on every push would cost more than the cache saves.
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path

from rtenv_cli.core.fsutil import LockFile
from rtenv_cli.core.packaging.walk import Entry
from rtenv_cli.core.paths import digest_cache_path

_VERSION = 1
# _MARSHAL: these files are rtenv's own, in the user's cache dir; marshal builds plain data from
# them (it runs no code, unlike pickle), and whoever can write there can already run code as
# the user. A file of another Python's marshal version fails to load: no cache.
_FRAME = struct.Struct("<I")
_JOURNAL_MAX = 1 << 18  # bytes of journal (~2,000 rows) before a store folds it into the base
Row = tuple[int, int, int, int, bytes, str]  # size, mtime_ns, ino, mode, sha1, sha256


def _root_of(e: Entry) -> str:
    """The package root an entry was scanned under (fspath = root/relpath)."""
    return e.fspath[:len(e.fspath) - len(e.relpath) - 1] or "/"


class DigestCache:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._loaded: dict[str, dict[str, Row]] = {}

    @classmethod
    def open_default(cls) -> DigestCache:
        return cls(digest_cache_path())

    def _files(self, root: str) -> tuple[Path, Path]:
        key = hashlib.sha256(root.encode(errors="surrogateescape")).hexdigest()[:32]
        return self.directory / f"{key}.digests", self.directory / f"{key}.journal"

    def _read(self, root: str, aside: Path | None = None) -> dict[str, Row]:
        """The base, then a journal being folded (`aside`), then the journal."""
        base, journal = self._files(root)
        data: dict[str, Row] = {}
        with contextlib.suppress(Exception):  # missing, torn, another Python's format
            version, owner, rows = marshal.loads(base.read_bytes())  # noqa: S302 - see _MARSHAL
            if version == _VERSION and owner == root and isinstance(rows, dict):
                data = rows
        for part in (aside, journal) if aside is not None else (journal,):
            with contextlib.suppress(OSError):
                _apply_journal(data, part.read_bytes(), root)
        return data

    def _load(self, root: str) -> dict[str, Row]:
        if root not in self._loaded:
            self._loaded[root] = self._read(root)
        return self._loaded[root]

    def lookup(self, entries: Sequence[Entry]) -> dict[str, tuple[bytes, str]]:
        return self.split(entries)[0]

    def split(self, entries: Sequence[Entry]
              ) -> tuple[dict[str, tuple[bytes, str]], list[Entry], int]:
        """(relpath -> digests of the entries the cache holds unchanged, the other entries,
        the bytes of the first): one pass, once per file of a tree on every push."""
        out: dict[str, tuple[bytes, str]] = {}
        misses: list[Entry] = []
        hit_bytes = 0
        rows: dict[str, Row] = {}
        last = None
        for e in entries:  # unpacked, not 7 attribute reads
            rel, fs, _is_dir, size, mode, mtime_ns, ino, _in_zip, _special = e
            root = fs[:len(fs) - len(rel) - 1] or "/"  # _root_of, inlined: 10,000 calls
            if root != last:
                rows, last = self._load(root), root
            row = rows.get(rel)
            if row is not None and row[0] == size and row[1] == mtime_ns and row[2] == ino \
                    and row[3] == mode:
                out[rel] = (row[4], row[5])
                hit_bytes += size
            else:
                misses.append(e)
        return out, misses, hit_bytes

    def store(self, rows: Sequence[tuple[Entry, bytes, str]], *,
              keep: Iterable[Entry] | None = None) -> None:
        """Add `rows`; with `keep` (a whole scan), drop what is no longer in that root."""
        by_root: dict[str, list[tuple[str, Row]]] = {}
        for e, d, s in rows:
            by_root.setdefault(_root_of(e), []).append(
                (e.relpath, (e.size, e.mtime_ns, e.ino, e.mode, d, s)))
        live: dict[str, set[str]] | None = None
        if keep is not None:
            live = {}
            for e in keep:
                live.setdefault(_root_of(e), set()).add(e.relpath)
        for root, new in by_root.items():
            loaded = self._loaded.get(root)
            if loaded is not None:
                loaded.update(new)
            with contextlib.suppress(OSError):  # a cache: a failed write costs a re-hash
                self._store(root, new, live.get(root) if live is not None else None)

    def _store(self, root: str, new: list[tuple[str, Row]], live: set[str] | None) -> None:
        base, journal = self._files(root)
        base.parent.mkdir(parents=True, exist_ok=True)
        if live is not None:  # folded at once: the rows go straight into the new base (a cold
            self._fold(root, live, new)  # build of 50k files saved a dump and a load of them)
            return
        frame = marshal.dumps((root, new))
        fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, _FRAME.pack(len(frame)) + frame)  # one write: no interleaving
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if size > _JOURNAL_MAX:
            self._fold(root, None)

    def _fold(self, root: str, live: set[str] | None,
              new: Sequence[tuple[str, Row]] = ()) -> None:
        """Rewrite the base from base + journal + `new` rows (pruned to `live`) and start a new
        journal. The journal is renamed aside first: a store appending meanwhile starts a fresh
        one."""
        base, journal = self._files(root)
        # a flock, polled for: TimeoutError (an OSError: the store gives up) after _LOCK_WAIT
        with LockFile(str(base) + ".lock", _LOCK_WAIT, mode=0o644):
            aside = journal.with_suffix(".folding")
            with contextlib.suppress(FileNotFoundError):
                os.replace(journal, aside)
            data = self._read(root, aside)
            data.update(new)
            if live is not None:
                data = {rel: r for rel, r in data.items() if rel in live}
            tmp = base.with_name(f".{base.name}.{os.getpid()}.tmp")
            try:
                tmp.write_bytes(marshal.dumps((_VERSION, root, data)))
                os.replace(tmp, base)
            finally:
                tmp.unlink(missing_ok=True)
            aside.unlink(missing_ok=True)
            self._loaded[root] = data

    def close(self) -> None:
        self._loaded.clear()


_LOCK_WAIT = 10.0  # seconds a fold waits for another's (then it gives up: a cache)


def _apply_journal(data: dict[str, Row], raw: bytes, root: str) -> None:
    """Apply the journal's frames in order; a torn or foreign frame ends it."""
    pos = 0
    while pos + _FRAME.size <= len(raw):
        (size,) = _FRAME.unpack_from(raw, pos)
        body = raw[pos + _FRAME.size:pos + _FRAME.size + size]
        if len(body) != size:
            return
        try:
            owner, rows = marshal.loads(body)  # noqa: S302 - see _MARSHAL
            if owner != root:
                return
            data.update(rows)
        except (ValueError, TypeError, EOFError):
            return
        pos += _FRAME.size + size
