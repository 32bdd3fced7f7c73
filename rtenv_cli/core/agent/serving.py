"""Running the agent: the listening socket, uvicorn, worker processes, and the connection guard.

Start-up happens in an order that makes each failure a clear error before anything is claimed:
the bind is checked (a token beyond loopback), the store opened, the socket bound; only then
does `serve` report where it listens (`on_listening`).

Readiness (`ready_file`, `rtenv agent --ready-file`): once the agent serves (one worker: its
server has started; several: the socket is bound and listening, so a client's connection waits
in its backlog for the first worker), the agent's URL and a newline are written to the file,
atomically (temp file and rename: a reader never sees half of it), and the file is removed when
the agent stops (SIGINT/SIGTERM; a SIGKILL leaves it). A batch script waits for the file instead
of polling the port.

Slow or stalled clients (slowloris) cannot hold the agent: uvicorn times out idle keep-alive
connections only, and its `limit_concurrency` acts once a request's headers are complete, so a
connection that sends nothing, trickles its headers or stalls its body would keep its file
descriptor for ever. `GuardedHttp` closes a connection whose request headers are not complete
within `read_timeout_s` of its start, or whose body does not advance by `MIN_PROGRESS` bytes in
each `read_timeout_s` (time the agent itself holds the body back, reading paused, does not
count). It also caps the open connections below the process's descriptor limit: when a new one
would pass the cap, the connection that has waited longest for its client's bytes is closed
(else the new one). The soft descriptor limit is raised to the hard one at start.

With `workers > 1`, uvicorn's supervisor runs that many processes on the one socket; they share
the store through its SQLite index and per-key file locks (a build still happens once), and
cache hits are answered in parallel. Each worker gets the configuration, token included, through
the pipe that starts it (pickled, as uvicorn passes its own configuration), never through the
environment or the command line; RTENV_AGENT_TOKEN is removed from the agent's environment once
read, so neither workers nor builds inherit it. (`--token` itself shows in `ps`: the CLI's help
says to prefer the variable.)
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtenv_cli.core.agent.hits import create_app
from rtenv_cli.core.agent.server import AgentConfig, check_bind
from rtenv_cli.core.errors import UsageError
from rtenv_cli.core.store.store import Store
from rtenv_cli.core.transport.agent_protocol import TOKEN_ENV

MIN_PROGRESS = 64 << 10  # bytes a body must advance by in each read timeout
_NOFILE_CEILING = 1 << 16


@dataclass(frozen=True)
class Guard:
    read_timeout_s: float = 10.0
    max_connections: int = 1024


def connection_cap(max_connections: int) -> int:
    """At most `max_connections`, and few enough that the process keeps descriptors for its
    store, threads and builds (half the limit, at most 256, stays free)."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max_connections
    return max(8, min(max_connections, soft - min(256, soft // 2)))


def raise_nofile() -> None:
    """Use the descriptors the hard limit allows (systemd's default soft limit is 1024)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = _NOFILE_CEILING if hard == resource.RLIM_INFINITY else min(hard, _NOFILE_CEILING)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


class _GuardState:
    """The guard's settings in this process (set by `configure` before it serves)."""

    guard = Guard()
    cap = 1024


class _ReadGuard:
    """The guard's part of `GuardedHttp`, mixed in before uvicorn's httptools protocol (whose
    attributes `loop`, `transport`, `flow` and `connections` it uses)."""

    loop: Any
    transport: Any
    flow: Any
    connections: Any

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        now = self.loop.time()
        self._waiting = True  # the client owes bytes of a request
        self._since = now  # when it started owing them
        self._headers_done = False
        self._received = 0
        self._window = (now, 0)  # (start, bytes received then) of the body's stretch
        self._timer = self.loop.call_later(_GuardState.guard.read_timeout_s / 2,
                                           self._tick)
        if len(self.connections) > _GuardState.cap:
            self._evict()

    def connection_lost(self, exc: Exception | None) -> None:
        self._timer.cancel()
        super().connection_lost(exc)  # type: ignore[misc]

    def data_received(self, data: bytes) -> None:
        self._received += len(data)
        super().data_received(data)  # type: ignore[misc]

    def on_message_begin(self) -> None:
        super().on_message_begin()  # type: ignore[misc]
        if not self._waiting:  # a request after a keep-alive pause, or a pipelined one
            self._waiting, self._since = True, self.loop.time()
        self._headers_done = False

    def on_headers_complete(self) -> None:
        self._headers_done = True
        self._window = (self.loop.time(), self._received)
        super().on_headers_complete()  # type: ignore[misc]

    def on_message_complete(self) -> None:
        super().on_message_complete()  # type: ignore[misc]
        self._waiting = False

    def _stalled(self, now: float) -> bool:
        if not self._waiting or self.flow.read_paused:
            self._window = (now, self._received)
            return False
        limit = _GuardState.guard.read_timeout_s
        if not self._headers_done:
            return bool(now - self._since >= limit)
        start, mark = self._window
        if now - start < limit:
            return False
        if self._received - mark < MIN_PROGRESS:
            return True
        self._window = (now, self._received)
        return False

    def _tick(self) -> None:
        if self.transport.is_closing():
            return
        if self._stalled(self.loop.time()):
            self.transport.close()
            return
        self._timer = self.loop.call_later(_GuardState.guard.read_timeout_s / 2,
                                           self._tick)

    def _evict(self) -> None:
        waiting = [c for c in self.connections if isinstance(c, _ReadGuard)
                   and c._waiting and not c.flow.read_paused
                   and not c.transport.is_closing()]
        victim = min(waiting, key=lambda c: c._since, default=self)
        victim.transport.close()


def _guarded_class() -> type:
    """`_ReadGuard` over uvicorn's httptools protocol; built on first use so that importing
    this module does not import uvicorn. No public setting of uvicorn does its work (see the
    module's docstring); what it buys and costs beside uvicorn's own protocol:
    serving.json: "ablation: requests answered of 10, 150 silent connections, no guard",
    serving.json: "ablation: of 30 stalled connections, open 5 s later, no guard" and
    serving.json: "ablation: agent CPU per cache hit, no guard"."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    # named and placed so that pickle finds it here (worker processes get it by name)
    return type("GuardedHttp", (_ReadGuard, HttpToolsProtocol), {"__module__": __name__})


def guarded_http() -> type:
    cls = globals().get("GuardedHttp")
    if cls is None:
        cls = globals()["GuardedHttp"] = _guarded_class()
    return cls


def __getattr__(name: str) -> Any:  # how pickle finds the class in a worker process
    if name == "GuardedHttp":
        return guarded_http()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def configure(config: AgentConfig) -> None:
    """The guard's settings in this process (the server's, or a worker's)."""
    _GuardState.guard = Guard(config.read_timeout_s, config.max_connections)
    _GuardState.cap = connection_cap(config.max_connections)


def app_for(config: AgentConfig, store: Store | None = None) -> Any:
    """The app of one serving process, its guard configured and its heap frozen."""
    configure(config)
    app = create_app(config, store)
    _quiet_gc()
    return app


def _quiet_gc() -> None:
    """Keep the cyclic GC off the request path: everything allocated at start-up (modules, the
    app, the store) is moved out of its reach, and young collections run every 50,000 instead of
    700 allocations. The hot path allocates little that forms cycles; what goes away is the
    pause of a collection over the whole heap landing inside a request."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def open_store(config: AgentConfig) -> Store:
    try:
        return Store(config.root)
    except OSError as exc:
        raise UsageError(f"cannot use {exc.filename or config.root} as the agent's store: "
                         f"{exc.strerror or exc}",
                         hint="pass --root a directory this user can create and write") from None


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, or a UsageError that says why not."""
    if not 0 <= port <= 65535:  # noqa: PLR2004 - the range of TCP ports
        raise UsageError(f"port {port} is not a TCP port", hint="pick one in 1-65535")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise UsageError(f"cannot bind {host}: {exc.strerror}",
                         hint="pass --host an address of this machine") from None
    family, _type, _proto, _name, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(f"port {port} on {host} is in use",
                             hint="pick another --port, or stop what listens there") from None
        raise UsageError(f"cannot bind {host}:{port}: {exc.strerror}",
                         hint="pass --host an address of this machine") from None
    sock.set_inheritable(True)
    return sock


def serve(config: AgentConfig, on_listening: Callable[[str], None] | None = None,
          ready_file: Path | None = None) -> None:
    """Run the agent in the foreground until SIGINT/SIGTERM. `on_listening` gets the URL once
    the store is open and the socket bound (a `--port 0` shows the port picked); `ready_file`
    gets it once the agent serves, and goes when it stops (see "Readiness")."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    check_bind(config)
    ready = _Readiness(ready_file)
    # the token is in `config` now: builds (uv, a package's own build code) and worker
    # processes inherit the environment, and none of them should hold it
    os.environ.pop(TOKEN_ENV, None)
    raise_nofile()
    store = open_store(config)
    sock = bind(config.host, config.port)
    host, port = sock.getsockname()[:2]
    url = _url(host, port)
    ready.url = url
    common: dict[str, Any] = {
        "http": guarded_http(), "log_level": "warning", "access_log": False,
        "timeout_graceful_shutdown": 5, "timeout_keep_alive": 5,
        # the client's address decides whether its pid is trusted: never a header's word
        "proxy_headers": False}
    try:
        if config.workers <= 1:
            server = _server(uvicorn.Config(app_for(config, store), **common), ready)
            if on_listening is not None:
                on_listening(url)
            server.run(sockets=[sock])
            return
        factory = functools.partial(app_for, config)
        uconfig = uvicorn.Config(factory, factory=True, workers=config.workers, **common)
        if on_listening is not None:
            on_listening(url)
        try:
            supervisor = Multiprocess(uconfig, sockets=[sock])
        except TypeError:  # uvicorn before 0.32 also wants the function each worker runs
            supervisor = Multiprocess(uconfig, target=uvicorn.Server(uconfig).run,  # type: ignore[call-arg]  # older signature
                                      sockets=[sock])
        ready.write()  # the socket listens: a connection waits in its backlog for a worker
        supervisor.run()
    finally:
        ready.remove()


class _Readiness:
    """The ready file: written once, removed at the end only if written (see "Readiness")."""

    def __init__(self, path: Path | None) -> None:
        self.path, self.url, self.written = path, "", False
        if path is not None and not path.parent.is_dir():  # before anything is claimed
            raise UsageError(f"cannot write the ready file {path}: no directory {path.parent}",
                             hint="pass --ready-file a path in an existing directory")

    def write(self) -> None:
        if self.path is None or self.written:
            return
        from rtenv_cli.core.fsutil import atomic_write_text

        try:
            atomic_write_text(self.path, self.url + "\n")
        except OSError as exc:
            raise UsageError(f"cannot write the ready file {self.path}: {exc.strerror or exc}",
                             hint="pass --ready-file a path in a directory this user can "
                             "write") from None
        self.written = True

    def remove(self) -> None:
        if self.path is not None and self.written:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


def _server(config: Any, ready: _Readiness) -> Any:
    """uvicorn's server, writing the ready file once it serves (after its public `startup()`,
    which opens the server on the sockets) and removing it after its `shutdown()` (uvicorn then
    re-raises the SIGTERM it caught, so code after `run()` never runs). Made here: uvicorn is
    imported only to serve."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                ready.write()

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            try:
                await super().shutdown(sockets=sockets)
            finally:
                ready.remove()

    return Server(config)


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
