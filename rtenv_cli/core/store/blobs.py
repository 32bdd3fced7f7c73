"""Content-addressed blobs of the delta protocol (`blobs/ab/<sha256>`): single, batch from a
stream, and batch from local files. Each is verified against its sha256 and pinned for the
store's `pin_s` until the manifest that names it is committed."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from rtenv_cli.core.errors import PackagingError
from rtenv_cli.core.fsutil import fsync_dir
from rtenv_cli.core.store.files import (
    CHUNK,
    Limited,
    Stream,
    copy_in,
    disk_bytes,
    sync_fs,
)
from rtenv_cli.core.store.index import Entry
from rtenv_cli.core.store.layout import Layout

# The first blobs of a batch (a save's few) are each made durable by their own fsyncs (the file,
# then its directory); the rest of a larger batch (a first push: thousands) by one flush of the
# file system at the end (syncfs), which also writes whatever other programs left pending there:
# cheaper per blob for many, dearer for one on a busy disk (bench_watch's ablation rows).
FEW_BLOBS = 8


class Blobs:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def has(self, shas: list[str]) -> set[str]:
        """The blobs of `shas` the store holds, each pinned for `pin_s` from now (until the
        manifest that names them is committed), in one transaction with the check."""
        index = self.layout.index
        paths = {s: self.layout.blob_path(s) for s in shas}
        with index.tx() as db:
            pinned = index.pin(db, [f"blob:{s}" for s in paths], self.layout.pin_s)
        return {k.removeprefix("blob:") for k in pinned
                if paths[k.removeprefix("blob:")].exists()}

    def put(self, sha: str, src: Path | BinaryIO | Limited, *, fsync: bool = True) -> Entry:
        """Store one blob, verified against its sha256, durable on return (the file and its
        rename synced). `fsync=False` is for batches (`put_stream`, `put_files`), which make
        their blobs durable together."""
        layout = self.layout
        final = layout.blob_path(sha)
        key = f"blob:{sha}"
        if final.exists() and (entry := layout.index.get(key)) is not None:
            return entry
        with layout.scratch(key) as work:
            tmp = work / "blob"
            h = hashlib.sha256()
            copy_in(src, tmp, h, fsync=fsync)
            if h.hexdigest() != sha:
                raise PackagingError(f"blob {sha[:12]} does not match its content "
                                     f"(got {h.hexdigest()[:12]})", hint="upload it again")
            final.parent.mkdir(exist_ok=True)
            os.rename(tmp, final)  # same content under the same name: last rename wins, harmless
            if fsync:
                fsync_dir(final.parent)
            size = disk_bytes(final.stat())
        now = time.time()
        entry = Entry(key=key, kind="blob", uri=f"sha256:{sha}", label=sha[:12],
                      path=f"blobs/{sha[:2]}/{sha}", size_bytes=size, created_at=now,
                      last_used_at=now)
        layout.index.put(entry, pin_s=layout.pin_s)  # its manifest is committed after it
        return entry

    def put_stream(self, stream: BinaryIO | Stream) -> int:
        """Store a batch of blobs from `stream`: records of `<sha256 hex> <size>\\n<bytes>`.

        Each blob is verified like `put`; past its FEW_BLOBS first, the batch is made durable
        with one sync at the end instead of one fsync per file (10,000 small files: seconds,
        not minutes).
        """
        count = bulk = 0
        try:
            while header := stream.readline(200):
                try:
                    sha, size_text = header.decode("ascii").split()
                    size = int(size_text)
                except (UnicodeDecodeError, ValueError):
                    raise PackagingError(f"bad blob record header {header[:80]!r}",
                                         hint="records are '<sha256 hex> <size>\\n<bytes>'"
                                         ) from None
                body = Limited(stream, size)
                if self.layout.blob_path(sha).exists():  # already here: skip its bytes
                    while body.read(CHUNK):
                        pass
                else:
                    bulk += count >= FEW_BLOBS
                    self.put(sha, body, fsync=count < FEW_BLOBS)
                count += 1
        finally:
            if bulk:
                sync_fs(self.layout.root)  # one flush for the rest of the batch
        return count

    def put_files(self, blobs: Sequence[tuple[str, Path]]) -> None:
        """`put` for many local files, made durable together as `put_stream` does."""
        try:
            for i, (sha, path) in enumerate(blobs):
                self.put(sha, Path(path), fsync=i < FEW_BLOBS)
        finally:
            if len(blobs) > FEW_BLOBS:
                sync_fs(self.layout.root)  # one flush for the rest of the batch
