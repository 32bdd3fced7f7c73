"""A node's copy of published trees (see manifest.py), under `<store>/trees/`:

    objects/ab/<sha256>   each content once, read-only; fetched from the cluster's packs only
                          when the node lacks it
    man/<id>              full manifests (a delta's chain resolved once)
    t/<node>/<id>/        the tree a node's workers use: built in a temp directory beside it,
                          then renamed, so a tree is whole or absent; one per manifest per node
                          (an flock per manifest makes the build single-flight across runtime_
                          envs, threads and processes)

Files are copied from the objects (a reflink where the filesystem has one), never hardlinked: a
worker writing into its working_dir changes its tree only, never the objects or another tree
(as root, a hardlinked 0444 object would not stop it).

A tree no worker holds any more is never used again as it is: it becomes a *spare* (at most
SPARES per node, the oldest deleted). The next build takes the newest spare, checks it against
what this process built (every path, size, mode and mtime, and nothing else in it: a worker's
write changes the mtime), and patches it into the new tree: removes what the new manifest
drops, copies in what changed (a one-file edit: one file), then renames it into place. A spare
that fails the check is deleted and the tree built from the objects. So a one-file edit costs
a walk of the old tree and the changed files, not a copy of every file, and the next job still
gets exactly its manifest. (A writer that restores size and mtime by hand defeats the check:
that is a deliberate act, not an accident of a worker.)
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import AgentError
from rtenv_cli.core.transport.ray_kv import RayKV
from rtenv_cli.core.trees.manifest import Manifest, apply, decode, dump_local, load_local

MAX_CHAIN = 64
PARALLEL = 4
SPARES = 2
RECENT = 4
LIST_OBJECTS = True  # fetch lists the objects' fan-out directories (benchmarks turn it off)
Snapshot = dict[str, tuple[int, int, int]]  # path -> (size, mtime_ns, st_mode); dirs: size -1
_FICLONE = 0x40049409  # linux/fs.h: clone a file's extents (btrfs, xfs); EOPNOTSUPP elsewhere


class TreeError(AgentError):
    """A tree that cannot be materialized (a missing manifest or content, a full disk)."""


def _clone(src: str, dst: str) -> None:
    """Copy `src` to a new file `dst`: a reflink when the filesystem can, else copy_file_range
    (shutil's fast path)."""
    import fcntl

    with open(src, "rb") as fi, open(dst, "xb") as fo:
        try:
            fcntl.ioctl(fo.fileno(), _FICLONE, fi.fileno())
            return
        except OSError:
            pass
        try:
            while os.copy_file_range(fi.fileno(), fo.fileno(), 1 << 30):
                pass
        except OSError:  # an old kernel across filesystems
            fo.seek(0)
            fo.truncate()
            fi.seek(0)
            shutil.copyfileobj(fi, fo, 1 << 20)


class NodeTrees:
    def __init__(self, root: Path, node: str, connect: Callable[[], RayKV]) -> None:
        self.root = root
        self.node = node
        self._connect = connect
        self._guard = threading.Lock()
        from rtenv_cli.core.store.locks import KeyLocks

        (root / "locks").mkdir(parents=True, exist_ok=True)
        self._locks = KeyLocks(root / "locks")
        self._built: dict[str, Snapshot] = {}  # trees this process built or patched
        self._spares: list[tuple[str, Path]] = []  # (manifest id, path), oldest first
        self.patched = 0  # builds that patched a spare (tests and benchmarks read it)
        self._recent: dict[str, Manifest] = {}
        # off the first build's path: it lists every object the node holds
        self.recovery = threading.Thread(target=self._recover, daemon=True,
                                         name="rtenv-tree-recover")
        self.recovery.start()

    def _recover(self) -> None:
        """Remove what a process killed mid-work left (its pid is in the name): a tree being
        built (`t/<node>/.tmp-...`), a spare (only its own process could reuse it), a content
        being written (`objects/ab/.<sha256>...`), a discarded tree being deleted. None of them
        is ever named where a tree or a content is looked for, so this frees disk, nothing
        else, and never touches the work of a live process (this one's included)."""
        from rtenv_cli.core.store.index import pid_alive

        def dead(name: str, sep: str, back: int) -> bool:
            try:
                return not pid_alive(int(name.split(sep)[-back]), None)
            except (ValueError, IndexError):
                return False  # not a name this module makes: left alone

        def scan(parent: Path) -> list[os.DirEntry[str]]:
            try:
                with os.scandir(parent) as it:
                    return list(it)
            except OSError:
                return []

        stale = [Path(e.path) for d in scan(self.root / "t") for e in scan(Path(d.path))
                 if e.name.startswith(".tmp-") and dead(e.name, "-", 2)]
        stale += [Path(e.path) for d in scan(self.root / "spares") for e in scan(Path(d.path))
                  if dead(e.name, "-", 1)]
        stale += [Path(e.path) for e in scan(self.root / "trash") if dead(e.name, "-", 2)]
        for path in stale:
            self._discard(path)
        for d in scan(self.root / "objects"):
            for e in scan(Path(d.path)):
                if e.name.startswith(".") and dead(e.name, ".", 2):
                    with contextlib.suppress(OSError):
                        os.unlink(e.path)

    # -- layout -------------------------------------------------------------------------------
    def object_path(self, digest: str) -> Path:
        return self.root / "objects" / digest[:2] / digest

    def tree_path(self, ident: str) -> Path:
        return self.root / "t" / self.node / ident

    # -- manifests ----------------------------------------------------------------------------
    def manifest(self, ident: str, kv: RayKV) -> Manifest:
        chain: list[tuple[str, dict[str, Any]]] = []
        cur: str | None = ident
        base: Manifest | None = None
        while cur is not None:
            local = self._local_manifest(cur)
            if local is not None:
                base = local
                break
            if len(chain) > MAX_CHAIN:
                raise TreeError(f"manifest {ident} has a chain of over {MAX_CHAIN} deltas",
                                hint="push again: rtenv writes a full manifest every few")
            raw = kv.get(f"m:{cur}")
            if raw is None:
                raise TreeError(f"manifest {cur} is not in the cluster's KV",
                                hint="it was collected (rtenv cache gc) or never published: "
                                "run `rtenv push` again and resubmit")
            doc = decode(raw)
            chain.append((cur, doc))
            cur = doc.get("base")
        for got, doc in reversed(chain):
            base = apply(doc, base)
            if base.id != got:
                raise TreeError(f"manifest {got} does not describe its own tree",
                                hint="a foreign or corrupt key in the `rtenv` KV namespace; "
                                "push again")
            self._save_manifest(base)
        assert base is not None  # noqa: S101 - the loop sets it or raises
        return base

    def _local_manifest(self, ident: str) -> Manifest | None:
        with self._guard:
            m = self._recent.get(ident)
        if m is not None:
            return m
        try:
            m = load_local((self.root / "man" / ident).read_bytes())[0]
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return None
        self._remember(m)
        return m

    def _remember(self, m: Manifest) -> None:
        """Keep the last RECENT manifests parsed (a watch's next build reads the last one)."""
        with self._guard:
            self._recent[m.id] = m
            while len(self._recent) > RECENT:
                del self._recent[next(iter(self._recent))]

    def _save_manifest(self, m: Manifest) -> None:
        from rtenv_cli.core.fsutil import atomic_write_bytes

        (self.root / "man").mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self.root / "man" / m.id, dump_local(m))
        self._remember(m)

    # -- contents -----------------------------------------------------------------------------
    def fetch(self, m: Manifest, kv: RayKV) -> int:
        """Bring the contents of `m` the node lacks; returns the bytes fetched."""
        wanted: dict[str, list[tuple[str, int, int]]] = {}
        seen = self._objects({f.digest[:2] for f in m.files.values()}) if LIST_OBJECTS else set()
        for f in m.files.values():
            if f.digest in seen or (not LIST_OBJECTS and self.object_path(f.digest).exists()):
                continue
            seen.add(f.digest)
            wanted.setdefault(f.pack, []).append((f.digest, f.offset, f.size))
        if not wanted:
            return 0
        conns = [kv] + [kv.fork() for _ in range(min(PARALLEL, len(wanted)) - 1)]
        local = threading.local()
        free = list(conns)

        def one(pack: str) -> int:
            if not hasattr(local, "kv"):
                with self._guard:
                    local.kv = free.pop()
            blob = local.kv.get(f"p:{pack}")
            if blob is None:
                raise TreeError(f"pack {pack} is not in the cluster's KV",
                                hint="it was collected while a job still needed it: run "
                                "`rtenv push` again and resubmit")
            for digest, offset, size in wanted[pack]:
                self._write_object(digest, memoryview(blob)[offset:offset + size])
            return len(blob)

        try:
            with ThreadPoolExecutor(len(conns)) as pool:
                return sum(pool.map(one, wanted))
        finally:
            for c in conns[1:]:
                c.close()

    def _objects(self, fanout: set[str]) -> set[str]:
        """The digests of the node's objects under the fan-out directories `fanout`: one listing
        per directory (at most 256) rather than a stat per file of the manifest."""
        base = os.path.join(self.root, "objects")
        out: set[str] = set()
        for d in fanout:
            with contextlib.suppress(FileNotFoundError):
                out.update(n for n in os.listdir(os.path.join(base, d)) if not n.startswith("."))
        return out

    def _write_object(self, digest: str, data: memoryview) -> None:
        if hashlib.sha256(data).hexdigest() != digest:
            raise TreeError(f"content {digest[:12]} from the cluster does not match its digest",
                            hint="a foreign or corrupt key in the `rtenv` KV namespace; push "
                            "again")
        path = self.object_path(digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{digest}.{os.getpid()}.{threading.get_ident()}")
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o444)
        os.replace(tmp, path)

    # -- trees --------------------------------------------------------------------------------
    def ensure(self, ident: str) -> tuple[Path, int, str]:
        """The tree of manifest `ident` on this node, built if absent: (its path, its bytes,
        how: "found", "built" from the objects, or "patched" from a spare)."""
        final = self.tree_path(ident)
        if final.is_dir():
            return final, max(1, self._size(ident)), "found"
        with self._locks.lock(f"tree-{self.node}-{ident}"):
            if final.is_dir():  # built by another setup while this one waited
                return final, max(1, self._size(ident)), "found"
            kv = self._connect()
            try:
                m = self.manifest(ident, kv)
                self.fetch(m, kv)
            finally:
                kv.close()
            patched = self._build(m, final)
            return final, max(1, m.total_bytes), "patched" if patched else "built"

    def _size(self, ident: str) -> int:
        m = self._local_manifest(ident)
        return m.total_bytes if m is not None else 1

    def _build(self, m: Manifest, final: Path) -> bool:
        """Build `m`'s tree at `final`; True when a spare was patched into it."""
        final.parent.mkdir(parents=True, exist_ok=True)
        if self._patch_spare(m, final):
            return True
        tmp = final.with_name(f".tmp-{final.name}-{os.getpid()}-{threading.get_ident()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            made = {""}
            for path in sorted(m.dirs):
                (tmp / path).mkdir(parents=True, exist_ok=True)
                made.add(path)
            for f in m.files.values():
                parent = os.path.dirname(f.path)
                if parent not in made:
                    os.makedirs(tmp / parent, exist_ok=True)
                    made.add(parent)
                dst = os.path.join(tmp, f.path)
                _clone(str(self.object_path(f.digest)), dst)
                os.chmod(dst, f.mode & 0o777 or 0o644)
            for path, mode in m.dirs.items():
                os.chmod(tmp / path, mode & 0o777 or 0o755)
            snap = _snapshot(tmp)
            os.rename(tmp, final)
            with self._guard:
                self._built[m.id] = snap
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return False

    def _take_spare(self) -> tuple[str, Path] | None:
        with self._guard:
            return self._spares.pop() if self._spares else None

    def _patch_spare(self, m: Manifest, final: Path) -> bool:
        """Patch the newest spare into `m`'s tree (see the module doc); False: build anew."""
        spare = self._take_spare()
        if spare is None:
            return False
        ident, path = spare
        old = self._local_manifest(ident)
        with self._guard:
            want = self._built.pop(ident, None)
        try:
            if old is None or want is None or _snapshot(path) != want:
                raise ValueError("changed")  # a worker wrote into it: not reused
            snap = dict(want)
            for p in old.files:
                if p not in m.files:
                    os.unlink(path / p)
                    snap.pop(p, None)
            for p, f in m.files.items():
                was = old.files.get(p)
                if was == f:
                    continue
                dst = os.path.join(path, p)
                if was is None or was.digest != f.digest:
                    if was is not None:
                        os.unlink(dst)
                    os.makedirs(os.path.dirname(dst), exist_ok=True)
                    _clone(str(self.object_path(f.digest)), dst)
                if was is None or was.digest != f.digest or was.mode != f.mode:
                    os.chmod(dst, f.mode & 0o777 or 0o644)
                    s = os.lstat(dst)
                    snap[p] = (s.st_size, s.st_mtime_ns, s.st_mode)
            _fix_dirs(path, m, snap)
            os.rename(path, final)
        except (OSError, ValueError):
            self._discard(path)
            return False
        with self._guard:
            self._built[m.id] = snap
            self.patched += 1
        return True

    def _discard(self, path: Path) -> None:
        trash = self.root / "trash" / f"{path.name}-{os.getpid()}-{threading.get_ident()}"
        trash.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            os.rename(path, trash)
            threading.Thread(target=shutil.rmtree, args=(trash,), kwargs={"ignore_errors": True},
                             daemon=True, name="rtenv-tree-rm").start()

    def remove(self, ident: str) -> None:
        """This node's tree of `ident` is held by no worker any more: it becomes a spare when
        this process built it (the oldest spare beyond SPARES goes), else it is deleted."""
        final = self.tree_path(ident)
        if not final.exists():
            return
        with self._guard:
            known = ident in self._built
        if not known:
            self._discard(final)
            return
        spare = self.root / "spares" / self.node / f"{ident}-{os.getpid()}"
        spare.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(final, spare)
        except OSError:
            return
        with self._guard:
            self._spares.append((ident, spare))
            extra = self._spares[:-SPARES]
            del self._spares[:-SPARES]
            for old, _p in extra:
                self._built.pop(old, None)
        for _old, path in extra:
            self._discard(path)


def _snapshot(root: Path) -> Snapshot:
    """Every path under `root` with its size, mtime and mode (directories with size -1)."""
    out: Snapshot = {}
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(os.path.join(root, rel)) as it:
            for e in it:
                p = f"{rel}/{e.name}" if rel else e.name
                s = e.stat(follow_symlinks=False)
                if e.is_dir(follow_symlinks=False):
                    out[p] = (-1, 0, s.st_mode)
                    stack.append(p)
                else:
                    out[p] = (s.st_size, s.st_mtime_ns, s.st_mode)
    return out


def _fix_dirs(path: Path, m: Manifest, snap: Snapshot) -> None:
    """Directories as a fresh build of `m` has them: each file's parents and `m`'s empty
    directories, no other (deepest removed first); `snap` follows."""
    need = set(m.dirs)
    parents = {p.rpartition("/")[0] for p in m.files} | {p.rpartition("/")[0] for p in m.dirs}
    for first in parents:
        parent = first
        while parent and parent not in need:
            need.add(parent)
            parent = parent.rpartition("/")[0]
    for p in sorted((p for p, v in snap.items() if v[0] == -1 and p not in need),
                    key=len, reverse=True):
        shutil.rmtree(path / p)
        for q in [q for q in snap if q == p or q.startswith(p + "/")]:
            del snap[q]
    for p in sorted(need):
        full = os.path.join(path, p)
        if p in snap and p not in m.dirs:
            continue  # there, and its mode is the one the build left (snapshot checked)
        if p not in snap:
            with contextlib.suppress(FileExistsError):
                os.mkdir(full)
        if p in m.dirs:
            os.chmod(full, m.dirs[p] & 0o777 or 0o755)
        s = os.lstat(full)
        snap[p] = (-1, 0, s.st_mode)
