"""The agent's HTTP API (starlette + uvicorn).

Ray's package protocol (`GET`/`PUT /api/packages/gcs/<name>`, plus `HEAD`) so `rtenv push` and
Ray's own client work against it; the delta protocol (manifests, blobs, commit); environments
(get-or-create, release, list); cache listing and gc; `/openapi.json`. Blocking work runs in the
threadpool. With a token set every request needs `Authorization: Bearer <token>` (compared in
constant time); binding anything but loopback requires a token.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtenv_cli import __version__
from rtenv_cli.core.agent.store import Store
from rtenv_cli.core.errors import RtenvError, UsageError

TOKEN_ENV = "RTENV_AGENT_TOKEN"  # noqa: S105 - the variable's name, not a secret


@dataclass(frozen=True)
class AgentConfig:
    root: Path | None = None
    host: str = "127.0.0.1"
    port: int = 8790
    token: str | None = None
    max_bytes: int | None = None
    max_age_s: float | None = None
    workers: int = 1


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


def download_capability(token: str | None, name: str) -> str:
    """The secret path segment of a package's download URL for Ray's nodes (which send no
    bearer token): an HMAC of the name under the agent's token, so only holders of the token
    can mint one, and one URL opens one package."""
    return hmac.new((token or "rtenv-agent").encode(), name.encode(), "sha256").hexdigest()[:32]


def _status(exc: RtenvError) -> int:
    kind = exc.kind
    if kind in ("usage", "config"):
        return 400
    if kind in ("packaging", "unsafe-archive"):
        return 422
    if kind == "unsupported":
        return 501
    if kind == "cache-busy":
        return 409
    return 500


def create_app(config: AgentConfig, store: Store | None = None):  # type: ignore[no-untyped-def] # noqa: PLR0915 - one closure per route, sharing the store
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from rtenv_cli.core.agent import delta
    from rtenv_cli.core.agent.envs import Environments
    from rtenv_cli.core.agent.openapi import SCHEMA
    from rtenv_cli.core.cache import gc as cache_gc
    from rtenv_cli.core.cache.ls import list_store

    store = store or Store(config.root)
    store.index.checkpoint_in_background()
    envs = Environments(store)
    budget = cache_gc.Budget(max_bytes=config.max_bytes, max_age_s=config.max_age_s)
    token = (config.token or "").encode()

    def error(exc: RtenvError) -> JSONResponse:
        return JSONResponse({"error": exc.to_dict()}, status_code=_status(exc))

    async def body_json(request: Request) -> dict[str, Any]:
        try:
            data = json.loads(await request.body() or b"{}")
        except ValueError as exc:
            raise UsageError(f"request body is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise UsageError("request body must be a JSON object")
        return data

    async def spool(request: Request) -> tuple[Path, int]:
        """The request body in a temp file inside the store (same filesystem as the target)."""
        fd, name = tempfile.mkstemp(dir=store.root / "tmp", prefix=f"upload.{os.getpid()}.")
        size = 0
        try:
            with os.fdopen(fd, "wb") as out:
                async for chunk in request.stream():
                    size += len(chunk)
                    out.write(chunk)
        except OSError as exc:  # the disk filled up: read the rest, so the client gets the reply
            Path(name).unlink(missing_ok=True)
            async for _chunk in request.stream():
                pass
            raise store.disk_full(exc) if store.out_of_space(exc) else exc from None
        except BaseException:  # the client hung up mid-body: keep nothing
            Path(name).unlink(missing_ok=True)
            raise
        declared = request.headers.get("content-length")
        if declared is not None and int(declared) != size:
            Path(name).unlink()
            raise UsageError(f"upload truncated: {size} of {declared} bytes")
        return Path(name), size

    async def info(_request: Request) -> Response:
        return JSONResponse({"agent": "rtenv", "version": __version__, "root": str(store.root)})

    async def package(request: Request) -> Response:
        name = request.path_params["name"]
        if request.method in ("GET", "HEAD"):
            download = bool(request.query_params.get("download"))  # else a check: pins, as Ray's
            exists = (store.has_package(name) if download
                      else await run_in_threadpool(store.hold_package, name))
            if exists and download:
                from starlette.responses import FileResponse

                return FileResponse(await run_in_threadpool(store.package_file, name))
            if request.method == "HEAD":
                return Response(status_code=200 if exists else 404)
            return Response(b"" if exists else f"Package gcs://{name} does not exist".encode(),
                            status_code=200 if exists else 404)
        store.package_path(name)  # validates the name before reading the body
        hashed = delta.parse_hashed_dirs(request.headers.get(delta.HASHED_DIRS_HEADER))
        path, _size = await spool(request)
        try:
            await run_in_threadpool(lambda: store.put_package(name, path, extra_dirs=hashed))
        finally:
            path.unlink(missing_ok=True)
        return Response(status_code=200)

    async def manifests(request: Request) -> Response:
        man = delta.Manifest.parse(await body_json(request))
        return JSONResponse({"missing": await run_in_threadpool(delta.missing, store, man)})

    async def commit(request: Request) -> Response:
        man = delta.Manifest.parse(await body_json(request))
        return JSONResponse(await run_in_threadpool(delta.commit, store, man))

    async def blob(request: Request) -> Response:
        sha = request.path_params["sha"]
        store.blob_path(sha)  # validates the id before reading the body
        path, _size = await spool(request)
        try:
            await run_in_threadpool(store.put_blob, sha, path)
        finally:
            path.unlink(missing_ok=True)
        return Response(status_code=200)

    async def blobs(request: Request) -> Response:
        from rtenv_cli.core.agent.bodyreader import BodyReader

        # each record goes straight into its blob's temp file: the batch is on disk once
        count = await run_in_threadpool(store.put_blobs, BodyReader(request.stream()))
        return JSONResponse({"stored": count})

    def env_request(data: dict[str, Any], client: str) -> dict[str, Any]:
        """POST /api/envs's body as get_or_create's arguments."""
        runtime_env = data.get("runtime_env")
        holder = data.get("holder")
        if not isinstance(runtime_env, dict) or not isinstance(holder, str) or not holder:
            raise UsageError("POST /api/envs needs {runtime_env: {...}, holder: str}")
        # a pid only means something on this host; remote holders must renew a lease
        pid = data.get("pid") if is_loopback(client) else None
        lease = data.get("lease_s")
        if pid is None and lease is None:
            lease = 24 * 3600.0
        return {"runtime_env": runtime_env, "holder": holder, "pid": pid, "lease_s": lease}

    def authorized(header: str) -> int | None:
        """None when the request may pass, else the HTTP status to refuse it with."""
        if not token:
            return None
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(value.encode(), token):
            return None
        return 401 if not header else 403

    async def create_env(request: Request) -> Response:
        args = env_request(await body_json(request),
                           request.client.host if request.client else "")
        # _HitsFirst has answered the cache hits on the event loop already; what reaches here
        # builds (get_or_create still returns an entry a concurrent request just finished)
        handle = await run_in_threadpool(lambda: envs.get_or_create(**args))
        if handle.built:
            await run_in_threadpool(budget.enforce, store)
        return JSONResponse(handle.to_dict())

    async def release(request: Request) -> Response:
        n = await run_in_threadpool(envs.release, request.path_params["key"],
                                    request.path_params["holder"])
        return JSONResponse({"released": n})

    async def list_envs(_request: Request) -> Response:
        return JSONResponse({"envs": await run_in_threadpool(envs.list_envs)})

    async def cache(request: Request) -> Response:
        kinds = tuple(k for k in request.query_params.getlist("kind") if k)
        listing = await run_in_threadpool(list_store, store, kinds)
        return JSONResponse({**listing.to_dict(), "source": f"agent {request.base_url}"})

    async def gc(request: Request) -> Response:
        data = await body_json(request)

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

        return JSONResponse(await run_in_threadpool(work))

    async def download(request: Request) -> Response:
        """A package as a remote zip for Ray's nodes: `working_dir: http://.../<name>.zip`."""
        from starlette.responses import FileResponse

        name = request.path_params["name"]
        want = download_capability(config.token, name)
        if not hmac.compare_digest(request.path_params["cap"].encode(), want.encode()):
            return JSONResponse({"error": {"kind": "auth", "message": "unknown download URL"}},
                                status_code=404)
        try:
            if not store.has_package(name):
                return JSONResponse({"error": {"kind": "usage", "message":
                                               f"package {name} is not in the store"}},
                                    status_code=404)
            path = await run_in_threadpool(store.remote_file, name)
        except RtenvError as exc:
            return error(exc)
        return FileResponse(path, media_type="application/zip")

    async def openapi(_request: Request) -> Response:
        return JSONResponse(SCHEMA)

    def guarded(fn):  # type: ignore[no-untyped-def]
        async def endpoint(request: Request) -> Response:
            status = authorized(request.headers.get("authorization", ""))
            if status is not None:
                return JSONResponse({"error": {"kind": "auth", "message":
                                               "missing or wrong bearer token"}},
                                    status_code=status)
            try:
                return await fn(request)
            except RtenvError as exc:
                return error(exc)

        return endpoint

    routes = [
        Route("/api/agent", guarded(info), methods=["GET"]),
        Route("/api/packages/gcs/{name}", guarded(package), methods=["GET", "HEAD", "PUT"]),
        Route("/api/manifests", guarded(manifests), methods=["POST"]),
        Route("/api/manifests/commit", guarded(commit), methods=["POST"]),
        Route("/api/blobs", guarded(blobs), methods=["POST"]),
        Route("/api/blobs/{sha}", guarded(blob), methods=["PUT"]),
        Route("/api/envs", guarded(create_env), methods=["POST"]),
        Route("/api/envs", guarded(list_envs), methods=["GET"]),
        Route("/api/envs/{key}/refs/{holder}", guarded(release), methods=["DELETE"]),
        Route("/api/cache", guarded(cache), methods=["GET"]),
        Route("/api/gc", guarded(gc), methods=["POST"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/download/{cap}/{name}", download, methods=["GET", "HEAD"]),
    ]
    app = Starlette(routes=routes)
    app.state.store = store
    return _HitsFirst(app, env_request, authorized, envs)


class _HitsFirst:
    """The ASGI app, with cache hits of `POST /api/envs` answered before Starlette's routing and
    middleware: a hit is the agent's hot path (raylets and `rtenv run`s asking for environments
    that exist), and the stack costs about as much as the hit itself. Hits read in the same turn
    of the event loop are committed together (group commit: one SQLite transaction). Anything
    else, a miss or an error included, goes to Starlette with the body replayed, so behaviour
    stays one. Other attributes (routes, state) are the Starlette app's."""

    def __init__(self, app: Any, env_request: Any, authorized: Any, envs: Any) -> None:
        self.app, self.env_request, self.authorized, self.envs = (app, env_request, authorized,
                                                                  envs)
        self._batch: list[tuple[dict[str, Any], asyncio.Future[Any]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def _hit(self, scope: dict[str, Any], body: bytes) -> Any:
        headers = dict(scope.get("headers") or ())
        if self.authorized(headers.get(b"authorization", b"").decode("latin-1")) is not None:
            return None
        try:
            data = json.loads(body or b"{}")
            if not isinstance(data, dict):
                return None
            args = self.env_request(data, (scope.get("client") or ("",))[0])
        except (ValueError, RtenvError):
            return None  # Starlette's endpoint answers it, with the proper error
        # group commit: the hits read in one turn of the event loop share one transaction
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        self._batch.append((args, done))
        if len(self._batch) == 1:
            loop.call_soon(self._commit_batch)
        return await done

    def _commit_batch(self) -> None:
        batch, self._batch = self._batch, []
        try:
            results = self.envs.try_hits([args for args, _done in batch])
        except Exception:  # e.g. SQLite busy: the slow path answers each request properly
            results = [None] * len(batch)
        for (_args, done), result in zip(batch, results, strict=True):
            if not done.done():
                done.set_result(result)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if not (scope["type"] == "http" and scope["method"] == "POST"
                and scope["path"] == "/api/envs"):
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        handle = await self._hit(scope, body)
        if handle is None:
            replayed = False

            async def replay() -> dict[str, Any]:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            await self.app(scope, replay, send)
            return
        payload = json.dumps(handle.to_dict()).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})


_CONFIG_ENV = "RTENV_AGENT_CONFIG"  # how `serve` hands the config to worker processes


def app_from_env():  # type: ignore[no-untyped-def]
    """uvicorn's app factory in each worker process of `rtenv agent --workers N`."""
    data = json.loads(os.environ[_CONFIG_ENV])
    root = data.pop("root")
    app = create_app(AgentConfig(root=Path(root) if root else None, **data))
    _quiet_gc()
    return app


def _quiet_gc() -> None:
    """Keep the cyclic GC off the request path: everything allocated at start-up (modules, the
    app, the store) is moved out of its reach, and young collections run every 50,000 instead of
    700 allocations. The hot path allocates little that forms cycles; what goes away is the
    millisecond pause of a collection over the whole heap landing inside a request."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def serve(config: AgentConfig) -> None:
    """Run the agent in the foreground until SIGINT/SIGTERM.

    With `workers > 1`, uvicorn's supervisor runs that many processes on one socket; they share
    the store through its SQLite index and per-key file locks (a build still happens once),
    and cache hits are answered in parallel.
    """
    import uvicorn

    check_bind(config)
    common = {"host": config.host, "port": config.port, "log_level": "warning",
              "access_log": False, "timeout_graceful_shutdown": 5}
    if config.workers <= 1:
        app = create_app(config)
        _quiet_gc()
        uvicorn.run(app, **common)  # type: ignore[arg-type]
        return
    fields = {k: v for k, v in config.__dict__.items() if k != "workers"}
    fields["root"] = str(config.root) if config.root is not None else None
    os.environ[_CONFIG_ENV] = json.dumps(fields)
    uvicorn.run("rtenv_cli.core.agent.server:app_from_env", factory=True,
                workers=config.workers, **common)  # type: ignore[arg-type]
