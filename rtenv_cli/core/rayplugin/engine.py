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
agent's pid (so it ends with the agent, and with the Ray session). `release` drops it; whether
the bytes go is the store's budget's call (`RTENV_MAX_SIZE`, `RTENV_MAX_AGE`, `rtenv cache gc`),
so a later job or a new Ray session on the same store is a cache hit.
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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtenv_cli.core.errors import AgentError, RtenvError, UsageError, ValidationError
from rtenv_cli.core.rayplugin import schema

if TYPE_CHECKING:
    from rtenv_cli.core.store.envs import Environments

log = logging.getLogger("rtenv.rayplugin")
URI_SCHEME = "rtenv://"
WORKING_DIR_ENV = "RAY_RUNTIME_ENV_CREATE_WORKING_DIR"
CANCEL_WAIT_S = 30.0


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


class Engine:
    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._envs: Environments | None = None
        self._held: dict[str, Held] = {}
        self._locks: dict[str, asyncio.Lock] = {}

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
            if spec.kind is None:  # `limits` alone: nothing to build, nothing to count
                return []
            return [URI_SCHEME + _digest(spec, runtime_env)]
        except Exception as exc:  # Ray calls this outside any error handling
            log.debug("rtenv: no URI for an invalid field (the setup reports it): %r", exc)
            return []

    # -- create -----------------------------------------------------------------------------------
    async def create(self, uri: str | None, runtime_env: Mapping[str, Any],
                     logger: logging.Logger) -> int:
        try:
            spec = self.spec(runtime_env)
            if spec.kind is None:
                return 0
            kind, value, base = _resolve(spec, os.environ.get(WORKING_DIR_ENV))
        except RtenvError as exc:
            raise SetupError.of(exc) from None
        uri = uri or URI_SCHEME + _digest(spec, runtime_env)
        env_vars = {str(k): str(v) for k, v in (runtime_env.get("env_vars") or {}).items()}
        lock = self._locks.setdefault(uri, asyncio.Lock())
        async with lock:  # identical URIs of different runtime_envs wait for one build
            held = self._held.get(uri)
            if held is not None and Path(held.venv).exists():
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
        with scope:
            handle = envs.get_or_create({kind: value, "env_vars": env_vars}, holder=holder,
                                        pid=os.getpid(), base_dir=base)
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
        if held is None or not Path(held.venv).exists():
            raise SetupError(f"rtenv: the environment of {uri} is not on this node"
                             "\nhint: it was removed while in use (rtenv cache purge?); "
                             "retry the task")
        return held.venv

    def release(self, uri: str, logger: logging.Logger | None = None) -> int:
        """Drop rtenv's reference for `uri`; returns the bytes freed now (0: the store's
        budget decides when they go)."""
        with self._guard:
            held = self._held.pop(uri, None)
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
        doc["working_dir"] = str(runtime_env.get("working_dir"))
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
