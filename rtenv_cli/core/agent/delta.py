"""The per-file delta protocol: a manifest of (path, is_dir, mode, size, sha256), the blobs the
store lacks, and a commit that assembles Ray's zip from blobs and checks its Ray URI.

Manifest (JSON)::

    {"uri": "gcs://_ray_pkg_<16hex>.zip", "kind": "working_dir" | "py_module",
     "name": "<top-level dir for a py_module>" | null,
     "entries": [{"path": "a/b.py", "is_dir": false, "mode": 420, "size": 12, "sha256": "..."}]}
"""

from __future__ import annotations

import posixpath
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtenv_cli.core.agent.store import SHA256_RE, Store
from rtenv_cli.core.errors import PackagingError

_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class ManifestEntry:
    path: str
    is_dir: bool
    mode: int
    size: int
    sha256: str | None


@dataclass(frozen=True)
class Manifest:
    uri: str
    kind: str
    name: str | None
    entries: tuple[ManifestEntry, ...]

    @property
    def package_name(self) -> str:
        return self.uri.removeprefix("gcs://")

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> Manifest:
        try:
            uri, kind = str(data["uri"]), str(data.get("kind", "working_dir"))
            raw = data["entries"]
        except (KeyError, TypeError) as exc:
            raise PackagingError(f"manifest lacks {exc}",
                                 hint="send uri, kind and entries") from exc
        if not uri.startswith("gcs://") or kind not in ("working_dir", "py_module"):
            raise PackagingError(f"manifest uri {uri!r} / kind {kind!r} not understood")
        entries = []
        for item in raw:
            path = str(item["path"])
            norm = posixpath.normpath(path)
            if path.startswith("/") or norm.startswith("..") or "\\" in path or norm == ".":
                raise PackagingError(f"manifest path {path!r} is not a relative path in the tree")
            is_dir = bool(item.get("is_dir"))
            sha = None if is_dir else str(item["sha256"])
            if sha is not None and not SHA256_RE.match(sha):
                raise PackagingError(f"manifest entry {path!r} has an invalid sha256")
            entries.append(ManifestEntry(norm, is_dir, int(item.get("mode", 0o644)),
                                         int(item.get("size", 0)), sha))
        name = data.get("name")
        return cls(uri, kind, str(name) if name else None, tuple(entries))


def missing(store: Store, manifest: Manifest) -> list[str]:
    shas = sorted({e.sha256 for e in manifest.entries if e.sha256})
    have = store.has_blobs(shas)
    return [s for s in shas if s not in have]


def commit(store: Store, manifest: Manifest) -> dict[str, Any]:
    """Assemble the package from blobs, verify its URI and store it."""
    import zipfile

    name = manifest.package_name
    if store.has_package(name):
        return {"uri": manifest.uri, "zip_bytes": store.package_path(name).stat().st_size}
    lacking = missing(store, manifest)
    if lacking:
        raise PackagingError(f"{len(lacking)} blob(s) missing for {manifest.uri}",
                             hint="upload the missing blobs, then commit again")
    work = store.tmp_dir(f"commit:{name}")
    try:
        out = work / name
        prefix = f"{manifest.name}/" if manifest.kind == "py_module" and manifest.name else ""
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for entry in manifest.entries:
                info = zipfile.ZipInfo(prefix + entry.path + ("/" if entry.is_dir else ""),
                                       _ZIP_EPOCH)
                if entry.is_dir:
                    info.external_attr = ((0o40000 | (entry.mode & 0o7777 or 0o755)) << 16) | 0x10
                    zf.writestr(info, b"")
                    continue
                info.external_attr = (0o100000 | (entry.mode & 0o7777 or 0o644)) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                with store.blob_path(entry.sha256).open("rb") as src, \
                        zf.open(info, "w", force_zip64=True) as dst:  # type: ignore[arg-type]
                    shutil.copyfileobj(src, dst, 1 << 20)
        stored = store.put_package(name, Path(out))
        return {"uri": manifest.uri, "zip_bytes": stored.size_bytes}
    finally:
        shutil.rmtree(work, ignore_errors=True)
