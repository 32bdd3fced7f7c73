"""Where everything lives under a store's root, and what every part of the store shares: the
index, the upload pin, the per-key locks, and the moves out of the way (a temp dir for work in
progress, a tombstone, quarantine, the disk-full error). See store.py for the layout."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from rtenv_cli.core.errors import DiskFullError, PackagingError
from rtenv_cli.core.store.files import NO_SPACE
from rtenv_cli.core.store.index import Index
from rtenv_cli.core.store.locks import KeyLocks, safe_key
from rtenv_cli.core.store.rayhash import check_name

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
SUBDIRS = ("packages", "manifests", "blobs", "entries", "tmp", "trash", "locks")
log = logging.getLogger("rtenv.store")


class Layout:
    def __init__(self, root: Path, index: Index, pin_s: float) -> None:
        self.root, self.index, self.pin_s = root, index, pin_s  # recovery may replace index
        self.locks = KeyLocks(root / "locks")

    # -- paths ------------------------------------------------------------------------------------
    def package_path(self, name: str) -> Path:
        check_name(name)
        return self.root / "packages" / name

    def manifest_path(self, name: str) -> Path:
        check_name(name)
        return self.root / "manifests" / f"{name}.json"

    def remote_path(self, name: str) -> Path:
        """The package's remote rendition (members under one top-level folder)."""
        return self.root / "packages" / f"{name}.remote"

    def blob_path(self, sha: str) -> Path:
        if not SHA256_RE.match(sha):
            raise PackagingError(f"invalid blob id {sha!r}", hint="blobs are named by sha256 hex")
        return self.root / "blobs" / sha[:2] / sha

    def entry_dir(self, key: str) -> Path:
        return self.root / "entries" / safe_key(key)

    # -- out of the way ---------------------------------------------------------------------------
    def tmp_dir(self, key: str) -> Path:
        """A fresh directory for work in progress on `key`, named `<key>.<pid>.<rand>`."""
        path = self.root / "tmp" / f"{safe_key(key)}.{os.getpid()}.{secrets.token_hex(4)}"
        path.mkdir(parents=True)
        return path

    @contextlib.contextmanager
    def scratch(self, key: str) -> Iterator[Path]:
        """`tmp_dir(key)` for the block's work, removed afterwards (what the work publishes
        it renames out first); a full disk in the block is a DiskFullError."""
        work = self.tmp_dir(key)
        try:
            yield work
        except OSError as exc:
            if exc.errno in NO_SPACE:
                raise self.disk_full(exc) from exc
            raise
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def tombstone(self, path: Path) -> None:
        """Rename `path` into trash/, then delete it (a crash in between: recovery finishes)."""
        if not path.exists():
            return
        grave = self.root / "trash" / f"{path.name}.{secrets.token_hex(4)}"
        os.rename(path, grave)
        shutil.rmtree(grave, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            grave.unlink()

    def quarantine(self, path: Path, why: str) -> None:
        """Move what cannot be read out of the store's way, kept for a look; one log line."""
        dest = self.root / "quarantine" / f"{path.name}.{time.strftime('%Y%m%dT%H%M%S')}" \
            f".{secrets.token_hex(2)}"
        dest.parent.mkdir(exist_ok=True, mode=0o700)
        try:
            os.rename(path, dest)
        except FileNotFoundError:
            return
        log.warning("rtenv store %s: %s: %s; moved to %s", self.root,
                    path.relative_to(self.root), why, dest.relative_to(self.root))

    def disk_full(self, exc: OSError) -> DiskFullError:
        """The error for a full disk under the store (ENOSPC, quota): not the input's fault."""
        return DiskFullError(f"no space left under {self.root} ({exc.strerror})",
                             hint=f"free space under {self.root} or lower --max-size",
                             path=str(self.root))
