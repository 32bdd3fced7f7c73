"""The push target protocol every transport implements (Ray GCS or dashboard, agent, store,
file://), and the optional capabilities some of them have.

What a target can do is declared on its class: the attributes of `Target` on every one, the
method sets below (`DeltaTarget`, `ForkingTarget`, `RemoteServing`) checked with isinstance.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

RAY_HTTP_LIMIT = 100 * 1024 * 1024  # the dashboard's aiohttp client_max_size (100 MiB)
PIN_SECONDS = 600  # RAY_RUNTIME_ENV_TEMPORARY_REFERENCE_EXPIRATION_S default
# The zip a target takes: Ray's own layout, or "remote": the members under one top-level
# directory, which Ray strips from remote (file://, https://) zips and only from those.
ZipLayout = Literal["ray", "remote"]


@runtime_checkable
class Target(Protocol):
    label: str  # shown to users, e.g. "Ray cluster http://127.0.0.1:8265"
    max_upload_bytes: int | None  # 100 MiB for Ray's dashboard, 512 MiB its GCS; None = no limit
    # `exists` pins the package for PIN_SECONDS and Ray deletes it once unreferenced and
    # unpinned: a long-lived pusher (watch) re-checks what it pushed before the pin runs out
    pins: bool
    layout: ZipLayout
    # the target verifies a package against its name: `upload(..., hashed_dirs=...)` takes what
    # Ray hashed that the zip cannot show (packaging's BuiltPackage.hashed_dirs)
    verifies_packages: bool

    def exists(self, uri: str) -> bool:
        """Whether the target holds `uri` (for Ray: GET, which also pins it for 10 minutes)."""
        ...

    def upload(self, uri: str, path: Path, *,
               on_progress: Callable[[int], None] | None = None) -> None:
        """Publish the zip at `path` under `uri`."""
        ...

    def published_uri(self, uri: str) -> str:
        """The URI to put into the runtime_env (gcs:// as is, or e.g. file:// / https://)."""
        ...


@runtime_checkable
class DeltaTarget(Protocol):
    """A target that takes a package as a manifest plus the file blobs it lacks (an rtenv agent,
    the embedded store): an edit sends the changed files only."""

    def missing_blobs(self, manifest: Mapping[str, Any]) -> list[str]: ...

    def put_blob(self, sha256: str, path: Path) -> None: ...

    def put_blobs(self, blobs: list[tuple[str, Path]]) -> None: ...

    def commit_manifest(self, manifest: Mapping[str, Any]) -> dict[str, Any]: ...

    def publish(self, manifest: Mapping[str, Any], blobs: list[tuple[str, Path]]
                ) -> dict[str, Any]:
        """`put_blobs(blobs)` then `commit_manifest(manifest)`, in one request where it can."""
        ...


@runtime_checkable
class RemoteServing(Protocol):
    """A target Ray's nodes fetch staged packages from at a URI of their own (an rtenv agent's
    download URL)."""

    def remote_uri(self, uri: str) -> str: ...


@runtime_checkable
class ForkingTarget(Protocol):
    """A target that can open a second connection of its own (uploads that run beside the main
    one and can be cancelled)."""

    def fork(self) -> Any: ...

    def close(self) -> None: ...
