"""The agent's HTTP API (starlette): routes, their checks, and the errors they answer with.

Ray's package protocol (`GET`/`PUT /api/packages/gcs/<name>`, plus `HEAD`) so `rtenv push` and
Ray's own client work against it; the delta protocol (manifests, blobs, commit); environments
(get-or-create, release, list); cache listing and gc; `/openapi.json`. Blocking work runs in the
threadpool. Every JSON body is checked against its schema (`agent_protocol`) and every body is
refused over its size limit before it is read. Errors are `RtenvError`s, answered by one
exception handler with the HTTP status and wire `code` of `core.errors.TABLE`.

`agent.hits` puts `AgentApp` in front of this Starlette app (`create_app`): it checks the bearer
token for every route but `/openapi.json` and `/download/...` (compared in constant time), and
answers cache hits of `POST /api/envs` itself. Serving it (sockets, timeouts, worker processes)
is `agent.serving`.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import logging
import os
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rtenv_cli import __version__
from rtenv_cli.core.errors import (
    AuthError,
    ForbiddenError,
    NotFoundError,
    RtenvError,
    UsageError,
    from_os_error,
)
from rtenv_cli.core.store.store import Store
from rtenv_cli.core.transport import agent_protocol as protocol
from rtenv_cli.core.transport.agent_protocol import TOKEN_ENV, Limits

if TYPE_CHECKING:  # starlette is imported when the agent starts, not with this module
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route
    from starlette.types import Receive

    from rtenv_cli.core.cache.gc import Budget
    from rtenv_cli.core.store.envs import Environments

__all__ = ["TOKEN_ENV", "AgentConfig", "check_bind", "is_loopback", "starlette_app"]

_log = logging.getLogger("rtenv.agent")
T = TypeVar("T")


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
    envs: Environments
    budget: Budget

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


def _state(request: Request) -> AgentState:
    state: AgentState = request.app.state.agent
    return state


# -- bodies -------------------------------------------------------------------------------------

async def read_body(receive: Receive, headers: Mapping[str, str], limit: int) -> bytes:
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


async def json_body(request: Request, schema: str, limit: int | None = None) -> dict[str, Any]:
    limits = _state(request).config.limits
    body = await read_body(request.receive, request.headers, limit or limits.json_bytes)
    return protocol.parse_json(body, schema)


async def spool(request: Request, limit: int) -> Path:
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


async def _stored(request: Request, limit: int, put: Callable[[Path], T]) -> T:
    from starlette.concurrency import run_in_threadpool

    path = await spool(request, limit)
    try:
        return await run_in_threadpool(put, path)
    finally:
        path.unlink(missing_ok=True)


def _json(data: Any, status: int = 200) -> JSONResponse:
    from starlette.responses import JSONResponse

    return JSONResponse(data, status_code=status)


# -- routes -------------------------------------------------------------------------------------
async def info(request: Request) -> Response:
    return _json({"agent": "rtenv", "version": __version__,
                  "root": str(_state(request).store.root)})


async def get_package(request: Request) -> Response:
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


async def put_package(request: Request) -> Response:
    from starlette.responses import Response

    from rtenv_cli.core.store import delta

    state, name = _state(request), request.path_params["name"]
    state.store.package_path(name)  # validates the name before reading the body
    hashed = delta.parse_hashed_dirs(request.headers.get(delta.HASHED_DIRS_HEADER))
    await _stored(request, state.config.limits.package_bytes,
                  lambda path: state.store.put_package(name, path, extra_dirs=hashed))
    return Response(status_code=200)


async def manifests(request: Request) -> Response:
    from starlette.concurrency import run_in_threadpool

    from rtenv_cli.core.store import delta

    state = _state(request)
    man = delta.Manifest.parse(await json_body(request, "Manifest",
                                               state.config.limits.manifest_bytes))
    return _json({"missing": await run_in_threadpool(delta.missing, state.store, man)})


async def commit(request: Request) -> Response:
    from starlette.concurrency import run_in_threadpool

    from rtenv_cli.core.store import delta

    state = _state(request)
    man = delta.Manifest.parse(await json_body(request, "Manifest",
                                               state.config.limits.manifest_bytes))
    return _json(await run_in_threadpool(delta.commit, state.store, man))


async def blob(request: Request) -> Response:
    from starlette.responses import Response

    state, sha = _state(request), request.path_params["sha"]
    state.store.blob_path(sha)  # validates the id before reading the body
    await _stored(request, state.config.limits.blob_bytes,
                  lambda path: state.store.put_blob(sha, path))
    return Response(status_code=200)


async def _bounded(request: Request, limit: int) -> AsyncIterator[bytes]:
    """The request's body, refused (413) once it passes `limit` (its Content-Length, checked
    by the caller, may be absent: a chunked body)."""
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise protocol.too_large(limit)
        yield chunk


async def blobs(request: Request) -> Response:
    from starlette.concurrency import run_in_threadpool

    from rtenv_cli.core.agent.bodyreader import BodyReader

    state = _state(request)
    limit = state.config.limits.blob_bytes
    protocol.check_length(request.headers.get("content-length"), limit)
    # each record goes straight into its blob's temp file: the batch is on disk once
    count = await run_in_threadpool(state.store.put_blobs, BodyReader(_bounded(request, limit)))
    return _json({"stored": count})


async def publish(request: Request) -> Response:
    """A save in one request (`protocol.publish_body`): its manifest, checked before anything
    is stored, then the blobs as `/api/blobs` stores them, then the commit of
    `/api/manifests/commit`; all in one worker thread."""
    from starlette.concurrency import run_in_threadpool

    from rtenv_cli.core.agent.bodyreader import BodyReader
    from rtenv_cli.core.store import delta

    state = _state(request)
    limits = state.config.limits
    limit = limits.manifest_bytes + limits.blob_bytes
    protocol.check_length(request.headers.get("content-length"), limit)
    reader = BodyReader(_bounded(request, limit))

    def work() -> dict[str, Any]:
        head = reader.readline(32)
        if not head.rstrip(b"\n").isdigit():
            raise UsageError(f"the body does not start with its manifest's size ({head!r})",
                             hint="'<size>\\n<manifest JSON>' then blob records")
        size = int(head)
        if size > limits.manifest_bytes:
            raise protocol.too_large(limits.manifest_bytes)
        body = reader.read(size)
        if len(body) != size:
            raise UsageError(f"the manifest was cut short ({len(body)} of {size} bytes)")
        man = delta.Manifest.parse(protocol.parse_json(body, "Manifest"))
        state.store.put_blobs(reader)
        return delta.commit(state.store, man)

    return _json(await run_in_threadpool(work))


def env_args(data: dict[str, Any], client: str, config: AgentConfig) -> dict[str, Any]:
    """A checked create request as get_or_create's arguments; one that names this machine's
    files is refused (403, `agent.localpaths`)."""
    from rtenv_cli.core.agent.localpaths import refuse_local_paths

    args = protocol.env_request(data, trusted_pid=is_loopback(client))
    refuse_local_paths(args["runtime_env"], config.file_roots)
    return args


ENV_ARGS = "rtenv_env_request"  # where AgentApp (agent.hits) leaves a checked create request


async def create_env(request: Request) -> Response:
    from starlette.concurrency import run_in_threadpool

    state = _state(request)
    args = request.scope.get("state", {}).get(ENV_ARGS)
    if args is None:  # not through AgentApp (which has checked the body already)
        client = request.client.host if request.client else ""
        args = env_args(await json_body(request, "EnvRequest"), client, state.config)
    # AgentApp has answered the cache hits on the event loop already; what reaches here
    # builds (get_or_create still returns an entry a concurrent request just finished)
    handle = await run_in_threadpool(lambda: state.envs.get_or_create(**args))
    if handle.built:
        await run_in_threadpool(state.budget.enforce, state.store)
    return _json(handle.to_dict())


async def release(request: Request) -> Response:
    from starlette.concurrency import run_in_threadpool

    n = await run_in_threadpool(_state(request).envs.release, request.path_params["key"],
                                request.path_params["holder"])
    return _json({"released": n})


async def list_envs(request: Request) -> Response:
    from starlette.concurrency import run_in_threadpool

    return _json({"envs": await run_in_threadpool(_state(request).envs.list_envs)})


async def cache(request: Request) -> Response:
    from starlette.concurrency import run_in_threadpool

    from rtenv_cli.core.cache.ls import list_store

    kinds = [k for k in request.query_params.getlist("kind") if k]
    protocol.check(kinds, protocol.SCHEMAS["GcRequest"]["properties"]["kinds"], ("kind",))
    listing = await run_in_threadpool(list_store, _state(request).store, tuple(kinds))
    return _json({**listing.to_dict(), "source": f"agent {request.base_url}"})


async def gc(request: Request) -> Response:
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


async def download(request: Request) -> Response:
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


async def openapi(_request: Request) -> Response:
    from rtenv_cli.core.agent.openapi import SCHEMA

    return _json(SCHEMA)


# -- errors -------------------------------------------------------------------------------------
async def _on_rtenv_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RtenvError)  # noqa: S101 - registered for RtenvError only
    return _json(protocol.error_body(exc), exc.http_status)


async def _on_os_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, OSError)  # noqa: S101 - registered for OSError only
    mapped = from_os_error(exc, f"{request.method} {request.url.path}")
    if mapped is None:
        raise exc  # a bug or the host's problem: the server's 500, with the traceback logged
    return await _on_rtenv_error(request, mapped)


async def _on_unexpected(_request: Request, exc: Exception) -> Response:
    _log.error("internal error", exc_info=exc)
    return _json({"error": {"code": "error", "message": f"internal error: "
                            f"{type(exc).__name__}", "hint": "see the agent's log"}}, 500)


PUBLIC = ("/openapi.json", "/download/")  # no bearer token: the schema, capability URLs


def routes() -> list[Route]:
    from starlette.routing import Route

    return [
        Route("/api/agent", info, methods=["GET"]),
        Route("/api/packages/gcs/{name}", get_package, methods=["GET", "HEAD"]),
        Route("/api/packages/gcs/{name}", put_package, methods=["PUT"]),
        Route("/api/manifests", manifests, methods=["POST"]),
        Route("/api/manifests/commit", commit, methods=["POST"]),
        Route("/api/publish", publish, methods=["POST"]),
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


def starlette_app(state: AgentState) -> Starlette:
    """The routes and their error handlers over `state`; `agent.hits.create_app` puts the token
    check and the hit path (AgentApp) in front of it."""
    from starlette.applications import Starlette

    app = Starlette(routes=routes(), exception_handlers={
        RtenvError: _on_rtenv_error, OSError: _on_os_error, Exception: _on_unexpected})
    app.state.agent = state
    app.state.store = state.store
    return app
