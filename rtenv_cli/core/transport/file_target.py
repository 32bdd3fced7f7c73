"""A shared filesystem target: `file:///shared/dir` (the Slurm / NFS pattern).

Each package is published as `<dir>/<package name>` atomically (temp file in the same
directory, fsync, rename, fsync of the directory), so readers on other nodes never see a
partial zip. Ray fetches `file://` URIs itself, as a *remote* URI: it strips a single top-level
directory, so packages pushed here are built with `layout="remote"` (see packaging/build.py).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlparse

from rtenv_cli.core.errors import TransportError, UsageError
from rtenv_cli.core.fsutil import fsync_dir
from rtenv_cli.core.transport.base import ZipLayout


class FileTarget:
    max_upload_bytes: int | None = None
    layout: ZipLayout = "remote"  # Ray strips the top directory of a file:// zip
    pins = False
    verifies_packages = False

    def __init__(self, url: str) -> None:
        parsed = urlparse(url)
        if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
            raise UsageError(f"not a local file:// URL: {url}",
                             hint="use file:///absolute/shared/dir")
        self.dir = Path(unquote(parsed.path))
        self.label = f"shared directory {self.dir}"

    def _dest(self, uri: str) -> Path:
        return self.dir / uri.split("://", 1)[-1]

    def exists(self, uri: str) -> bool:
        return self._dest(uri).is_file()

    def upload(self, uri: str, path: Path, *,
               on_progress: Callable[[int], None] | None = None) -> None:
        dest = self._dest(uri)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            tmp = self.dir / f".{dest.name}.{os.getpid()}.tmp"
            with Path(path).open("rb") as src, tmp.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
                dst.flush()
                os.fsync(dst.fileno())
            tmp.chmod(0o644)
            os.replace(tmp, dest)
            fsync_dir(self.dir)
        except OSError as exc:
            raise TransportError(f"cannot publish {uri} to {self.dir}: {exc.strerror}",
                                 hint="check that the directory exists and is writable") from exc
        if on_progress is not None:
            on_progress(dest.stat().st_size)

    def published_uri(self, uri: str) -> str:
        return self._dest(uri).as_uri()
