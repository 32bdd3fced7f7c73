"""The agent's ASGI app (`create_app`): `AgentApp` in front of the Starlette app of
`agent.server`. It checks the bearer token for every protected route, then answers cache hits of
`POST /api/envs` before Starlette's routing, committed in batches; a miss goes on to the route.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from typing import TYPE_CHECKING, Any

from rtenv_cli.core.agent.server import (
    ENV_ARGS,
    PUBLIC,
    AgentConfig,
    AgentState,
    env_args,
    is_loopback,
    read_body,
    starlette_app,
)
from rtenv_cli.core.errors import RtenvError
from rtenv_cli.core.store.envs import MEMO_MAX_JSON
from rtenv_cli.core.store.store import Store
from rtenv_cli.core.transport import agent_protocol as protocol

if TYPE_CHECKING:  # starlette is imported when the agent starts, not with this module
    from starlette.applications import Starlette
    from starlette.types import Receive, Scope, Send

    from rtenv_cli.core.store.handle import EnvHandle

__all__ = ["HIT_PATH", "AgentApp", "create_app"]

_log = logging.getLogger("rtenv.agent")


def create_app(config: AgentConfig, store: Store | None = None) -> AgentApp:
    from rtenv_cli.core.cache import gc as cache_gc
    from rtenv_cli.core.store.envs import Environments
    from rtenv_cli.core.transport import http

    store = store or Store(config.root)
    store.index.checkpoint_in_background()
    state = AgentState(config, store, Environments(store, fetch=http.fetch_archive,
                                                   file_roots=config.file_roots),
                       cache_gc.Budget(max_bytes=config.max_bytes, max_age_s=config.max_age_s))
    return AgentApp(starlette_app(state), state)


async def _send_json(send: Send, status: int, payload: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})


def _length_header(scope: Scope) -> dict[str, str]:
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

    def __init__(self, app: Starlette, state: AgentState) -> None:
        self.app, self.state = app, state
        self._batch: list[tuple[dict[str, Any], asyncio.Future[EnvHandle | None]]] = []
        self._busy = 0  # tries in a row that found the index's write lock taken
        self._checked: set[str] = set()  # runtime_envs (as JSON) that passed env_args

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
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

    async def _create(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            body = await read_body(receive, _length_header(scope),
                                   self.state.config.limits.json_bytes)
            args = self._env_args(body, (scope.get("client") or ("",))[0])
        except RtenvError as exc:
            await _send_json(send, exc.http_status, json.dumps(protocol.error_body(exc)).encode())
            return
        handle = await self._hit(args)
        if handle is None:
            scope.setdefault("state", {})[ENV_ARGS] = args
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

    async def _hit(self, args: dict[str, Any]) -> EnvHandle | None:
        # group commit: the hits read in one turn of the event loop share one transaction
        loop = asyncio.get_running_loop()
        done: asyncio.Future[EnvHandle | None] = loop.create_future()
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


def _answer(batch: list[tuple[dict[str, Any], asyncio.Future[EnvHandle | None]]],
            fut: asyncio.Future[list[EnvHandle | None]]) -> None:
    failed = fut.cancelled() or fut.exception() is not None
    _settle(batch, [None] * len(batch) if failed else fut.result())


def _settle(batch: list[tuple[dict[str, Any], asyncio.Future[EnvHandle | None]]],
            results: list[EnvHandle | None]) -> None:
    for (_args, done), result in zip(batch, results, strict=True):
        if not done.done():
            done.set_result(result)
