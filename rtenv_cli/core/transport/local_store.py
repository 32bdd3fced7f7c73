"""`LocalStoreTarget`: push into the embedded store (no server), the default with no address."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import TransportError
from rtenv_cli.core.transport.base import ZipLayout


def _name(uri: str) -> str:
    if not uri.startswith("gcs://"):
        raise TransportError(f"the local store takes gcs:// package URIs, not {uri!r}")
    return uri.removeprefix("gcs://")


class LocalStoreTarget:
    """The in-process store under `rtenv_home()/store` (or `root`)."""

    max_upload_bytes: int | None = None  # no server in between: no request-size limit
    pins = False
    layout: ZipLayout = "ray"
    verifies_packages = True  # upload takes `hashed_dirs` (packaging's BuiltPackage.hashed_dirs)

    def __init__(self, root: Path | str | None = None) -> None:
        from rtenv_cli.core.store.store import Store

        self.store = Store(Path(root) if root is not None else None)
        self.label = f"local store {self.store.root}"

    def exists(self, uri: str) -> bool:
        """Whether the store holds it, then pinned for the store's upload pin (as Ray's GET)."""
        return self.store.hold_package(_name(uri))

    def upload(self, uri: str, path: Path, *, on_progress: Callable[[int], None] | None = None,
               hashed_dirs: Sequence[str] = ()) -> None:
        self.store.put_package(_name(uri), Path(path), extra_dirs=hashed_dirs)
        if on_progress is not None:
            on_progress(Path(path).stat().st_size)

    def published_uri(self, uri: str) -> str:
        return uri

    # -- the delta protocol (same calls as AgentTarget) -------------------------------------------
    def missing_blobs(self, manifest: Mapping[str, Any]) -> list[str]:
        from rtenv_cli.core.store import delta

        return delta.missing(self.store, delta.Manifest.parse(manifest))

    def put_blob(self, sha256: str, path: Path) -> None:
        self.store.put_blob(sha256, Path(path))

    def put_blobs(self, blobs: list[tuple[str, Path]]) -> None:
        self.store.put_blob_files(blobs)

    def commit_manifest(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        from rtenv_cli.core.store import delta

        return delta.commit(self.store, delta.Manifest.parse(manifest))

    def publish(self, manifest: Mapping[str, Any], blobs: list[tuple[str, Path]]
                ) -> dict[str, Any]:
        from rtenv_cli.core.store import delta

        parsed = delta.Manifest.parse(manifest)  # refused before anything is stored
        self.put_blobs(blobs)
        return delta.commit(self.store, parsed)
