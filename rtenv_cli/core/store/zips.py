"""The zips the store makes from what it holds, both through packaging's one writer: a delta
package's zip from its manifest and blobs, and a package's remote rendition for Ray's nodes."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import PackagingError


def zip_manifest(doc: dict[str, Any], out: Path, blob_path: Callable[[str], Path]) -> None:
    """Write the zip of a manifest package with packaging's writer, from the blobs: what
    `rtenv push` writes for the same tree (members, names, modes, compression, order). Rows
    carry whether a directory is zipped and each member's date_time as the client's zip has
    it; a manifest from before those fields zips every directory row, dated 1980-01-01."""
    import stat as stat_mod

    from rtenv_cli.core.packaging.build import ZIP_EPOCH, write_package_zip
    from rtenv_cli.core.packaging.walk import Entry, PackageScan

    entries: list[Entry] = []
    times: dict[str, Any] = {}  # relpath -> date_time
    for row in doc["entries"]:
        path, is_dir, mode, _size, sha = row[:5]
        in_zip = bool(row[6]) if len(row) > 6 else True  # noqa: PLR2004 - the row's fields
        when = row[7] if len(row) > 7 else None  # noqa: PLR2004 - the row's fields
        times[path] = tuple(when) if when else ZIP_EPOCH
        if is_dir:
            entries.append(Entry(path, "", True, 0, stat_mod.S_IFDIR | (mode & 0o7777), 0,
                                 in_zip=in_zip))
            continue
        blob = blob_path(sha)
        st = blob.stat()
        entries.append(Entry(path, str(blob), False, st.st_size,
                             stat_mod.S_IFREG | (mode & 0o7777), st.st_mtime_ns, st.st_ino))
    kind = "py_module" if doc.get("kind") == "py_module" and doc.get("name") else "working_dir"
    files = [e for e in entries if not e.is_dir]
    scan = PackageScan(Path(str(doc.get("name") or "pkg")), kind, tuple(entries), len(files),
                       sum(e.size for e in files))
    result = write_package_zip(scan, out, times=times, processes=False)  # in a server
    if result.changed:  # blobs are immutable: only disk trouble changes one
        raise PackagingError(f"blob of {result.changed[0].relpath} changed while it was zipped",
                             hint="run `rtenv cache purge` on the agent and push again")
    with out.open("rb+") as fh:
        os.fsync(fh.fileno())


def prefixed_copy(source: Path, out: Path, prefix: str) -> None:
    """Copy every member of zip `source` into `out` under `prefix`, raw (no recompression):
    the bytes packaging's writer gives with `layout="remote"` for the same members."""
    import zipfile

    from rtenv_cli.core.packaging.zipreuse import ZipAppender

    with zipfile.ZipFile(source) as src, open(out, "w+b", buffering=1 << 20) as fh, \
            zipfile.ZipFile(fh, "w", allowZip64=True) as dst:
        appender = ZipAppender(dst)
        for info in src.infolist():
            appender.copy_member(src, info, prefix + info.filename)
    with out.open("rb+") as fh:
        os.fsync(fh.fileno())
