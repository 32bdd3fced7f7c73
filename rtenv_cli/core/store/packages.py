"""Ray packages in the store, in either form: a zip under `packages/<name>` (verified against its
name) or a manifest under `manifests/<name>.json` whose files are blobs (the delta protocol; the
zip is assembled when first needed). One index entry `package:<name>` counts whatever is on disk
for the package: its zip, manifest and remote rendition."""

from __future__ import annotations

import contextlib
import filecmp
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from rtenv_cli.core.errors import PackageConflictError, PackagingError
from rtenv_cli.core.fsutil import fsync_dir
from rtenv_cli.core.store.files import copy_in, disk_bytes, write_synced
from rtenv_cli.core.store.index import Entry
from rtenv_cli.core.store.layout import Layout
from rtenv_cli.core.store.rayhash import ContentMismatchError, content_named, verify_package
from rtenv_cli.core.store.zips import prefixed_copy, zip_manifest

_RECENT_MANIFESTS = 4  # kept parsed in memory: the bases of the next edits
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode  # as json.dumps(..., separators=...)


class Packages:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._manifests: dict[str, dict[str, Any]] = {}  # a few recent ones, the bases of edits
        self._rows_text: dict[str, list[str]] = {}  # the JSON of their entries, where known
        self._guard = threading.Lock()
        self._in_use: tuple[tuple[Any, ...], frozenset[str]] | None = None

    def has(self, name: str) -> bool:
        return self.layout.package_path(name).exists() or self.layout.manifest_path(name).exists()

    def size(self, name: str) -> int | None:
        entry = self.layout.index.get(f"package:{name}")
        return entry.size_bytes if entry is not None else None

    def hold(self, name: str) -> bool:
        """Whether the store holds the package; if so it is pinned for `pin_s` from now. The
        check and the pin are one transaction under the package's lock, so a gc either
        removed it before (False) or finds it pinned: Ray's GET of a package does the same."""
        key = f"package:{name}"
        index = self.layout.index
        with self.layout.locks.lock(key):
            with index.tx() as db:
                if not index.pin(db, [key], self.layout.pin_s):
                    return False
            return self.has(name)

    # -- the zip forms ----------------------------------------------------------------------------
    def file(self, name: str) -> Path:
        """The package's zip, assembled from its manifest's blobs if it was pushed as a delta."""
        def write(tmp: Path) -> None:
            doc = self.load_manifest(name)
            if doc is None:
                raise PackagingError(f"package gcs://{name} is not in the store",
                                     hint="rtenv push it first")
            zip_manifest(doc, tmp, self.layout.blob_path)

        return self._materialize(self.layout.package_path(name), name, write)

    def remote_file(self, name: str) -> Path:
        """The package as a remote zip for Ray's nodes (`http://.../download/...`): its members
        under one top-level directory, which Ray strips from remote zips (and only from those).
        Made once from the stored package by raw member copies, then kept beside it."""
        source = self.file(name)
        return self._materialize(self.layout.remote_path(name), name,
                                 lambda tmp: prefixed_copy(source, tmp, "pkg/"))

    def _materialize(self, final: Path, name: str, write: Callable[[Path], None]) -> Path:
        """`final`, written once by `write(tmp)` under the package's lock and published by
        rename; the package's size then counts it."""
        if final.exists():
            return final
        key = f"package:{name}"
        layout = self.layout
        with layout.locks.lock(key):
            if final.exists():
                return final
            with layout.scratch(f"{key}:{final.name}") as work:
                tmp = work / final.name
                write(tmp)
                os.rename(tmp, final)
                fsync_dir(final.parent)
            layout.index.set_size(key, self._disk_bytes(name))
        return final

    def _disk_bytes(self, name: str) -> int:
        """What a package takes on disk: its zip, manifest and remote copy, whichever exist
        (its blobs are entries of their own)."""
        total = 0
        for path in self._files(name):
            with contextlib.suppress(FileNotFoundError):
                total += disk_bytes(path.stat())
        return total

    def _files(self, name: str) -> tuple[Path, Path, Path]:
        layout = self.layout
        return layout.package_path(name), layout.manifest_path(name), layout.remote_path(name)

    def forget(self, name: str) -> None:
        """Delete whatever files the package has (its entry is already gone from the index)."""
        with self._guard:
            self._manifests.pop(name, None)
            self._rows_text.pop(name, None)
        for path in self._files(name):
            if path.exists():
                path.unlink()

    # -- publishing -------------------------------------------------------------------------------
    def put(self, name: str, src: Path | BinaryIO, *, expected_size: int | None = None,
            extra_dirs: Sequence[str] = ()) -> Entry:
        """Store a package after verifying its content against its name (nothing on failure).
        `extra_dirs`: what packaging's `hashed_not_zipped` lists for it (names Ray hashed that
        its zip cannot show); without them such a package cannot be verified and is refused."""
        layout = self.layout
        final = layout.package_path(name)
        key = f"package:{name}"
        with layout.locks.lock(key):
            entry = layout.index.get(key) if self.has(name) else None
            if entry is not None and isinstance(src, Path):
                self._check_same(name, src, extra_dirs)
                return entry
            with layout.scratch(key) as work:
                tmp = work / name
                size = copy_in(src, tmp)
                if expected_size is not None and size != expected_size:
                    raise PackagingError(f"upload of {name} truncated: {size} of "
                                         f"{expected_size} bytes", hint="push it again")
                if entry is not None:
                    self._check_same(name, tmp, extra_dirs)
                    return entry
                _verify(name, tmp, extra_dirs)
                os.rename(tmp, final)
                fsync_dir(final.parent)
            return self._index(name, f"packages/{name}")

    def _check_same(self, name: str, path: Path, extra_dirs: Sequence[str]) -> None:
        """A package sent again under a name the store holds: the same bytes, or for Ray's
        hash names (`_ray_pkg_<hash>`) the same content by Ray's hash, is the same package; other
        content is refused, never answered as stored while the store keeps the first bytes. Ray
        names its packages by their content, and every node caches a package by its name, so
        a name cannot be given new content (PackageConflictError, HTTP 409)."""
        with contextlib.suppress(FileNotFoundError):  # held only as a manifest (delta push)
            if filecmp.cmp(path, self.layout.package_path(name), shallow=False):
                return
        if content_named(name):
            _verify(name, path, extra_dirs)  # other zip bytes of the same tree pass
            return
        raise PackageConflictError(
            f"gcs://{name} is already stored with other content", path=name,
            hint="a package name stands for its content: upload the new content under a new "
            "name (`rtenv push` names packages by their hash, as Ray does)")

    def put_manifest(self, name: str, doc: dict[str, Any], *,
                     like: tuple[str, Sequence[int]] | None = None) -> Entry:
        """Publish a verified manifest (written in tmp/, synced, renamed into place: a kill
        mid-write leaves recovery a tmp/ dir to remove); blobs it names are kept by gc.
        `like`: (base, indices) when `doc`'s entries are those of the manifest `base` but at
        `indices`: the text of the others is reused (`_encode`)."""
        layout = self.layout
        key = f"package:{name}"
        with layout.locks.lock(key):
            if (entry := layout.index.get(key)) is not None and self.has(name):
                return entry
            final = layout.manifest_path(name)
            with layout.scratch(key) as work:
                text, rows = self._encode(doc, like)
                write_synced(work / "manifest.json", text)
                os.rename(work / "manifest.json", final)
                fsync_dir(final.parent)
            self._remember(name, doc, rows)
            return self._index(name, f"manifests/{name}.json")

    def _index(self, name: str, rel: str) -> Entry:
        now = time.time()
        entry = Entry(key=f"package:{name}", kind="package", uri=f"gcs://{name}", label=name,
                      path=rel, size_bytes=self._disk_bytes(name), created_at=now,
                      last_used_at=now)
        self.layout.index.put(entry, pin_s=self.layout.pin_s)
        return entry

    # -- manifests --------------------------------------------------------------------------------
    def load_manifest(self, name: str) -> dict[str, Any] | None:
        doc = self._manifests.get(name)
        if doc is not None:
            return doc
        path = self.layout.manifest_path(name)
        try:
            doc = json.loads(path.read_bytes())
            if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
                raise ValueError("not a manifest")
        except FileNotFoundError:
            return None
        except ValueError as exc:  # torn or foreign: the package is gone, not the store
            self.layout.quarantine(path, f"manifest unreadable ({exc})")
            with self.layout.index.tx() as db:
                self.layout.index.delete(db, f"package:{name}")
            return None
        self._remember(name, doc)
        return doc

    def _encode(self, doc: dict[str, Any], like: tuple[str, Sequence[int]] | None
                ) -> tuple[bytes, list[str]]:
        """`json.dumps(doc, separators=(",", ":"))` and the text of each of its entries: those
        of the manifest `like` names are reused where its text is kept (an edit's commit then
        encodes the rows it changed, not the tree's: bench_watch's ablation rows)."""
        entries = doc["entries"]
        with self._guard:
            kept = self._rows_text.get(like[0]) if like is not None else None
        if like is not None and kept is not None and len(kept) == len(entries):
            rows = list(kept)
            for i in like[1]:
                rows[i] = _ENCODE(entries[i])
        else:
            rows = [_ENCODE(row) for row in entries]
        head = _ENCODE({k: v for k, v in doc.items() if k != "entries"})
        # the entries last, as json.dumps writes the doc (commit builds it in that order)
        sep = "," if len(head) > 2 else ""  # noqa: PLR2004 - "{}"
        text = f'{head[:-1]}{sep}"entries":[{",".join(rows)}]}}'
        return text.encode(), rows

    def _remember(self, name: str, doc: dict[str, Any], rows: list[str] | None = None) -> None:
        with self._guard:
            self._manifests[name] = doc
            while len(self._manifests) > _RECENT_MANIFESTS:
                self._manifests.pop(next(iter(self._manifests)))
            if rows is not None:
                self._rows_text[name] = rows
            for gone in [n for n in self._rows_text if n not in self._manifests]:
                del self._rows_text[gone]

    def blobs_in_use(self) -> frozenset[str]:
        """Every blob a published manifest names (gc must keep them)."""
        listing = sorted((e.name, e.stat().st_mtime_ns)
                         for e in os.scandir(self.layout.root / "manifests")
                         if e.name.endswith(".json"))
        stamp = tuple(listing)
        if self._in_use is not None and self._in_use[0] == stamp:
            return self._in_use[1]
        shas: set[str] = set()
        for fname, _mtime in listing:
            try:
                doc = self.load_manifest(fname.removesuffix(".json"))
            except PackagingError:  # not a package name: not one of ours
                continue
            if doc is not None:
                shas.update(row[4] for row in doc["entries"]
                            if isinstance(row, list) and len(row) > 4 and row[4])  # noqa: PLR2004 - a manifest row's sha256
        result = frozenset(shas)
        self._in_use = (stamp, result)
        return result


def _verify(name: str, path: Path, extra_dirs: Sequence[str]) -> None:
    try:
        verify_package(name, path, extra_dirs=extra_dirs)
    except ContentMismatchError as exc:
        if extra_dirs:
            raise
        raise ContentMismatchError(
            f"{exc.message}; if the tree has folders whose files were all excluded "
            "(.gitignore, .rayignore, excludes), Ray hashes their names but its zip omits "
            "them, so the zip alone cannot be checked against its name",
            hint="push it with `rtenv push`, which declares those folders (the "
            "X-Rtenv-Hashed-Dirs header); else it was truncated or altered: push again",
            path=name) from exc
