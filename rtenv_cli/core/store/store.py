"""The crash-safe store: packages, blobs and built entries, indexed in SQLite (WAL).

Layout under the root::

    index.sqlite        entries, refs, envs
    packages/<name>     Ray packages (verified against their name)
    manifests/<name>.json  packages published by the delta protocol: entries over blobs/ (the
                        zip is assembled into packages/ when first needed)
    blobs/ab/<sha256>   content-addressed files of the delta protocol
    entries/<key>/      published builds: meta.json (the completion marker) + tree/
    tmp/                builds in progress: <key>.<pid>.<rand>; published by rename
    trash/              tombstones: renamed here under the key's lock, then deleted
    locks/<key>.lock    one flock per key: identical creates build once across processes
                        (exists only while held: its holder removes it as it lets go)
    quarantine/         what recovery could not read (a torn meta.json, ...), kept for a look
    owners.lock         every process with the store open holds it shared
    uv-cache/           uv's cache, shared by all venvs (hardlinked into them)

Every publish is "write elsewhere, fsync, rename"; the index row is written after the rename.
On open, `recover()` deletes builds whose builder died and tombstones, re-indexes published
entries missing from the index and forgets rows whose directory vanished. A SIGKILL at any point
therefore loses nothing published and never exposes a half-built entry. A process that finds
itself alone (it gets `owners.lock` exclusively) also clears everything else in tmp/ (upload
spool files) and the lock files. An index SQLite cannot read is set aside as
`index.sqlite.corrupt-<time>` and rebuilt from the directories; an entry whose files cannot be
read goes to quarantine/. Each is logged in one line.

An upload (package, manifest, blob) is pinned for `pin_s` (Ray's 10 minutes by default,
`RTENV_UPLOAD_PIN_S`): a pin is a reference row with an expiry, so gc never removes what was
just pushed and is not yet referenced by the environment it is pushed for.

The parts, each in its own module: `layout` (paths, temp dirs, tombstones, quarantine),
`locks` (per-key and owners locks), `files` (durable writes and copies), `blobs`, `packages`
(zips and manifests; `zips` assembles their zip forms), `entries` (built once, published by
rename) and `recovery`. `Store` composes them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from rtenv_cli.core.errors import DiskFullError
from rtenv_cli.core.store import recovery
from rtenv_cli.core.store.blobs import Blobs
from rtenv_cli.core.store.entries import Entries
from rtenv_cli.core.store.files import Limited, Stream, out_of_space
from rtenv_cli.core.store.index import Entry, Index
from rtenv_cli.core.store.layout import SHA256_RE, SUBDIRS, Layout
from rtenv_cli.core.store.locks import Owners, safe_key
from rtenv_cli.core.store.packages import Packages

__all__ = ["PIN_ENV_VAR", "SHA256_RE", "UPLOAD_PIN_S", "Store", "safe_key"]

PIN_ENV_VAR = "RTENV_UPLOAD_PIN_S"
UPLOAD_PIN_S = 600.0  # Ray's RAY_RUNTIME_ENV_TEMPORARY_REFERENCE_EXPIRATION_S default


def _pin_seconds() -> float:
    try:
        return max(0.0, float(os.environ.get(PIN_ENV_VAR, UPLOAD_PIN_S)))
    except ValueError:
        return UPLOAD_PIN_S


class Store:
    """The store on `root`: its parts (`layout`, `blobs`, `packages`, `entries`) composed, the
    index recovered on open. The methods below are the parts' own, under the store's names."""

    def __init__(self, root: Path | None = None, *, recover: bool = True,
                 pin_s: float | None = None) -> None:
        from rtenv_cli.core.paths import private_dir, store_root

        private = root is None  # the per-user default under RTENV_HOME: nobody else's business
        # what the store holds runs as this user: it must be this user's alone (made 0700), and
        # it is used where it was checked (its real path), not through a link that could move
        self.root = private_dir((Path(root) if root is not None else store_root()).absolute(),
                                "the store")
        if private and self.root.stat().st_mode & 0o077:
            with contextlib.suppress(OSError):  # readable by others (an older rtenv's 0755)
                self.root.chmod(0o700)
        for sub in SUBDIRS:
            (self.root / sub).mkdir(exist_ok=True, mode=0o700)
        self._owners = Owners(self.root)
        alone = self._owners.claim()
        self.layout = Layout(self.root, recovery.open_index(self.root),
                             _pin_seconds() if pin_s is None else pin_s)
        self.blobs = Blobs(self.layout)
        self.packages = Packages(self.layout)
        self.entries = Entries(self.layout)
        if recover:
            self.recover(alone=alone)
        if alone:  # from here on, others may open it too
            self._owners.share()

    @property
    def index(self) -> Index:
        return self.layout.index

    @property
    def pin_s(self) -> float:
        return self.layout.pin_s

    def close(self) -> None:
        """Close the index and let go of owners.lock (the Store is unusable afterwards)."""
        self.index.close()
        self._owners.release()

    def recover(self, *, alone: bool = False) -> None:
        recovery.recover(self.layout, alone=alone)

    def forget_dead_envs(self) -> None:
        recovery.forget_dead_envs(self.index)

    @staticmethod
    def out_of_space(exc: BaseException) -> bool:
        return out_of_space(exc)

    def disk_full(self, exc: OSError) -> DiskFullError:
        return self.layout.disk_full(exc)

    def lock(self, key: str, *, blocking: bool = True) -> contextlib.AbstractContextManager[bool]:
        return self.layout.locks.lock(key, blocking=blocking)

    def tmp_dir(self, key: str) -> Path:
        return self.layout.tmp_dir(key)

    # -- entries ----------------------------------------------------------------------------------
    def entry_dir(self, key: str) -> Path:
        return self.layout.entry_dir(key)

    def get_or_build(self, key: str, *, kind: str, uri: str, label: str,
                     build: Callable[[Path], None], hold: str | None = None) -> Entry:
        return self.entries.get_or_build(key, kind=kind, uri=uri, label=label, build=build,
                                         hold=hold)

    def building(self) -> list[str]:
        return self.entries.building()

    def remove(self, key: str) -> bool:
        """Delete an unreferenced entry that nobody is building. False if it is busy or held."""
        with self.lock(key, blocking=False) as got:
            if not got:
                return False
            if key.startswith("blob:") and key.removeprefix("blob:") in self.blobs_in_use():
                return False  # a published manifest package is made of it
            if not self.entries.unpublish(key):
                return False
            if key.startswith("package:"):  # a delta package may have both forms
                self.packages.forget(key.removeprefix("package:"))
            return True  # the lock file goes as the lock is let go (KeyLocks.lock)

    # -- packages and manifests -------------------------------------------------------------------
    def package_path(self, name: str) -> Path:
        return self.layout.package_path(name)

    def manifest_path(self, name: str) -> Path:
        return self.layout.manifest_path(name)

    def has_package(self, name: str) -> bool:
        return self.packages.has(name)

    def package_size(self, name: str) -> int | None:
        return self.packages.size(name)

    def package_file(self, name: str) -> Path:
        return self.packages.file(name)

    def remote_file(self, name: str) -> Path:
        return self.packages.remote_file(name)

    def hold_package(self, name: str) -> bool:
        return self.packages.hold(name)

    def put_package(self, name: str, src: Path | BinaryIO, *,
                    expected_size: int | None = None,
                    extra_dirs: Sequence[str] = ()) -> Entry:
        return self.packages.put(name, src, expected_size=expected_size, extra_dirs=extra_dirs)

    def load_manifest(self, name: str) -> dict[str, Any] | None:
        return self.packages.load_manifest(name)

    def put_manifest(self, name: str, doc: dict[str, Any], size_bytes: int, *,
                     like: tuple[str, Sequence[int]] | None = None) -> Entry:
        """`like`: (a manifest's name, indices) when `doc`'s entries are that manifest's but
        at those indices (its stored text is then reused: Packages.put_manifest)."""
        del size_bytes  # the files are counted as blobs; the package is its manifest
        return self.packages.put_manifest(name, doc, like=like)

    def blobs_in_use(self) -> frozenset[str]:
        return self.packages.blobs_in_use()

    # -- blobs ------------------------------------------------------------------------------------
    def blob_path(self, sha: str) -> Path:
        return self.layout.blob_path(sha)

    def has_blobs(self, shas: list[str]) -> set[str]:
        return self.blobs.has(shas)

    def put_blob(self, sha: str, src: Path | BinaryIO | Limited, *, fsync: bool = True) -> Entry:
        return self.blobs.put(sha, src, fsync=fsync)

    def put_blobs(self, stream: BinaryIO | Stream) -> int:
        return self.blobs.put_stream(stream)

    def put_blob_files(self, blobs: Sequence[tuple[str, Path]]) -> None:
        self.blobs.put_files(blobs)
