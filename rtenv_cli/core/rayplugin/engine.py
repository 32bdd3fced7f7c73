"""What the Ray plugin does, without Ray: the `rtenv` field's URI, its build on the node's store,
the worker's interpreter, and the release of rtenv's reference.

One `Engine` lives in each node's runtime-env agent (Ray constructs the plugin once). It opens
the store on first use, never in its constructor: a bad store path or a missing uv is an error
of each setup that needs them (a `RuntimeEnvSetupError` with a hint), never of the agent, whose
death takes the raylet with it.

The build is `Environments.get_or_create` on the same store as `rtenv agent` and `rtenv run`
(single flight per key across threads and processes, published by rename), run in a thread off
the agent's event loop. A cancelled setup (Ray's `setup_timeout_seconds`) kills the build's
processes and waits for the store to discard its directory before the cancellation goes on.

References: rtenv holds one reference per URI while Ray's URI cache holds it, named after the
agent's pid (so it ends with the agent, and with the Ray session), and as a *lease*
(RTENV_RAY_LEASE, default 60 s) that a thread of the plugin renews while a live process of the
node uses the environment (store/users.py: its VIRTUAL_ENV, PYTHONPATH or cwd). Ray's raylet does
not always hand a reference back (a URI can stay "used" in Ray's cache after every worker
exited, so `delete_uri` never comes): the lease makes the reference follow the workers, not
Ray's count. `release` (Ray's `delete_uri`) drops it at once. Whether the bytes go is the
store's budget's call (`RTENV_MAX_SIZE`, `RTENV_MAX_AGE`, `rtenv cache gc`), so a later job or a
new Ray session on the same store is a cache hit; the node's gc pins whatever a live process
uses (cache/ray_store.py), so a worker started later from Ray's cached context never loses its
environment, and a renewal rebuilds an entry that went meanwhile.

Trees (`rtenv.working_dir`, `rtenv.py_modules`: rtenv-tree:// URIs that `rtenv push` published
to the cluster's KV) are materialized by core/trees/materialize.py under `<store>/trees`, one
URI each, off the event loop; the node's reference to a manifest is a key in the KV
(`r:<manifest>:<node>`) while Ray holds the URI and, after a lease, only while a live process
uses the tree (as for environments), so the cluster's gc keeps what a live worker uses. The
plugin announces its node (`n:<node>`) when Ray constructs it, so a push can tell whether every
node loads it.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtenv_cli.core.errors import AgentError, RtenvError, UsageError, ValidationError
from rtenv_cli.core.rayplugin import guard as guard_
from rtenv_cli.core.rayplugin import schema

if TYPE_CHECKING:
    from rtenv_cli.core.store.envs import Environments
    from rtenv_cli.core.transport.ray_kv import RayKV
    from rtenv_cli.core.trees.materialize import NodeTrees

log = logging.getLogger("rtenv.rayplugin")
URI_SCHEME = "rtenv://"
WORKING_DIR_ENV = "RAY_RUNTIME_ENV_CREATE_WORKING_DIR"
CANCEL_WAIT_S = 30.0
GC_EVERY_S = 600.0  # the plugin's own collection of the cluster's trees (trees/gc.py)
LEASE_S = 60.0  # schema.LEASE_ENV's default


class SetupError(RuntimeError):
    """A setup's failure as Ray shows it to the user: the message, then `hint: ...`."""

    @classmethod
    def of(cls, exc: RtenvError) -> SetupError:
        text = f"rtenv: {exc.message}"
        return cls(f"{text}\nhint: {exc.hint}" if exc.hint else text)


@dataclass(frozen=True)
class Held:
    env_key: str
    holder: str
    venv: str
    size_bytes: int


def store_root() -> Path:
    """The plugin's store: `$RTENV_HOME/store` (or the per-user default), as `rtenv cache` sees
    it with the same RTENV_HOME."""
    from rtenv_cli.core.paths import store_root as default_root

    return default_root()


def agent_arg(name: str, argv: list[str] | None = None) -> str | None:
    """`--name VALUE` (or `--name=VALUE`) of the runtime-env agent's command line: Ray gives a
    plugin no GCS client, only its process's arguments (`--gcs-address`, `--node-id`)."""
    import sys

    args = sys.argv if argv is None else argv
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def configured_priority(environ: Mapping[str, str] | None = None) -> int:
    """The priority this node's RAY_RUNTIME_ENV_PLUGINS gives rtenv's plugin (the agent
    inherits the raylet's environment): below Ray's built-ins' 10, it removes push's guard."""
    env = os.environ if environ is None else environ
    try:
        for entry in json.loads(env.get(schema.PLUGINS_ENV) or "[]"):
            if entry.get("class") == schema.PLUGIN_CLASS:
                return int(entry.get("priority", schema.PRIORITY))
    except (ValueError, TypeError, AttributeError):
        pass
    return schema.PRIORITY


def lease_seconds(environ: Mapping[str, str] | None = None) -> float:
    """RTENV_RAY_LEASE of the node's `ray start` (the agent inherits it), else LEASE_S; an
    unreadable value is logged and the default used (never the agent's death)."""
    text = (os.environ if environ is None else environ).get(schema.LEASE_ENV)
    if text:
        from rtenv_cli.core.units import parse_duration

        try:
            return max(1.0, parse_duration(text))
        except RtenvError as exc:
            log.warning("rtenv: %s=%s: %s; using %ss", schema.LEASE_ENV, text, exc.message,
                        LEASE_S)
    return LEASE_S


class Engine:
    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._envs: Environments | None = None
        self._held: dict[str, Held] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._trees: NodeTrees | None = None
        self._tree_paths: dict[str, tuple[Path, int]] = {}
        self.node_id = agent_arg("--node-id") or f"pid-{os.getpid()}"
        self._last_gc = time.monotonic()  # the first collection a period after the start
        self.gcs_address = agent_arg("--gcs-address")
        self.lease_s = lease_seconds()
        self._renew: dict[str, Callable[[], Any]] = {}  # uri -> renews its env's lease
        self._tree_refs: set[str] = set()  # tree URIs whose `r:` key this node holds
        self._tree_seen: dict[str, float] = {}  # tree URI -> monotonic time last created/used
        self._leases: threading.Thread | None = None
        # a renewal and a release of one URI never interleave: a renewal that read the URI as
        # held before `delete_uri` would otherwise take a lease after the release
        self._lease_lock = threading.Lock()

    # -- the cluster's KV and the node's trees ----------------------------------------------------
    def kv(self) -> RayKV:
        from rtenv_cli.core.transport.ray_kv import RayKV

        if not self.gcs_address:
            raise AgentError("the runtime-env agent has no --gcs-address argument",
                             hint="rtenv trees need Ray's runtime-env agent (ray start)")
        return RayKV.connect(self.gcs_address)

    def trees(self) -> NodeTrees:
        with self._guard:
            if self._trees is None:
                from rtenv_cli.core.trees.materialize import NodeTrees

                self._trees = NodeTrees(store_root() / "trees", self.node_id, self.kv)
            return self._trees

    def announce(self, logger: logging.Logger | None = None) -> None:
        """Write `n:<node>` to the cluster's KV (retried while the GCS starts); never raises."""
        from rtenv_cli import __version__

        value = json.dumps({"pid": os.getpid(), "version": __version__, "t": time.time(),
                            "priority": configured_priority()})
        for attempt in range(30):
            try:
                kv = self.kv()
                try:
                    kv.put(f"n:{self.node_id}", value.encode())
                finally:
                    kv.close()
                return
            except Exception as exc:  # the agent must never die of this
                if attempt == 29:  # noqa: PLR2004 - the last try
                    (logger or log).warning("rtenv: could not announce node %s: %s",
                                            self.node_id, exc)
                time.sleep(min(2.0, 0.1 * 2 ** attempt))

    async def create_tree(self, uri: str, logger: logging.Logger) -> int:
        from rtenv_cli.core.trees.manifest import manifest_id

        lock = self._locks.setdefault(uri, asyncio.Lock())
        async with lock:
            self._start_leases()
            held = self._tree_paths.get(uri)
            if held is not None and held[0].is_dir():
                self._tree_seen[uri] = time.monotonic()
                return held[1]
            loop = asyncio.get_running_loop()
            start = time.perf_counter()
            try:
                ident = manifest_id(uri)
                path, size, how = await loop.run_in_executor(None, self._ensure_tree, ident)
            except RtenvError as exc:
                logger.error("rtenv: %s", exc.message)
                raise SetupError.of(exc) from None
            except Exception as exc:  # a setup error, never the agent's death
                logger.exception("rtenv: materializing %s failed", uri)
                raise SetupError(f"rtenv: materializing {uri} on node {self.node_id} failed: "
                                 f"{exc}\nhint: see the node's runtime_env_setup-*.log") from None
            self._tree_paths[uri] = (path, size)
            self._tree_seen[uri] = time.monotonic()
            self._tree_refs.add(uri)
            logger.info("rtenv: tree %s %s in %.3fs at %s", uri, {
                "built": "materialized from the node's objects",
                "patched": "materialized by patching a spare tree"}.get(how, "found"),
                        time.perf_counter() - start, path)
            return size

    def _ensure_tree(self, ident: str) -> tuple[Path, int, str]:
        out = self.trees().ensure(ident)
        self._set_ref(ident, held=True)
        return out

    def _set_ref(self, ident: str, *, held: bool) -> None:
        """Put (or delete) this node's reference to manifest `ident` in the cluster's KV."""
        kv = self.kv()
        try:
            if held:
                kv.put(f"r:{ident}:{self.node_id}", str(time.time()).encode())
            else:
                kv.delete(f"r:{ident}:{self.node_id}")
        finally:
            kv.close()

    def tree_path(self, uri: str) -> Path:
        held = self._tree_paths.get(uri)
        if held is None or not held[0].is_dir():
            raise SetupError(f"rtenv: the tree of {uri} is not on node {self.node_id}"
                             "\nhint: it was removed while in use (rtenv cache purge?); retry")
        return held[0]

    def release_tree(self, uri: str, logger: logging.Logger | None = None) -> int:
        """No worker of this node holds `uri` any more: remove its tree and the node's
        reference; returns the bytes freed."""
        with self._lease_lock:
            held = self._tree_paths.pop(uri, None)
            self._tree_seen.pop(uri, None)
            self._tree_refs.discard(uri)
        if held is None:
            return 0
        try:
            from rtenv_cli.core.trees.manifest import manifest_id

            ident = manifest_id(uri)
            self.trees().remove(ident)
            threading.Thread(target=self._drop_ref, args=(ident,), daemon=True).start()
        except Exception as exc:  # never let a release take the agent down
            (logger or log).warning("rtenv: releasing %s failed: %s", uri, exc)
            return 0
        (logger or log).info("rtenv: released tree %s", uri)
        return held[1]

    def _drop_ref(self, ident: str) -> None:
        """Delete the node's reference; then, at most every GC_EVERY_S per node, collect the
        cluster's trees nothing needs (the plugin's own schedule: trees/gc.py)."""
        try:
            kv = self.kv()
            try:
                kv.delete(f"r:{ident}:{self.node_id}")
                with self._guard:
                    due = time.monotonic() - self._last_gc >= GC_EVERY_S
                    if due:
                        self._last_gc = time.monotonic()
                if due:
                    from rtenv_cli.core.trees.gc import collect

                    done = collect(kv)
                    log.info("rtenv: trees gc removed %d manifests and %d packs (%d bytes)",
                             len(done.manifests_removed), len(done.packs_removed),
                             done.bytes_removed)
            finally:
                kv.close()
        except Exception as exc:  # the gc ignores references of dead nodes anyway
            log.warning("rtenv: dropping the reference to %s failed: %s", ident, exc)

    # -- the store, opened on first use -----------------------------------------------------------
    def environments(self) -> Environments:
        with self._guard:
            if self._envs is None:
                from rtenv_cli.core.store.envs import Environments
                from rtenv_cli.core.store.store import Store
                from rtenv_cli.core.transport.http import fetch_archive

                try:
                    root = store_root()
                    self._envs = Environments(Store(root), fetch=fetch_archive)
                except UsageError as exc:  # a home or store not this user's alone, or no dir
                    raise AgentError(f"cannot open the rtenv store: {exc.message}",
                                     hint="set RTENV_HOME on `ray start` to a directory this "
                                     "user owns and no one else can write (rtenv ray-env --root "
                                     "DIR prints it)", path=exc.path) from None
                except OSError as exc:
                    raise AgentError(f"cannot open the rtenv store at {root}: {exc.strerror}",
                                     hint="set RTENV_HOME on `ray start` to a writable directory "
                                     "(rtenv ray-env --root DIR prints it)",
                                     path=str(root)) from exc
            return self._envs

    # -- the field --------------------------------------------------------------------------------
    @staticmethod
    def spec(runtime_env: Mapping[str, Any]) -> schema.RtenvSpec:
        return schema.parse(runtime_env.get(schema.FIELD), runtime_env)

    def uris(self, runtime_env: Mapping[str, Any]) -> list[str]:
        """`rtenv://<hash>` of the field, the node's interpreter and Ray, and the contents of the
        files it names; [] when there is no field or it is invalid (the setup then reports it)."""
        try:
            if not runtime_env.get(schema.FIELD):
                return []
            spec = self.spec(runtime_env)
            out = list(spec.trees)  # first: `pip`/`uv` may name files of the working_dir
            if spec.kind is not None:  # `limits` alone: nothing to build, nothing to count
                out.append(URI_SCHEME + _digest(spec, runtime_env))
            return out
        except Exception as exc:  # Ray calls this outside any error handling
            log.debug("rtenv: no URI for an invalid field (the setup reports it): %r", exc)
            return []

    # -- create -----------------------------------------------------------------------------------
    async def create(self, uri: str | None, runtime_env: Mapping[str, Any],
                     logger: logging.Logger) -> int:
        from rtenv_cli.core.trees.manifest import SCHEME

        if uri is not None and uri.startswith(SCHEME):
            return await self.create_tree(uri, logger)
        try:
            spec = self.spec(runtime_env)
            if spec.kind is None:
                return 0
            working_dir = (str(self.tree_path(spec.working_dir)) if spec.working_dir
                           else os.environ.get(WORKING_DIR_ENV))
            kind, value, base = _resolve(spec, working_dir)
        except RtenvError as exc:
            raise SetupError.of(exc) from None
        uri = uri or URI_SCHEME + _digest(spec, runtime_env)
        env_vars = {str(k): str(v) for k, v in (runtime_env.get("env_vars") or {}).items()}
        lock = self._locks.setdefault(uri, asyncio.Lock())
        self._start_leases()
        async with lock:  # identical URIs of different runtime_envs wait for one build
            held = self._held.get(uri)
            renew = self._renew.get(uri)
            if held is not None and Path(held.venv).exists():
                if renew is not None:  # a new lease: a worker is about to start
                    await asyncio.get_running_loop().run_in_executor(None, renew)
                return held.size_bytes
            from rtenv_cli.core.store.builders import BuildScope

            scope = BuildScope()
            loop = asyncio.get_running_loop()
            build = functools.partial(self._build, uri, kind=kind, value=value, base=base,
                                      env_vars=env_vars, scope=scope, logger=logger)
            future = loop.run_in_executor(None, build)
            try:
                held = await asyncio.shield(future)
            except asyncio.CancelledError:
                scope.cancel()  # kill uv; the store removes the half-built directory
                await asyncio.wait({future}, timeout=CANCEL_WAIT_S)
                if future.done() and not future.cancelled():
                    future.exception()  # the build's "cancelled" error: seen, not logged again
                logger.info("rtenv: setup of %s cancelled; its build was stopped", uri)
                raise
            except RtenvError as exc:
                logger.error("rtenv: %s", exc.message)
                raise SetupError.of(exc) from None
            return held.size_bytes

    def _build(self, uri: str, *, kind: str, value: Any, base: Path | None,
               env_vars: dict[str, str], scope: Any, logger: logging.Logger) -> Held:
        from rtenv_cli.core.store import builders

        start = time.perf_counter()
        envs = self.environments()
        builders.uv_bin()  # a missing uv: one clear error, before anything else
        holder = f"ray-agent:{os.getpid()}:{uri}"
        renew = functools.partial(envs.get_or_create, {kind: value, "env_vars": env_vars},
                                  holder=holder, pid=os.getpid(), lease_s=self.lease_s,
                                  base_dir=base)
        with scope:
            handle = renew()
        if scope.cancelled:  # finished as it was cancelled: not this setup's
            envs.release(handle.key, holder)
            raise AgentError("build cancelled", hint="nothing was kept; ask again")
        assert handle.venv is not None  # noqa: S101 - a pip/uv field always has a venv
        venv_key = handle.entries[-1]
        entry = envs.store.index.get(venv_key)
        size = max(entry.size_bytes if entry else 0, 1)  # > 0: Ray's cache evicts only then
        held = Held(handle.key, holder, handle.venv, size)
        with self._guard:
            self._held[uri] = held
            self._renew[uri] = renew
        took = time.perf_counter() - start
        if handle.built:
            logger.info("rtenv: built %s %s in %.2fs (%d bytes) in %s", kind, venv_key, took,
                        size, envs.store.root)
        else:
            logger.info("rtenv: cache hit %s %s in %.3fs", kind, venv_key, took)
        _enforce_budget(envs, logger)
        return held

    # -- context and release ----------------------------------------------------------------------
    def venv(self, uri: str) -> str:
        held = self._held.get(uri)
        renew = self._renew.get(uri)
        if held is not None and renew is not None and not Path(held.venv).exists():
            # Ray kept the URI cached while no process used it, so rtenv's lease lapsed and a gc
            # took the entry: build it again (a rare, blocking path) rather than fail the worker
            log.warning("rtenv: %s was collected while Ray cached it: building it again", uri)
            try:
                renew()
            except Exception as exc:  # the error below tells the user
                log.warning("rtenv: rebuilding %s failed: %s", uri, exc)
        if held is None or not Path(held.venv).exists():
            raise SetupError(f"rtenv: the environment of {uri} is not on this node"
                             "\nhint: it was removed while in use (rtenv cache purge?); "
                             "retry the task")
        return held.venv

    def release(self, uri: str, logger: logging.Logger | None = None) -> int:
        """Drop rtenv's reference for `uri`; returns the bytes freed now (0: the store's
        budget decides when they go)."""
        with self._lease_lock:
            with self._guard:
                held = self._held.pop(uri, None)
                self._renew.pop(uri, None)
            if held is None or self._envs is None:
                return 0
            try:
                self._envs.release(held.env_key, held.holder)
            except Exception as exc:  # never let a release take the agent down
                (logger or log).warning("rtenv: releasing %s failed: %s", uri, exc)
                return 0
        (logger or log).info("rtenv: released %s (kept in the store %s)", uri,
                             self._envs.store.root)
        return 0

    # -- leases -----------------------------------------------------------------------------------
    def _start_leases(self) -> None:
        """Start the thread that renews leases (once, on the first setup: never in the
        constructor's path to the agent's death)."""
        with self._guard:
            if self._leases is not None:
                return
            self._leases = threading.Thread(target=self._renew_forever, daemon=True,
                                            name="rtenv-leases")
        self._leases.start()

    def _renew_forever(self) -> None:
        while True:
            time.sleep(max(0.5, self.lease_s / 4))
            try:
                self.renew_in_use()
            except Exception as exc:  # the agent must never die of this; the next pass retries
                log.warning("rtenv: renewing leases failed: %s", exc)

    def renew_in_use(self) -> None:
        """Renew the lease of each environment a live process of this node uses, and hold the
        `r:` key of each tree one uses; a tree no process used for a lease loses its key (its
        files stay until Ray's `delete_uri`: Ray may still hand its context to a worker)."""
        from rtenv_cli.core.store.users import in_use
        from rtenv_cli.core.trees.manifest import manifest_id

        with self._guard:
            venvs = {h.venv: uri for uri, h in self._held.items()}
        trees = {str(p): uri for uri, (p, _size) in list(self._tree_paths.items())}
        used = in_use([*venvs, *trees])
        for path in used & venvs.keys():
            try:
                with self._lease_lock:  # still held (no `delete_uri` since the scan): renew
                    fn = self._renew.get(venvs[path])
                    if fn is not None:
                        fn()
            except Exception as exc:  # a lease not renewed: the next pass tries again
                log.warning("rtenv: renewing the lease of %s failed: %s", venvs[path], exc)
        now = time.monotonic()
        for path, uri in trees.items():
            with self._lease_lock:
                if uri not in self._tree_paths:  # released since the scan
                    continue
                if path in used:
                    self._tree_seen[uri] = now
                    if uri not in self._tree_refs:
                        self._set_ref(manifest_id(uri), held=True)
                        self._tree_refs.add(uri)
                elif uri in self._tree_refs and now - self._tree_seen.get(uri, now) >= \
                        self.lease_s:
                    self._set_ref(manifest_id(uri), held=False)
                    self._tree_refs.discard(uri)
                    log.info("rtenv: no process uses tree %s: its reference is dropped", uri)


def drop_guard(runtime_env: Any) -> None:
    """Remove push's guard (guard.GUARD_FIELD) from the runtime_env Ray is setting up: it is
    for nodes without this plugin, and Ray's nsight plugin runs after this one."""
    guard = runtime_env.get(guard_.GUARD_FIELD)
    if isinstance(guard, str) and guard.startswith(guard_.GUARD_PREFIX):
        del runtime_env[guard_.GUARD_FIELD]


def apply_trees(context: Any, spec: schema.RtenvSpec, engine: Engine) -> None:
    """As Ray's working_dir and py_modules plugins do (`modify_context`): the worker starts in
    the working_dir (`cd` in the command prefix), and PYTHONPATH starts with the py_modules'
    trees, then the working_dir, then what it was (`set_pythonpath_in_context`)."""
    import shlex

    paths = [str(engine.tree_path(u)) for u in spec.trees]
    if spec.working_dir:
        context.command_prefix += ["cd", shlex.quote(paths[0]), "&&"]
        paths = [*paths[1:], paths[0]]
    python_path = os.pathsep.join(paths)
    for pp in (context.env_vars.get("PYTHONPATH"), os.environ.get("PYTHONPATH")):
        if pp:
            python_path += os.pathsep + pp
    context.env_vars["PYTHONPATH"] = python_path


def _resolve(spec: schema.RtenvSpec, working_dir: str | None) -> tuple[str, Any, Path | None]:
    """(kind, value, base dir) for `Environments`: `${RAY_RUNTIME_ENV_CREATE_WORKING_DIR}`
    expanded, and a requirements list that installs `ray` refused."""
    from rtenv_cli.core.spec import normalize
    from rtenv_cli.core.store import builders

    kind = spec.kind or "pip"  # callers pass a spec with a venv to build
    value = _expand(spec.value, working_dir)
    base = Path(working_dir) if working_dir else None
    fn = normalize.normalize_pip if kind == "pip" else normalize.normalize_uv
    normal = fn(value, base or Path("/"), (schema.FIELD, kind))
    packages = [str(p) for p in (normal or {}).get("packages", [])]
    lines = list(packages)
    from rtenv_cli.core.spec.loader import read_file

    for name in builders.files_digest(packages):
        raw, error = read_file(name)  # bounded, as every requirements file (files_digest's)
        if raw is None:  # the build reads it again and reports it
            log.debug("rtenv: cannot read %s to look for a ray pin: %s", name,
                      error.message if error else "")
            continue
        lines += raw.decode(errors="replace").splitlines()
    ray = schema.ray_requirement(lines)
    if ray is not None:
        raise ValidationError(f"runtime_env['{schema.FIELD}']['{spec.kind}'] installs `{ray}`: "
                              "a worker must import the node's own Ray",
                              hint="remove `ray` from the requirements (the cluster's Ray, "
                              f"{builders.ray_version()}, is used)", path=schema.FIELD)
    return kind, normal, base


def _expand(value: Any, working_dir: str | None) -> Any:
    if isinstance(value, str):
        if schema.WORKING_DIR_VAR in value and not working_dir:
            raise ValidationError(f"{value} names {schema.WORKING_DIR_VAR}, but the job has "
                                  "no working_dir", hint="set working_dir, or give an "
                                  "absolute path on the node", path=schema.FIELD)
        return os.path.expanduser(value.replace(schema.WORKING_DIR_VAR, working_dir or ""))
    if isinstance(value, list):
        return [_expand(v, working_dir) for v in value]
    if isinstance(value, Mapping):
        return {k: _expand(v, working_dir) for k, v in value.items()}
    return value


def _digest(spec: schema.RtenvSpec, runtime_env: Mapping[str, Any]) -> str:
    from rtenv_cli.core.store import builders

    text = json.dumps(spec.to_dict(), sort_keys=True, default=str)
    lines = _file_lines(spec.value)
    doc = {"spec": spec.to_dict(), **builders.python_identity(),
           "files": builders.files_digest(lines)}
    if schema.WORKING_DIR_VAR in text:  # its files: covered by the working_dir's content hash
        doc["working_dir"] = str(spec.working_dir or runtime_env.get("working_dir"))
    blob = json.dumps(doc, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode(), usedforsecurity=False).hexdigest()


def _file_lines(value: Any) -> list[str]:
    """`-r <file>` lines for every requirements file the field names (absolute ones)."""
    if isinstance(value, str):
        return [f"-r {value}"]
    if isinstance(value, Mapping):
        packages = value.get("packages")
        opts = value.get("pip_install_options") or value.get("uv_pip_install_options") or []
        from rtenv_cli.core.store.builders import option_lines

        return [*_file_lines(packages), *option_lines([str(o) for o in opts])]
    if isinstance(value, list):
        return [str(v) for v in value]
    return []


def _enforce_budget(envs: Environments, logger: logging.Logger) -> None:
    """The store's budget (RTENV_MAX_SIZE, RTENV_MAX_AGE on `ray start`), after each build."""
    size, age = os.environ.get(schema.MAX_SIZE_ENV), os.environ.get(schema.MAX_AGE_ENV)
    if not size and not age:
        return
    from rtenv_cli.core.cache.gc import Budget
    from rtenv_cli.core.units import parse_duration, parse_size

    try:
        result = Budget(max_bytes=parse_size(size) if size else None,
                        max_age_s=parse_duration(age) if age else None).enforce(envs.store)
    except Exception as exc:  # a budget problem must not fail the setup
        logger.warning("rtenv: store budget not enforced: %s", exc)
        return
    if result is not None:
        logger.info("rtenv: store budget removed %s", result)
