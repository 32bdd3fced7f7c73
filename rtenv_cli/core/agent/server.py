"""The agent's HTTP API (starlette): routes, their checks, and the errors they answer with.

Ray's package protocol (`GET`/`PUT /api/packages/gcs/<name>`, plus `HEAD`) so `rtenv push` and
Ray's own client work against it; the delta protocol (manifests, blobs, commit); environments
(get-or-create, release, list); cache listing and gc; `/openapi.json`. Blocking work runs in the
threadpool. Every JSON body is checked against its schema (`agent_protocol`) and every body is
refused over its size limit before it is read. Errors are `RtenvError`s, answered by one
exception handler with the HTTP status and wire `code` of `core.errors.TABLE`.

`AgentApp` is the ASGI entry point in front of Starlette: it checks the bearer token for every
route but `/openapi.json` and `/download/...` (compared in constant time), and answers cache hits
of `POST /api/envs` itself. Serving it (sockets, timeouts, worker processes) is `agent.serving`.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import ipaddress
import json
import logging
import os
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtenv_cli import __version__
from rtenv_cli.core.errors import (
    AuthError,
    ForbiddenError,
    NotFoundError,
    RtenvError,
    UsageError,
    from_os_error,
)
from rtenv_cli.core.store.envs import MEMO_MAX_JSON
from rtenv_cli.core.store.store import Store
from rtenv_cli.core.transport import agent_protocol as protocol
from rtenv_cli.core.transport.agent_protocol import TOKEN_ENV, Limits

__all__ = ["TOKEN_ENV", "AgentApp", "AgentConfig", "check_bind", "create_app", "is_loopback"]

_log = logging.getLogger("rtenv.agent")


@dataclass(frozen=True)
class AgentConfig:
    root: Path | None = None
    host: str = "127.0.0.1"
    port: int = 8790
    token: str | None = None
    max_bytes: int | None = None
    max_age_s: float | None = None
    workers: int = 1
    limits: Limits = field(default_factory=Limits)
    read_timeout_s: float = 10.0  # a request's headers, and each stretch of its body
    max_connections: int = 1024
    file_roots: tuple[Path, ...] = ()  # file:// archives a client may name (else: none)


@functools.lru_cache(maxsize=1024)  # asked for every create's client address
def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(config: AgentConfig) -> None:
    if not is_loopback(config.host) and not config.token:
        raise UsageError(f"binding {config.host} exposes the agent beyond this machine without "
                         "a token", hint=f"pass --token or set {TOKEN_ENV}, or bind 127.0.0.1")


@dataclass
class AgentState:
    """What every route reads, as `request.app.state.agent`."""

    config: AgentConfig
    store: Store
    envs: Any  # agent.envs.Environments
    budget: Any  # cache.gc.Budget

    def refusal(self, header: str) -> RtenvError | None:
        """None when a request with this Authorization header may pass, else why not."""
        token = self.config.token
        if not token:
            return None
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(value.encode(), token.encode()):
            return None
        if not header:
            return AuthError("missing bearer token", hint=f"pass --token or set {TOKEN_ENV}")
        return ForbiddenError("wrong bearer token", hint=f"pass --token or set {TOKEN_ENV}")


def _state(request: Any) -> AgentState:
    return request.app.state.agent


# -- bodies -------------------------------------------------------------------------------------
Receive = Callable[[], Awaitable[dict[str, Any]]]


async def read_body(receive: Receive, headers: Any, limit: int) -> bytes:
    """The whole request body, refused (413) over `limit` by its Content-Length before anything
    is read, or as soon as a chunked body passes it."""
    protocol.check_length(headers.get("content-length"), limit)
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise UsageError("the client went away before sending its request body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise protocol.too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def json_body(request: Any, schema: str, limit: int | None = None) -> dict[str, Any]:
    limits = _state(request).config.limits
    body = await read_body(request.receive, request.headers, limit or limits.json_bytes)
    return protocol.parse_json(body, schema)


async def spool(request: Any, limit: int) -> Path:
    """The request body in a temp file inside the store (same filesystem as the target),
    refused over `limit` before or while it is read."""
    declared = protocol.check_length(request.headers.get("content-length"), limit)
    store = _state(request).store
    fd, name = tempfile.mkstemp(dir=store.root / "tmp", prefix=f"upload.{os.getpid()}.")
    size = 0
    try:
        with os.fdopen(fd, "wb") as out:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise protocol.too_large(limit)
                out.write(chunk)
        if declared is not None and declared != size:
            raise UsageError(f"upload truncated: {size} of {declared} bytes")
    except OSError as exc:  # the disk filled up: read the rest, so the client gets the reply
        Path(name).unlink(missing_ok=True)
        if not store.out_of_space(exc):
            raise
        async for _chunk in request.stream():
            pass
        raise store.disk_full(exc) from None
    except BaseException:  # refused, or the client hung up mid-body: keep nothing
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


async def _stored(request: Any, limit: int, put: Callable[[Path], Any]) -> Any:
    from starlette.concurrency import run_in_threadpool

    path = await spool(request, limit)
    try:
        return await run_in_threadpool(put, path)
    finally:
        path.unlink(missing_ok=True)


def _json(data: Any, status: int = 200) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse(data, status_code=status)


# -- routes -------------------------------------------------------------------------------------
async def info(request: Any) -> Any:
    return _json({"agent": "rtenv", "version": __version__,
                  "root": str(_state(request).store.root)})


async def get_package(request: Any) -> Any:
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import FileResponse, Response

    store, name = _state(request).store, request.path_params["name"]
    download = bool(request.query_params.get("download"))  # else a check: pins, as Ray's does
    exists = (store.has_package(name) if download
              else await run_in_threadpool(store.hold_package, name))
    if exists and download:
        return FileResponse(await run_in_threadpool(store.package_file, name))
    if request.method == "HEAD":
        return Response(status_code=200 if exists else 404)
    return Response(b"" if exists else f"Package gcs://{name} does not exist".encode(),
                    status_code=200 if exists else 404)


async def put_package(request: Any) -> Any:
    from starlette.responses import Response

    from rtenv_cli.core.store import delta

    state, name = _state(request), request.path_params["name"]
    state.store.package_path(name)  # validates the name before reading the body
    hashed = delta.parse_hashed_dirs(request.headers.get(delta.HASHED_DIRS_HEADER))
    await _stored(request, state.config.limits.package_bytes,
                  lambda path: state.store.put_package(name, path, extra_dirs=hashed))
    return Response(status_code=200)


async def manifests(request: Any) -> Any:
    from starlette.concurrency import run_in_threadpool

    from rtenv_cli.core.store import delta

    state = _state(request)
    man = delta.Manifest.parse(await json_body(request, "Manifest",
                                               state.config.limits.manifest_bytes))
    return _json({"missing": await run_in_threadpool(delta.missing, state.store, man)})


async def commit(request: Any) -> Any:
    from starlette.concurrency import run_in_threadpool

    from rtenv_cli.core.store import delta

    state = _state(request)
    man = delta.Manifest.parse(await json_body(request, "Manifest",
                                               state.config.limits.manifest_bytes))
    return _json(await run_in_threadpool(delta.commit, state.store, man))


async def blob(request: Any) -> Any:
    from starlette.responses import Response

    state, sha = _state(request), request.path_params["sha"]
    state.store.blob_path(sha)  # validates the id before reading the body
    await _stored(request, state.config.limits.blob_bytes,
                  lambda path: state.store.put_blob(sha, path))
    return Response(status_code=200)


async def blobs(request: Any) -> Any:
    from starlette.concurrency import run_in_threadpool

    from rtenv_cli.core.agent.bodyreader import BodyReader

    state = _state(request)
    limit = state.config.limits.blob_bytes
    protocol.check_length(request.headers.get("content-length"), limit)

    async def bounded() -> Any:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise protocol.too_large(limit)
            yield chunk

    # each record goes straight into its blob's temp file: the batch is on disk once
    count = await run_in_threadpool(state.store.put_blobs, BodyReader(bounded()))
    return _json({"stored": count})


def env_args(data: dict[str, Any], client: str, config: AgentConfig) -> dict[str, Any]:
    """A checked create request as get_or_create's arguments; one that names this machine's
    files is refused (403, `agent.localpaths`)."""
    from rtenv_cli.core.agent.localpaths import refuse_local_paths

    args = protocol.env_request(data, trusted_pid=is_loopback(client))
    refuse_local_paths(args["runtime_env"], config.file_roots)
    return args


_ENV_ARGS = "rtenv_env_request"  # where AgentApp leaves a checked create request for the route


async def create_env(request: Any) -> Any:
    from starlette.concurrency import run_in_threadpool

    state = _state(request)
    args = request.scope.get("state", {}).get(_ENV_ARGS)
    if args is None:  # not through AgentApp (which has checked the body already)
        client = request.client.host if request.client else ""
        args = env_args(await json_body(request, "EnvRequest"), client, state.config)
    # AgentApp has answered the cache hits on the event loop already; what reaches here
    # builds (get_or_create still returns an entry a concurrent request just finished)
    handle = await run_in_threadpool(lambda: state.envs.get_or_create(**args))
    if handle.built:
        await run_in_threadpool(state.budget.enforce, state.store)
    return _json(handle.to_dict())


async def release(request: Any) -> Any:
    from starlette.concurrency import run_in_threadpool

    n = await run_in_threadpool(_state(request).envs.release, request.path_params["key"],
                                request.path_params["holder"])
    return _json({"released": n})


async def list_envs(request: Any) -> Any:
    from starlette.concurrency import run_in_threadpool

    return _json({"envs": await run_in_threadpool(_state(request).envs.list_envs)})


async def cache(request: Any) -> Any:
    from starlette.concurrency import run_in_threadpool

    from rtenv_cli.core.cache.ls import list_store

    kinds = [k for k in request.query_params.getlist("kind") if k]
    protocol.check(kinds, protocol.SCHEMAS["GcRequest"]["properties"]["kinds"], ("kind",))
    listing = await run_in_threadpool(list_store, _state(request).store, tuple(kinds))
    return _json({**listing.to_dict(), "source": f"agent {request.base_url}"})


async def gc(request: Any) -> Any:
    from starlette.concurrency import run_in_threadpool

    from rtenv_cli.core.cache import gc as cache_gc

    data = await json_body(request, "GcRequest")
    store = _state(request).store

    def work() -> dict[str, Any]:
        store.index.prune_refs()
        plan = cache_gc.plan_gc(store.index.all(), older_than_s=data.get("older_than_s"),
                                keep_storage=data.get("keep_storage"),
                                kinds=tuple(data.get("kinds") or ()),
                                purge=bool(data.get("purge")))
        result = cache_gc.run_gc(store, plan, dry_run=bool(data.get("dry_run")))
        if plan.reason.startswith("purge") and not result.dry_run:
            result.extra["uv_cache_pruned_bytes"] = cache_gc.prune_uv_cache(store)
        return result.to_dict()

    return _json(await run_in_threadpool(work))


async def download(request: Any) -> Any:
    """A package as a remote zip for Ray's nodes: `working_dir: http://.../<name>.zip`."""
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import FileResponse

    state, name = _state(request), request.path_params["name"]
    want = protocol.download_capability(state.config.token, name)
    if not hmac.compare_digest(request.path_params["cap"].encode(), want.encode()):
        raise NotFoundError("unknown download URL")
    if not state.store.has_package(name):
        raise NotFoundError(f"package {name} is not in the store")
    path = await run_in_threadpool(state.store.remote_file, name)
    return FileResponse(path, media_type="application/zip")


async def openapi(_request: Any) -> Any:
    from rtenv_cli.core.agent.openapi import SCHEMA

    return _json(SCHEMA)


# -- errors -------------------------------------------------------------------------------------
async def _on_rtenv_error(_request: Any, exc: Exception) -> Any:
    assert isinstance(exc, RtenvError)  # noqa: S101 - registered for RtenvError only
    return _json(protocol.error_body(exc), exc.http_status)


async def _on_os_error(request: Any, exc: Exception) -> Any:
    assert isinstance(exc, OSError)  # noqa: S101 - registered for OSError only
    mapped = from_os_error(exc, f"{request.method} {request.url.path}")
    if mapped is None:
        raise exc  # a bug or the host's problem: the server's 500, with the traceback logged
    return await _on_rtenv_error(request, mapped)


async def _on_unexpected(_request: Any, exc: Exception) -> Any:
    _log.error("internal error", exc_info=exc)
    return _json({"error": {"code": "error", "message": f"internal error: "
                            f"{type(exc).__name__}", "hint": "see the agent's log"}}, 500)


PUBLIC = ("/openapi.json", "/download/")  # no bearer token: the schema, capability URLs


def routes() -> list[Any]:
    from starlette.routing import Route

    return [
        Route("/api/agent", info, methods=["GET"]),
        Route("/api/packages/gcs/{name}", get_package, methods=["GET", "HEAD"]),
        Route("/api/packages/gcs/{name}", put_package, methods=["PUT"]),
        Route("/api/manifests", manifests, methods=["POST"]),
        Route("/api/manifests/commit", commit, methods=["POST"]),
        Route("/api/blobs", blobs, methods=["POST"]),
        Route("/api/blobs/{sha}", blob, methods=["PUT"]),
        Route("/api/envs", create_env, methods=["POST"]),
        Route("/api/envs", list_envs, methods=["GET"]),
        # a holder may hold a slash (`job/42`): it is the rest of the path
        Route("/api/envs/{key}/refs/{holder:path}", release, methods=["DELETE"]),
        Route("/api/cache", cache, methods=["GET"]),
        Route("/api/gc", gc, methods=["POST"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/download/{cap}/{name}", download, methods=["GET", "HEAD"]),
    ]


def create_app(config: AgentConfig, store: Store | None = None) -> AgentApp:
    from starlette.applications import Starlette

    from rtenv_cli.core.cache import gc as cache_gc
    from rtenv_cli.core.store.envs import Environments
    from rtenv_cli.core.transport import http

    store = store or Store(config.root)
    store.index.checkpoint_in_background()
    state = AgentState(config, store, Environments(store, fetch=http.fetch_archive,
                                                   file_roots=config.file_roots),
                       cache_gc.Budget(max_bytes=config.max_bytes, max_age_s=config.max_age_s))
    app = Starlette(routes=routes(), exception_handlers={
        RtenvError: _on_rtenv_error, OSError: _on_os_error, Exception: _on_unexpected})
    app.state.agent = state
    app.state.store = store
    return AgentApp(app, state)


# -- the ASGI entry point -----------------------------------------------------------------------
async def _send_json(send: Any, status: int, payload: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})


def _length_header(scope: dict[str, Any]) -> dict[str, str]:
    """An ASGI scope's headers as far as read_body reads them (content-length)."""
    for name, value in scope.get("headers") or ():
        if name == b"content-length":
            return {"content-length": value.decode("latin-1")}
    return {}


# Cache hits answered before Starlette's routing (AgentApp). False sends every create through
# the route: the agent benchmark flips it for its ablation row, which shows what the path buys.
HIT_PATH = True
BUSY_RETRIES = 5  # 1 ms apart, on the event loop, before a batch waits in a thread


class AgentApp:
    """The ASGI app: the token check for every protected route, then cache hits of
    `POST /api/envs` answered before Starlette's routing.

    A hit is the agent's hot path (raylets and `rtenv run`s asking for environments that
    exist), and Starlette's stack costs about as much as the hit itself. Hits read in the same
    turn of the event loop are committed together (one SQLite transaction), and answered once
    it has committed (each holder's reference is on disk before its reply); the loop never
    sleeps on another writer's lock (`_commit_batch`). A runtime_env checked once is not
    walked again (`_env_args`), nor planned again (`Environments.try_hits`). A request refused
    (bad body, too large) gets the same error reply Starlette's handler would give; a miss goes
    to Starlette's route with its checked arguments, so it is built there. Other attributes
    (routes, state) are the Starlette app's."""

    def __init__(self, app: Any, state: AgentState) -> None:
        self.app, self.state = app, state
        self._batch: list[tuple[dict[str, Any], asyncio.Future[Any]]] = []
        self._busy = 0  # tries in a row that found the index's write lock taken
        self._checked: set[str] = set()  # runtime_envs (as JSON) that passed env_args

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.state.config.token and not scope["path"].startswith(PUBLIC):
            auth = dict(scope.get("headers") or ()).get(b"authorization", b"")
            refused = self.state.refusal(auth.decode("latin-1"))
            if refused is not None:
                await _send_json(send, refused.http_status,
                                 json.dumps(protocol.error_body(refused)).encode())
                return
        if HIT_PATH and scope["method"] == "POST" and scope["path"] == "/api/envs":
            await self._create(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _create(self, scope: dict[str, Any], receive: Receive, send: Any) -> None:
        try:
            body = await read_body(receive, _length_header(scope),
                                   self.state.config.limits.json_bytes)
            args = self._env_args(body, (scope.get("client") or ("",))[0])
        except RtenvError as exc:
            await _send_json(send, exc.http_status, json.dumps(protocol.error_body(exc)).encode())
            return
        handle = await self._hit(args)
        if handle is None:
            scope.setdefault("state", {})[_ENV_ARGS] = args
            await self.app(scope, receive, send)
            return
        await _send_json(send, 200, json.dumps(handle.to_dict()).encode())

    def _env_args(self, body: bytes, client: str) -> dict[str, Any]:
        """env_args of a create's body. A runtime_env that passed them before (schema, nesting,
        local paths) is not walked again: hits ask for the same few environments over and over.
        With --allow-file-root the local-path check reads the disk, so it is never skipped."""
        known, data = None, None
        try:
            data = json.loads(body)
            runtime_env = data.get("runtime_env") if type(data) is dict else None
            if type(runtime_env) is dict:
                known = json.dumps(runtime_env, sort_keys=True)
        except (ValueError, TypeError, RecursionError) as exc:  # the full check says what is wrong
            _log.debug("hit path: runtime_env not remembered (%r); the full check runs", exc)
        if (known is not None and known in self._checked and type(data) is dict
                and protocol.check_but(data, "EnvRequest", "runtime_env")):
            return protocol.env_request(data, trusted_pid=is_loopback(client))
        args = env_args(protocol.parse_json(body, "EnvRequest"), client, self.state.config)
        if known is not None and len(known) <= MEMO_MAX_JSON and not self.state.config.file_roots:
            if len(self._checked) >= 4096:  # noqa: PLR2004 - a bound, not a tuning knob
                self._checked.clear()
            self._checked.add(known)
        return args

    async def _hit(self, args: dict[str, Any]) -> Any:
        # group commit: the hits read in one turn of the event loop share one transaction
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        self._batch.append((args, done))
        if len(self._batch) == 1:
            loop.call_soon(self._commit_batch)
        return await done

    def _commit_batch(self) -> None:
        from rtenv_cli.core.store.index import WriterBusy

        batch, self._batch = self._batch, []
        requests = [args for args, _done in batch]
        try:
            results = self.state.envs.try_hits(requests, wait=False)
        except WriterBusy:  # another process's (or thread's) commit: wait for it off the loop
            loop = asyncio.get_running_loop()
            self._busy += 1
            if self._busy <= BUSY_RETRIES:
                # a commit takes a fraction of a millisecond: try again in one, with the hits
                # that arrive meanwhile (a thread would wait for the GIL behind this loop)
                self._batch = batch
                loop.call_later(0.001, self._commit_batch)
                return
            self._busy = 0  # a long holder (a WAL truncation, a gc): wait in a thread
            try:
                waited = loop.run_in_executor(
                    None, functools.partial(self.state.envs.try_hits, requests))
            except RuntimeError as exc:  # the executor is shut down (the agent is stopping)
                _log.debug("hit path: batch to the slow path, no executor: %s", exc)
                _settle(batch, [None] * len(batch))  # the slow path answers each request
                return
            waited.add_done_callback(lambda fut: _answer(batch, fut))
            return
        except Exception as exc:  # e.g. SQLite busy: the slow path answers each request properly
            _log.debug("hit path: batch to the slow path: %r", exc)
            results = [None] * len(batch)
        self._busy = 0
        _settle(batch, results)


def _answer(batch: list[tuple[dict[str, Any], asyncio.Future[Any]]],
            fut: asyncio.Future[list[Any]]) -> None:
    failed = fut.cancelled() or fut.exception() is not None
    _settle(batch, [None] * len(batch) if failed else fut.result())


def _settle(batch: list[tuple[dict[str, Any], asyncio.Future[Any]]], results: list[Any]) -> None:
    for (_args, done), result in zip(batch, results, strict=True):
        if not done.done():
            done.set_result(result)
