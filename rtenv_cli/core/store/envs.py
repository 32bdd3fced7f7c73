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
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeGuard

from rtenv_cli.core.errors import (
    AgentError,
    PackagingError,
    RtenvError,
    TransportError,
    UnsupportedError,
    UsageError,
    ValidationError,
)
from rtenv_cli.core.spec.fields import agent_refused
from rtenv_cli.core.store import builders
from rtenv_cli.core.store.beneath import open_regular, open_under_roots
from rtenv_cli.core.store.handle import EnvHandle
from rtenv_cli.core.store.index import pid_start_time, valid_pid
from rtenv_cli.core.store.store import Store, safe_key
from rtenv_cli.core.store.unpack import extract

if TYPE_CHECKING:
    import sqlite3

UNSUPPORTED = agent_refused()  # from the field table
_OPTIONS = {"pip": "pip_install_options", "uv": "uv_pip_install_options"}


def _packages(kind: str, value: Any, base_dir: Path | None) -> tuple[list[str], list[str]]:
    """(requirements, install options) of a `pip` or `uv` field, normalised like Ray."""
    from rtenv_cli.core.spec import normalize

    packages = value.get("packages") if isinstance(value, dict) else None
    for n, item in enumerate(packages if isinstance(packages, list) else ()):
        if not isinstance(item, str):  # Ray's pip dict lets it through to `pip install` (fails)
            raise ValidationError(f"`{kind}.packages[{n}]` must be a requirement string, not "
                                  f"{type(item).__name__}", hint="write it as pip would, e.g. "
                                  "\"six==1.16.0\"")
    fn = normalize.normalize_pip if kind == "pip" else normalize.normalize_uv
    value = fn(value, base_dir or Path.cwd())
    if not isinstance(value, dict) or not isinstance(value.get("packages"), list):
        raise ValidationError(f"`{kind}` must be a list of requirements or a dict with `packages`")
    options = [str(o) for o in value.get(_OPTIONS[kind]) or []]
    if value.get("pip_check" if kind == "pip" else "uv_check"):
        options.append(builders.CHECK_MARK)  # part of the key; the builder runs `uv pip check`
    return [str(p) for p in value["packages"]], options


# a runtime_env remembered by its JSON (a plan here, a checked request in the agent) is at most
# this long: the memos are bounded by count (4,096), and a client sending large runtime_envs
# must not make them hold gigabytes (a hit of a large one is worked out afresh each time)
MEMO_MAX_JSON = 16 * 1024


def _strings(value: Any) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _memo_key(kind: str, value: Any) -> str | None:
    """A memo key for literal requirement lists; None when files are involved (they change),
    and for any value not shaped as Ray's parser wants it: that one is not looked at here (it
    is read before the normaliser runs), `_packages` refuses it with the field's name."""
    items = value if isinstance(value, list) else value.get("packages") \
        if isinstance(value, dict) else None
    if not _strings(items) or any(i.lstrip().startswith("-") for i in items):
        return None
    if isinstance(value, dict):
        options = value.get(_OPTIONS[kind], [])
        if not _strings(options):
            return None
        if any(builders.referenced_files([o]) or o in ("-r", "-c", "--requirement",
                                                         "--constraint") for o in options):
            return None  # options naming files: their contents are part of the key
    return kind + json.dumps(value, sort_keys=True, default=str)


def _archive_kind(uri: str) -> str:
    return "https" if uri.startswith(("http://", "https://")) else uri.split("://", 1)[0]


_TOUCH_EVERY_S = 1.0


@dataclass(frozen=True)
class _Plan:
    """What a runtime_env resolves to before anything is built: its entries' keys, the
    environment's key and where each entry lives (a function of the runtime_env alone, so the
    cache-hit path works it out once)."""

    env_key: str
    keys: tuple[str, ...]
    env_vars: dict[str, str]
    shown: str  # the envs row's spec: entries and env var names, no values
    working_dir: str | None
    py_modules: tuple[str, ...]
    venv: str | None

    def handle(self, holder: str, built: tuple[str, ...] = ()) -> EnvHandle:
        return EnvHandle(key=self.env_key, holder=holder, working_dir=self.working_dir,
                         py_modules=self.py_modules, venv=self.venv,
                         env_vars=dict(self.env_vars), entries=self.keys, built=built)


class Environments:
    def __init__(self, store: Store, *,
                 fetch: Callable[[str, Path], None] | None = None,
                 file_roots: tuple[Path, ...] | None = None) -> None:
        """`fetch(url, dest)` downloads an http(s) archive: what serves requests passes
        transport.http.fetch_archive (a deadline and a size cap; the store sits below the
        transports); builders.fetch_url by default. `file_roots`: the directories a `file://`
        archive must be opened beneath (the agent's `--allow-file-root`; empty: none may be);
        None: any path (this user's own `rtenv run`)."""
        self.store = store
        self._fetch_url = fetch or builders.fetch_url
        self.file_roots = file_roots
        # normalised requirements and venv key per literal pip/uv value (the cache-hit path)
        self._venv_memo: dict[str, tuple[list[str], list[str], str]] = {}
        self._touched: dict[str, float] = {}  # key -> when this process last wrote its last use
        # runtime_env as JSON -> (the runtime_env, its plan): what a cache hit reuses
        self._plans: dict[str, tuple[Any, _Plan]] = {}

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
            if scheme == "file" and not wheel:  # unpacked from its one open (no path reopened)
                with self._open_file_uri(uri) as opened:
                    extract(opened, tree / "d", strip_top_level=True,
                            label=uri.rsplit("/", 1)[-1])
                return
            archive = self._fetch(uri, scheme, tree.parent)
            if wheel:  # installed like Ray's py_modules plugin: `pip install --target`
                from rtenv_cli.core.store.wheels import install_wheel

                install_wheel(archive, tree / "d", cache_dir=self.uv_cache())
            else:  # Ray strips a single top-level directory of remote (file://, http(s)://)
                # zips, never of gcs:// packages (packaging.download_and_unpack_package)
                try:
                    extract(archive, tree / "d", strip_top_level=scheme != "gcs")
                except FileNotFoundError:  # `cache purge` takes even a held package
                    raise PackagingError(f"package {uri} left the store while it was being "
                                         "unpacked (a `cache purge`)",
                                         hint="rtenv push it again (rtenv run does this)") from None
            if scheme != "gcs":
                archive.unlink()  # a download or copy into the build dir, not the entry

        label = f"unpacked {uri.rsplit('/', 1)[-1]}" if scheme != "https" else uri
        self.store.get_or_build(key, kind=kind, uri=uri, label=label, build=build, hold=hold)
        return key, bool(built)

    def _fetch(self, uri: str, scheme: str, work: Path) -> Path:
        """A local file holding the archive at `uri`, named as the URI names it (an https one
        is downloaded into `work`, a file:// one copied there)."""
        if scheme == "gcs":
            name = uri.removeprefix("gcs://")
            # pinned with the check, under its lock: a gc cannot take it from under the build
            if not self.store.hold_package(name):
                raise PackagingError(f"package {uri} is not in the store",
                                     hint="rtenv push it first (rtenv run does this)")
            return self.store.package_file(name)
        dest = work / uri.rsplit("/", 1)[-1]
        if scheme == "file":  # a wheel: uv installs from a path, a copy of the one open
            with self._open_file_uri(uri) as opened, dest.open("xb") as copy:
                shutil.copyfileobj(opened, copy)
            return dest
        try:
            self._fetch_url(uri, dest)
        except TransportError as exc:  # the request's archive, not the agent, failed: a 4xx
            raise PackagingError(f"cannot fetch {uri}: {exc.message}", hint=exc.hint) from None
        return dest

    def _open_file_uri(self, uri: str) -> IO[bytes]:
        """The archive a `file://` URI names, open: beneath one of `file_roots` (never by a
        link out of it, see store.beneath), or anywhere when there are none to keep to."""
        path = Path(uri.removeprefix("file://"))
        if self.file_roots is not None:
            return open_under_roots(path, self.file_roots, what=uri)
        return open_regular(path, what=uri)

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
        _check_holder(pid, lease_s)
        token = f"{os.getpid()}.{threading.get_ident()}.{secrets.token_hex(4)}"
        try:
            # attempt 0 only looks keys up (a cache hit is one transaction); later ones build
            for attempt in range(6):  # a gc may remove a just-built entry before we hold it
                built: list[str] = []
                if attempt == 0:
                    plan = self._plan(runtime_env, base_dir)
                else:
                    plan, built = self._resolve(runtime_env, base_dir, ensure=True, hold=token)
                if self._acquire(plan, holder, pid=pid, lease_s=lease_s):
                    return plan.handle(holder, tuple(built))
        finally:  # what was held for this create, now referenced by its environment (or not)
            with self.store.index.tx() as db:
                self.store.index.drop_create_holds(db, token)
        raise AgentError("environment entries kept disappearing during creation",
                         hint="a garbage collection is racing this create; retry")

    def try_hits(self, requests: Sequence[Mapping[str, Any]], *,
                 wait: bool = True) -> list[EnvHandle | None]:
        """For each request (`runtime_env`, `holder`, `pid`, `lease_s`), the environment if
        every entry is already built (no build, no wait), else None (a miss, an error): all in
        one short transaction, cheap enough for the server's event loop, which batches the hits
        that arrive together so they share one commit. With `wait=False`, index.WriterBusy
        when another writer holds the index (nothing is held then)."""
        claims: list[tuple[_Plan, str, int | None, float | None] | None] = []
        for req in requests:
            try:
                _check_holder(req["pid"], req["lease_s"])
                claims.append((self._plan(req["runtime_env"]), req["holder"], req["pid"],
                               req["lease_s"]))
            except RtenvError:
                claims.append(None)
        valid = [c for c in claims if c is not None]
        if not valid:
            return [None] * len(claims)
        with self.store.index.tx(wait=wait) as db:
            held, touched = self._hold(db, valid)
        self._remember_touched(touched)
        answers = iter(held)
        return [c[0].handle(c[1]) if c is not None and next(answers) else None for c in claims]

    def _plan(self, runtime_env: Mapping[str, Any], base_dir: Path | None = None) -> _Plan:
        """`runtime_env`'s plan without building anything, remembered when it is a function of
        the runtime_env alone (no requirement files, so `base_dir` plays no part): a cache hit
        reuses it."""
        try:
            memo_key: str | None = json.dumps(runtime_env, sort_keys=True)
        except (TypeError, ValueError, RecursionError):  # not JSON: computed every time
            memo_key = None
        if memo_key is not None:
            known = self._plans.get(memo_key)
            # equal JSON with equal values: a tuple for a list (JSON cannot tell) is not the same
            if known is not None and known[0] == runtime_env:
                return known[1]
        plan, _built = self._resolve(runtime_env, base_dir, ensure=False)
        if memo_key is not None and len(memo_key) <= MEMO_MAX_JSON and all(
                _memo_key(kind, runtime_env[kind]) is not None
                for kind in ("pip", "uv") if runtime_env.get(kind)):
            if len(self._plans) > 4096:  # noqa: PLR2004 - a bound, not a tuning knob
                self._plans.clear()
            self._plans[memo_key] = (json.loads(memo_key), plan)  # a copy the caller cannot change
        return plan

    def _resolve(self, runtime_env: Mapping[str, Any], base_dir: Path | None, *, ensure: bool,
                 hold: str | None = None) -> tuple[_Plan, list[str]]:
        """The plan of `runtime_env`, and (with `ensure`) its entries built or found, each held
        for the create `hold`: (plan, keys of the entries this call built)."""
        bad = [k for k in runtime_env if k in UNSUPPORTED]
        conda = runtime_env.get("conda")
        if conda is not None and not isinstance(conda, str | dict):  # Ray's TypeError first
            from rtenv_cli.core.spec.normalize import normalize_conda

            normalize_conda(conda, Path.cwd())
        if bad:
            raise UnsupportedError(
                f"`{bad[0]}` is not supported by the rtenv agent",
                hint="use pip or uv for dependencies, or run this job through Ray itself")
        # other unknown fields: Ray keeps them as plugin names and ignores them; so do we
        # (`rtenv validate` and `rtenv run` warn about them)
        env_vars = {str(k): str(v) for k, v in (runtime_env.get("env_vars") or {}).items()}
        if runtime_env.get("pip") and runtime_env.get("uv"):
            raise ValidationError("`pip` and `uv` cannot both be set", hint="keep one of them")
        keys: list[str] = []
        built: list[str] = []
        wd = runtime_env.get("working_dir")
        if wd:
            key, fresh = self._package_entry("working_dir", str(wd), ensure=ensure, hold=hold)
            keys.append(key)
            built += [key] if fresh else []
        mods = []
        for uri in runtime_env.get("py_modules") or []:
            key, fresh = self._package_entry("py_modules", str(uri), ensure=ensure, hold=hold)
            keys.append(key)
            mods.append(key)
            built += [key] if fresh else []
        venv_key = None
        for kind in ("pip", "uv"):
            # no requirements: null or [] (Ray drops both); any other value is parsed, so that
            # a 0, false, "" or {} is refused as Ray refuses it, not taken for "none"
            if runtime_env.get(kind) not in (None, []):
                venv_key, fresh = self._venv_entry(kind, runtime_env[kind], base_dir, env_vars,
                                                   ensure=ensure, hold=hold)
                keys.append(venv_key)
                built += [venv_key] if fresh else []
        spec = {"entries": keys, "env_vars": env_vars}
        env_key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:32]
        entries = self.store.root / "entries"
        return _Plan(
            env_key=env_key, keys=tuple(keys), env_vars=env_vars,
            shown=json.dumps({"entries": keys, "env_var_keys": sorted(env_vars)},
                             sort_keys=True),
            working_dir=str(entries / _dirname(keys[0]) / "tree" / "d") if wd else None,
            py_modules=tuple(str(entries / _dirname(k) / "tree" / "d") for k in mods),
            venv=str(entries / _dirname(venv_key) / "tree" / "venv") if venv_key else None,
        ), built

    def _acquire(self, plan: _Plan, holder: str, *, pid: int | None,
                 lease_s: float | None) -> bool:
        """Hold `plan`'s entries for `holder` if they all exist, in a transaction of its own."""
        with self.store.index.tx() as db:
            held, touched = self._hold(db, [(plan, holder, pid, lease_s)])
        self._remember_touched(touched)
        return held[0]

    def _hold(self, db: sqlite3.Connection,
              claims: Sequence[tuple[_Plan, str, int | None, float | None]]
              ) -> tuple[list[bool], list[str]]:
        """Reference each claim's entries for its holder (plan, holder, pid, lease_s) if they
        all exist, in `db`'s transaction: (held or not, per claim; the keys whose last use was
        written, to be remembered once the transaction commits). One query and one insert for
        all the claims: the server's batch of hits costs little more than one."""
        now = time.time()
        present = self.store.index.present(db, (k for claim in claims for k in claim[0].keys))
        starts: dict[int, str | None] = {}  # a pid's start time, read once per transaction
        held: list[bool] = []
        rows: list[tuple[Any, ...]] = []
        used: dict[str, _Plan] = {}
        for plan, holder, pid, lease_s in claims:
            if not present.issuperset(plan.keys):
                held.append(False)
                continue
            held.append(True)
            if pid is not None and pid not in starts:
                starts[pid] = pid_start_time(pid)
            start = starts[pid] if pid is not None else None
            expires = now + lease_s if lease_s else None
            rows += [(plan.env_key, key, holder, pid, start, expires, now) for key in plan.keys]
            used[plan.env_key] = plan
        # last use is kept to the second: a hit within a second of this process's previous write
        # of it adds only its references (fewer pages per commit on the hot path); a gc that
        # removed the envs row meanwhile (forget_dead_envs) leaves `list_envs` without it until
        # the next write, at most a second later: the references, which gc reads, are written
        envs = [p for k, p in used.items() if now - self._touched.get(k, 0.0) >= _TOUCH_EVERY_S]
        if envs:  # what `list_envs` shows: entries and env var names, no values
            db.executemany("INSERT INTO envs VALUES (?,?,?,?) ON CONFLICT(key) DO UPDATE SET "
                           "spec=excluded.spec, last_used_at=excluded.last_used_at",
                           [(p.env_key, p.shown, now, now) for p in envs])
        if rows:
            db.executemany("INSERT OR REPLACE INTO refs VALUES (?,?,?,?,?,?,?)", rows)
        touch = sorted({k for p in used.values() for k in p.keys
                        if now - self._touched.get(k, 0.0) >= _TOUCH_EVERY_S})
        self.store.index.mark_used(db, touch, now)
        return held, [p.env_key for p in envs] + touch

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
