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
        """Store one blob, verified against its sha256. `fsync=False` is for batches
        (`put_stream`, `put_files`), which make their blobs durable together."""
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
            size = disk_bytes(final.stat())
        now = time.time()
        entry = Entry(key=key, kind="blob", uri=f"sha256:{sha}", label=sha[:12],
                      path=f"blobs/{sha[:2]}/{sha}", size_bytes=size, created_at=now,
                      last_used_at=now)
        layout.index.put(entry, pin_s=layout.pin_s)  # its manifest is committed after it
        return entry

    def put_stream(self, stream: BinaryIO | Stream) -> int:
        """Store a batch of blobs from `stream`: records of `<sha256 hex> <size>\\n<bytes>`.

        Each blob is verified like `put`; the batch is made durable with one sync at the
        end instead of one fsync per file (10,000 small files: seconds, not minutes).
        """
        count = 0
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
                    self.put(sha, body, fsync=False)
                count += 1
        finally:
            if count:
                sync_fs(self.layout.root)  # one flush for the batch
        return count

    def put_files(self, blobs: Sequence[tuple[str, Path]]) -> None:
        """`put` for many local files, made durable together as `put_stream` does."""
        try:
            for sha, path in blobs:
                self.put(sha, Path(path), fsync=False)
        finally:
            if blobs:
                sync_fs(self.layout.root)  # one flush for the batch
