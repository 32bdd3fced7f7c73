"""Get-or-create an environment from a runtime_env, and hold or release references to it.

An environment is a set of store entries (the unpacked working_dir, each py_module, one venv for
`pip` or `uv`) plus env_vars. Each entry is built once (single flight in the store); the holder's
references to all of them are taken in one transaction, which is what makes gc safe against a
racing create. Until then each entry the create found or built is held for it (a reference in
the transaction that finds it), and the package it unpacks is pinned with its existence check.
The index keeps an environment's entries and env var names, never their values.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtenv_cli.core.errors import (
    AgentError,
    PackagingError,
    RtenvError,
    UnsupportedError,
    UsageError,
    ValidationError,
)
from rtenv_cli.core.store import builders
from rtenv_cli.core.store.handle import EnvHandle
from rtenv_cli.core.store.index import pid_start_time, valid_pid
from rtenv_cli.core.store.store import Store, safe_key
from rtenv_cli.core.store.unpack import extract

if TYPE_CHECKING:
    import sqlite3

UNSUPPORTED = ("conda", "container", "image_uri", "java_jars", "mpi", "nsight", "rocprof_sys")


def _packages(kind: str, value: Any, base_dir: Path | None) -> tuple[list[str], list[str]]:
    """(requirements, install options) of a `pip` or `uv` field, normalised like Ray."""
    from rtenv_cli.core.spec import normalize

    fn = normalize.normalize_pip if kind == "pip" else normalize.normalize_uv
    value = fn(value, base_dir or Path.cwd())
    if not isinstance(value, dict) or not isinstance(value.get("packages"), list):
        raise ValidationError(f"`{kind}` must be a list of requirements or a dict with `packages`")
    opts_key = "pip_install_options" if kind == "pip" else "uv_pip_install_options"
    options = [str(o) for o in value.get(opts_key) or []]
    if value.get("pip_check" if kind == "pip" else "uv_check"):
        options.append(builders.CHECK_MARK)  # part of the key; the builder runs `uv pip check`
    return [str(p) for p in value["packages"]], options


def _memo_key(kind: str, value: Any) -> str | None:
    """A memo key for literal requirement lists; None when files are involved (they change)."""
    items = value if isinstance(value, list) else (value or {}).get("packages") \
        if isinstance(value, dict) else None
    if not isinstance(items, list) or any(str(i).lstrip().startswith("-") for i in items):
        return None
    if isinstance(value, dict) and any(builders.referenced_files([str(o)]) or str(o) in (
            "-r", "-c", "--requirement", "--constraint")
            for o in value.get("pip_install_options") or value.get("uv_pip_install_options")
            or ()):
        return None  # options naming files: their contents are part of the key
    return kind + json.dumps(value, sort_keys=True, default=str)


def _archive_kind(uri: str) -> str:
    return "https" if uri.startswith(("http://", "https://")) else uri.split("://", 1)[0]


_TOUCH_EVERY_S = 1.0


class Environments:
    def __init__(self, store: Store) -> None:
        self.store = store
        # normalised requirements and venv key per literal pip/uv value (the cache-hit path)
        self._venv_memo: dict[str, tuple[list[str], list[str], str]] = {}
        self._touched: dict[str, float] = {}  # key -> when this process last wrote its last use

    def uv_cache(self) -> Path:
        """uv's cache, shared by every venv of this store (its files are hardlinked into them,
        so it lives on the same filesystem, inside the store root)."""
        return self.store.root / "uv-cache"

    # -- components -------------------------------------------------------------------------------
    def _package_entry(self, kind: str, uri: str, *, ensure: bool = True,
                       hold: str | None = None) -> tuple[str, bool]:
        key = f"{kind}:{hashlib.sha256(uri.encode()).hexdigest()[:32]}"
        scheme = _archive_kind(uri)
        if scheme not in ("gcs", "file", "https"):
            raise UnsupportedError(f"{kind} URI scheme {scheme}:// is not supported by the rtenv "
                                   "agent", hint="use gcs:// (rtenv push), file:// or https://")
        wheel = uri.endswith(".whl")
        if wheel and kind != "py_modules":
            raise UnsupportedError(f"{kind} {uri}: a wheel is only a py_modules entry",
                                   hint="list the wheel under `pip` or `py_modules`")
        if not ensure:
            return key, False
        built = []

        def build(tree: Path) -> None:
            built.append(key)
            archive = self._fetch(uri, scheme, tree.parent)
            if wheel:  # installed like Ray's py_modules plugin: `pip install --target`
                from rtenv_cli.core.store.wheels import install_wheel

                install_wheel(archive, tree / "d", cache_dir=self.uv_cache())
            else:  # Ray strips a single top-level directory of remote (file://, http(s)://)
                # zips, never of gcs:// packages (packaging.download_and_unpack_package)
                extract(archive, tree / "d", strip_top_level=scheme != "gcs")
            if scheme == "https":
                archive.unlink()  # a download into the build dir, not part of the entry

        label = f"unpacked {uri.rsplit('/', 1)[-1]}" if scheme != "https" else uri
        self.store.get_or_build(key, kind=kind, uri=uri, label=label, build=build, hold=hold)
        return key, bool(built)

    def _fetch(self, uri: str, scheme: str, work: Path) -> Path:
        """A local file holding the archive at `uri`, named as the URI names it (an https one
        is downloaded into `work`)."""
        if scheme == "gcs":
            name = uri.removeprefix("gcs://")
            # pinned with the check, under its lock: a gc cannot take it from under the build
            if not self.store.hold_package(name):
                raise PackagingError(f"package {uri} is not in the store",
                                     hint="rtenv push it first (rtenv run does this)")
            return self.store.package_file(name)
        if scheme == "file":
            path = Path(uri.removeprefix("file://"))
            if not path.is_file():
                raise PackagingError(f"{uri} is not an archive file",
                                     hint="point file:// at a .zip (or a .whl in py_modules)")
            return path
        dest = work / uri.rsplit("/", 1)[-1]
        builders.fetch_url(uri, dest)
        return dest

    def _venv_entry(self, kind: str, value: Any, base_dir: Path | None,
                    env_vars: Mapping[str, str], *, ensure: bool = True,
                    hold: str | None = None) -> tuple[str, bool]:
        memo_key = _memo_key(kind, value)
        memo = self._venv_memo.get(memo_key) if memo_key else None
        if memo is None:
            reqs, opts = _packages(kind, value, base_dir)
            memo = (reqs, opts, builders.venv_key(kind, reqs, opts))
            if memo_key:
                if len(self._venv_memo) > 4096:  # noqa: PLR2004 - a bound, not a tuning knob
                    self._venv_memo.clear()
                self._venv_memo[memo_key] = memo
        packages, options, key = memo
        if not ensure:
            return key, False
        built = []

        def build(tree: Path) -> None:
            built.append(key)
            builders.build_venv(tree, packages, options, cache_dir=self.uv_cache(),
                                env_vars=env_vars)

        label = " ".join(packages) or "(no packages)"
        self.store.get_or_build(key, kind=kind, uri=f"{kind}://{key.split(':', 1)[1]}",
                                label=label, build=build, hold=hold)
        return key, bool(built)

    # -- environments -----------------------------------------------------------------------------
    def get_or_create(self, runtime_env: Mapping[str, Any], *, holder: str,
                      pid: int | None = None, lease_s: float | None = None,
                      base_dir: Path | None = None) -> EnvHandle:
        token = f"{os.getpid()}.{threading.get_ident()}.{secrets.token_hex(4)}"
        try:
            handle = self._get_or_create(runtime_env, holder=holder, pid=pid, lease_s=lease_s,
                                         base_dir=base_dir, build=True, hold=token)
        finally:  # what was held for this create, now referenced by its environment (or not)
            with self.store.index.tx() as db:
                self.store.index.drop_create_holds(db, token)
        assert handle is not None  # noqa: S101 - build=True never returns None
        return handle

    def try_hits(self, requests: Sequence[Mapping[str, Any]]) -> list[EnvHandle | None]:
        """For each request (`runtime_env`, `holder`, `pid`, `lease_s`), the environment if
        every entry is already built (no build, no wait), else None (a miss, an error): all in
        one short transaction, cheap enough for the server's event loop, which batches the hits
        that arrive together so they share one commit."""
        results: list[EnvHandle | None] = []
        touched: list[str] = []
        with self.store.index.tx() as db:
            for req in requests:
                try:
                    results.append(self._get_or_create(**req, base_dir=None, build=False,
                                                       db=db, touched=touched))
                except RtenvError:
                    results.append(None)
        self._remember_touched(touched)
        return results

    def _get_or_create(self, runtime_env: Mapping[str, Any], *, holder: str,
                       pid: int | None, lease_s: float | None, base_dir: Path | None,
                       build: bool, db: sqlite3.Connection | None = None,
                       touched: list[str] | None = None,
                       hold: str | None = None) -> EnvHandle | None:
        _check_holder(pid, lease_s)
        bad = [k for k in runtime_env if k in UNSUPPORTED]
        if bad:
            raise UnsupportedError(
                f"`{bad[0]}` is not supported by the rtenv agent",
                hint="use pip or uv for dependencies, or run this job through Ray itself")
        # other unknown fields: Ray keeps them as plugin names and ignores them; so do we
        # (`rtenv validate` and `rtenv run` warn about them)
        env_vars = {str(k): str(v) for k, v in (runtime_env.get("env_vars") or {}).items()}
        if runtime_env.get("pip") and runtime_env.get("uv"):
            raise ValidationError("`pip` and `uv` cannot both be set", hint="keep one of them")
        # attempt 0 only looks keys up (a cache hit is one transaction); later ones build
        for attempt in range(6):  # a gc may remove a just-built entry before we hold it
            ensure = attempt > 0
            if ensure and not build:
                return None
            keys: list[str] = []
            built: list[str] = []
            wd = runtime_env.get("working_dir")
            if wd:
                key, fresh = self._package_entry("working_dir", str(wd), ensure=ensure,
                                                 hold=hold)
                keys.append(key)
                built += [key] if fresh else []
            mods = []
            for uri in runtime_env.get("py_modules") or []:
                key, fresh = self._package_entry("py_modules", str(uri), ensure=ensure,
                                                 hold=hold)
                keys.append(key)
                mods.append(key)
                built += [key] if fresh else []
            venv_key = None
            for kind in ("pip", "uv"):
                if runtime_env.get(kind):
                    venv_key, fresh = self._venv_entry(kind, runtime_env[kind], base_dir,
                                                       env_vars, ensure=ensure, hold=hold)
                    keys.append(venv_key)
                    built += [venv_key] if fresh else []
            spec = {"entries": keys, "env_vars": env_vars}
            env_key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:32]
            if self._acquire(env_key, spec, keys, holder, pid=pid, lease_s=lease_s, db=db,
                             touched=touched):
                root = self.store.root
                return EnvHandle(
                    key=env_key, holder=holder,
                    working_dir=str(root / "entries" / _dirname(keys[0]) / "tree" / "d")
                    if wd else None,
                    py_modules=tuple(str(root / "entries" / _dirname(k) / "tree" / "d")
                                     for k in mods),
                    venv=str(root / "entries" / _dirname(venv_key) / "tree" / "venv")
                    if venv_key else None,
                    env_vars=env_vars, entries=tuple(keys), built=tuple(built))
        raise AgentError("environment entries kept disappearing during creation",
                         hint="a garbage collection is racing this create; retry")

    def _acquire(self, env_key: str, spec: dict[str, Any], keys: list[str], holder: str, *,
                 pid: int | None, lease_s: float | None, db: sqlite3.Connection | None = None,
                 touched: list[str] | None = None) -> bool:
        """Hold `keys` for `holder` if they all exist, in one transaction (`db`'s, when the
        caller has one open: then the keys whose last use was written go to `touched`, to be
        remembered once it commits)."""
        if db is None:
            done: list[str] = []
            with self.store.index.tx() as own:
                held = self._acquire(env_key, spec, keys, holder, pid=pid, lease_s=lease_s,
                                     db=own, touched=done)
            self._remember_touched(done)
            return held
        now = time.time()
        start = pid_start_time(pid) if pid is not None else None
        expires = now + lease_s if lease_s else None
        # last use is kept to the second: a hit within a second of this process's previous write
        # of it adds only its references (fewer pages per commit on the hot path); envs rows are
        # never deleted, so one this process wrote is still there
        stale = [k for k in (env_key, *keys) if now - self._touched.get(k, 0.0) >= _TOUCH_EVERY_S
                 and k not in (touched or ())]
        present = {r[0] for r in db.execute(
            f"SELECT key FROM entries WHERE key IN ({','.join('?' * len(keys))})",  # noqa: S608 - placeholders only
            keys)} if keys else set()
        if present != set(keys):
            return False
        if env_key in stale:  # what `list_envs` shows: entries and env var names, no values
            shown = {"entries": spec["entries"], "env_var_keys": sorted(spec["env_vars"])}
            db.execute("INSERT INTO envs VALUES (?,?,?,?) ON CONFLICT(key) DO UPDATE SET "
                       "spec=excluded.spec, last_used_at=excluded.last_used_at",
                       (env_key, json.dumps(shown, sort_keys=True), now, now))
        db.executemany("INSERT OR REPLACE INTO refs VALUES (?,?,?,?,?,?,?)",
                       [(env_key, key, holder, pid, start, expires, now) for key in keys])
        touch = [k for k in keys if k in stale]
        if touch:
            db.execute(f"UPDATE entries SET last_used_at=? WHERE key IN "  # noqa: S608 - placeholders only
                       f"({','.join('?' * len(touch))})", (now, *touch))
        if touched is not None:
            touched.extend(stale)
        return True

    def _remember_touched(self, keys: list[str]) -> None:
        if len(self._touched) > 65536:  # noqa: PLR2004 - a bound, not a tuning knob
            self._touched.clear()
        self._touched.update(dict.fromkeys(keys, time.time()))

    def release(self, env_key: str, holder: str) -> int:
        """Drop `holder`'s references to an environment; the entries stay cached."""
        with self.store.index.tx() as db:
            cur = db.execute("DELETE FROM refs WHERE env_key=? AND holder=?", (env_key, holder))
            return cur.rowcount

    def list_envs(self) -> list[dict[str, Any]]:
        db = self.store.index.conn()
        rows = db.execute("SELECT e.key, e.spec, e.created_at, e.last_used_at, "
                          "(SELECT COUNT(DISTINCT holder) FROM refs r WHERE r.env_key=e.key) "
                          "AS holders FROM envs e ORDER BY e.created_at").fetchall()
        out = []
        for r in rows:
            try:
                spec = json.loads(r["spec"])
                names = spec.get("env_var_keys", spec.get("env_vars", ()))  # older rows: values
                out.append({"key": r["key"], "entries": list(spec["entries"]),
                            "env_var_keys": sorted(names), "holders": r["holders"],
                            "created_at": r["created_at"], "last_used_at": r["last_used_at"]})
            except (ValueError, TypeError, KeyError, AttributeError):
                continue  # a row this code cannot read: not shown, never fatal
        return out


def _check_holder(pid: Any, lease_s: Any) -> None:
    """A reference's pid and lease as the index needs them (a row it cannot use would stop
    every gc and the store's start-up)."""
    if pid is not None and not valid_pid(pid):
        raise UsageError(f"pid {pid!r} is not a process id",
                         hint="send the holder's pid as a positive integer, or a lease_s")
    if lease_s is not None and (isinstance(lease_s, bool) or not isinstance(lease_s, (int, float))
                                or not 0 < lease_s < 10 * 365 * 86400):
        raise UsageError(f"lease_s {lease_s!r} is not a duration in seconds",
                         hint="send a positive number of seconds")


def _dirname(key: str | None) -> str:
    return safe_key(key or "")
