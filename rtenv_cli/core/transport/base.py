"""The push target protocol every transport implements (Ray GCS or dashboard, agent, store,
file://)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

RAY_HTTP_LIMIT = 100 * 1024 * 1024  # the dashboard's aiohttp client_max_size (100 MiB)
PIN_SECONDS = 600  # RAY_RUNTIME_ENV_TEMPORARY_REFERENCE_EXPIRATION_S default


@runtime_checkable
class Target(Protocol):
    label: str  # shown to users, e.g. "Ray cluster http://127.0.0.1:8265"
    max_upload_bytes: int | None  # 100 MiB for Ray's dashboard, 512 MiB its GCS; None = no limit

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
