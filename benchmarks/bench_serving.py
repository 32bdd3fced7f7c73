"""The agent's connection guard beside plain uvicorn, in one run: what subclassing uvicorn's
private `HttpToolsProtocol` (`agent/serving.py`, `GuardedHttp`) buys, and what it costs.

Each pair of rows runs the same `rtenv agent` twice; the ablation swaps `serving.guarded_http`
for uvicorn's own `HttpToolsProtocol`, so the protocol class is the only difference. uvicorn has
no public setting that does the guard's work: `timeout_keep_alive` acts only between requests and
`limit_concurrency` only once a request's headers are complete, so a client that never finishes
its headers holds its descriptor for ever.

- a flood: 150 silent connections to an agent limited to 128 descriptors, then 10 requests;
- stalled clients: 30 connections that stop halfway through their headers, `--read-timeout 1`;
  how many are still open 5 s later;
- the price: the agent's CPU time per cache-hit `POST /api/envs` on a kept-alive connection,
  both agents loaded in turn in the same minute (CPU time, not wall clock: the box is shared).
"""

from __future__ import annotations

import os
import socket
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.bench_agent import _agent, _post_env, _stop
from benchmarks.common import Row
from tests.support.ports import free_port

B = "serving"
# both agents start the same way, with the same imports; only PLAIN swaps the protocol class
GUARD = ("import rtenv_cli.core.agent.serving as s\n"
         "from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol")
PLAIN = f"{GUARD}\ns.guarded_http = lambda: HttpToolsProtocol"
FLOOD_FDS, FLOOD_SILENT, FLOOD_REQUESTS = 128, 150, 10
STALLED, STALL_WINDOW_S = 30, 5.0


def _limit_fds(n: int) -> str:
    return f"import resource\nresource.setrlimit(resource.RLIMIT_NOFILE, ({n}, {n}))"


def _answered(port: int, count: int, timeout: float) -> int:
    """How many of `count` fresh connections get `GET /api/agent` answered within `timeout`."""
    import http.client

    ok = 0
    for _ in range(count):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            conn.request("GET", "/api/agent")
            ok += conn.getresponse().status == 200
        except OSError:
            pass
        finally:
            conn.close()
    return ok


def _flood(root: Path, prelude: str) -> int:
    port = free_port()
    proc = _agent(root, port, "--read-timeout", "600",
                  prelude=f"{_limit_fds(FLOOD_FDS)}\n{prelude}")
    silent = [socket.create_connection(("127.0.0.1", port), timeout=30)
              for _ in range(FLOOD_SILENT)]
    try:
        return _answered(port, FLOOD_REQUESTS, timeout=5)
    finally:
        for sock in silent:
            sock.close()
        _stop(proc)


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(4096) == b""
    except BlockingIOError:  # nothing to read: still open
        return False
    except ConnectionError:
        return True


def _stalled(root: Path, prelude: str) -> int:
    port = free_port()
    proc = _agent(root, port, "--read-timeout", "1", prelude=prelude)
    socks = []
    try:
        for _ in range(STALLED):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            sock.sendall(b"POST /api/envs HTTP/1.1\r\nHost: x\r\n")
            socks.append(sock)
        time.sleep(STALL_WINDOW_S)  # the observation window: five read timeouts
        return sum(not _closed_by_peer(s) for s in socks)
    finally:
        for sock in socks:
            sock.close()
        _stop(proc)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _hit_cost(root: Path, rounds: int, per_round: int) -> tuple[float, float]:
    """The agent's CPU seconds per cache hit, (guarded, plain), the median of `rounds`: both
    agents up at once, loaded in alternating rounds, each on one kept-alive connection."""
    import asyncio

    ports = {"guard": free_port(), "plain": free_port()}
    procs = {"guard": _agent(root / "guard", ports["guard"], prelude=GUARD),
             "plain": _agent(root / "plain", ports["plain"], prelude=PLAIN)}
    cpu: dict[str, list[float]] = {name: [] for name in procs}  # CPU seconds per hit, a round

    async def load(name: str, n: int, count: bool) -> None:
        # a connection per round: the other agent's round outlasts the keep-alive timeout
        reader, writer = await asyncio.open_connection("127.0.0.1", ports[name])
        before = _cpu_s(procs[name].pid)
        for i in range(n):
            head = await _post_env(reader, writer, os.getpid(), f"{name}-{i}")
            assert head.startswith(b"HTTP/1.1 200"), head
        if count:
            cpu[name].append((_cpu_s(procs[name].pid) - before) / n)
        writer.close()

    async def main() -> None:
        for name in procs:  # the first create builds; a warm-up follows
            await load(name, 50, count=False)
        for i in range(rounds):  # each agent first in every other round
            for name in sorted(procs, reverse=bool(i % 2)):
                await load(name, per_round, count=True)

    try:
        asyncio.run(main())
    finally:
        for proc in procs.values():
            _stop(proc)
    return statistics.median(cpu["guard"]), statistics.median(cpu["plain"])


def run(quick: bool) -> list[Row]:
    load = os.getloadavg()[0]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="rtenv-bench-serving-") as tmp:
        root = Path(tmp)
        guarded, plain = _flood(root / "f1", GUARD), _flood(root / "f2", PLAIN)
        what = f"requests answered of {FLOOD_REQUESTS}, {FLOOD_SILENT} silent connections"
        rows += [
            Row(B, what, "requests", guarded, None, f"all {FLOOD_REQUESTS}",
                guarded == FLOOD_REQUESTS, f"an agent limited to {FLOOD_FDS} descriptors; the "
                "guard closes the longest-waiting silent connection once its cap is reached"),
            Row(B, f"ablation: {what}, no guard", "requests", plain, None,
                f"fewer than {guarded} (with the guard)", plain < guarded,
                "HttpToolsProtocol: the silent connections take every descriptor it has; the "
                "requests' connections are reset or time out (5 s)"),
        ]
        guarded, plain = _stalled(root / "s1", GUARD), _stalled(root / "s2", PLAIN)
        what = f"of {STALLED} stalled connections, open {STALL_WINDOW_S:g} s later"
        rows += [
            Row(B, what, "connections", guarded, None, "0", guarded == 0,
                "stalled halfway through their headers, --read-timeout 1: closed by the "
                "guard's header deadline"),
            Row(B, f"ablation: {what}, no guard", "connections", plain, None,
                f"more than {guarded} (with the guard)", plain > guarded,
                "uvicorn's own HttpToolsProtocol times out idle keep-alive connections only"),
        ]
        rounds, per_round = (2, 200) if quick else (12, 600)
        guard_s, plain_s = _hit_cost(root, rounds, per_round)
        share = (guard_s - plain_s) / plain_s * 100 if plain_s else 0.0
        rows += [
            Row(B, "agent CPU per cache hit", "us",
                guard_s * 1e6, None, notes=f"median of {rounds} rounds of {per_round} "
                "cache-hit creates on a kept-alive connection; the guard adds a timer per "
                "connection and a counter per read"),
            Row(B, "ablation: agent CPU per cache hit, no guard", "us",
                plain_s * 1e6, None, notes=f"uvicorn's own HttpToolsProtocol: the guard's "
                f"price is {share:+.1f}% of the agent's CPU per hit, in this box's run-to-run "
                "noise; the private path buys no speed, only the guard (the rows above) "
                f"(alternating rounds in the same minute; load average {load:.2f} at start)"),
        ]
    return rows
