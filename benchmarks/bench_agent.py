"""The rtenv agent vs Ray 2.60's pip and uv plugins, on the same machine in the same run.

- env create for `six`: rtenv cold (empty store and empty uv cache) and warm (empty store, warm
  uv cache), vs Ray's pip and uv plugins asked directly through the node's runtime-env agent
  (`POST /get_or_create_runtime_env`, what the raylet sends), on a fresh head;
- disk size of each environment;
- cache-hit get-or-create latency p50/p99 over HTTP with 1, 2 and 8 concurrent clients, and in
  process;
- 100 concurrent identical creates against a real agent process: number of builds.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common import Row
from rtenv_cli.core.store.files import dir_size

B = "agent"


# requests per kept-alive connection in a latency row: at 16 connections a row then lasts about
# 3 s (16,000 requests). With 250 (4,000 requests, under a second) one scheduler hiccup of the
# shared 2-core box stalls all 16 requests in flight at once, which is 0.4% of the row: the p99
# of so short a window measured the box's worst moment, not the agent.
HITS_PER_CONNECTION = 1000

def _rtenv_create(root: Path, packages: list[str], holder: str = "bench") -> tuple[float, Path]:
    from rtenv_cli.core.store.envs import Environments
    from rtenv_cli.core.store.store import Store

    envs = Environments(Store(root / "store"))
    start = time.perf_counter()
    handle = envs.get_or_create({"pip": packages}, holder=holder)
    return time.perf_counter() - start, Path(handle.venv or "")


def _ray_create(plugin: str, packages: list[str]) -> tuple[float, int, str]:
    """Seconds and bytes for one create through a fresh head's runtime-env agent."""
    import requests
    from ray.core.generated import runtime_env_agent_pb2
    from ray.runtime_env import RuntimeEnv

    from tests.support.ray_head import ray_head

    with ray_head(num_cpus=1) as head:
        code = "import ray, json; ray.init(); print(json.dumps(ray.nodes()[0]))"
        proc = head.run_driver(code)
        node = json.loads(proc.stdout.strip().splitlines()[-1])
        url = f"http://{node['NodeManagerAddress']}:{node['RuntimeEnvAgentPort']}"
        serialized = RuntimeEnv(**{plugin: packages}).serialize()
        req = runtime_env_agent_pb2.GetOrCreateRuntimeEnvRequest(
            serialized_runtime_env=serialized, job_id=b"01000000", source_process="bench")
        start = time.perf_counter()
        resp = requests.post(f"{url}/get_or_create_runtime_env",
                             data=req.SerializeToString(), timeout=600)
        seconds = time.perf_counter() - start
        reply = runtime_env_agent_pb2.GetOrCreateRuntimeEnvReply.FromString(resp.content)
        if reply.status != 0:
            return seconds, 0, reply.error_message[-300:]
        context = json.loads(reply.serialized_runtime_env_context)
        venv = Path(context["py_executable"]).parent.parent
        return seconds, dir_size(venv.parent), ""


def _agent(root: Path, port: int, *extra: str, prelude: str = "") -> subprocess.Popen[bytes]:
    """`rtenv agent` as a process; `prelude` (Python) runs first, e.g. to switch off a fast
    path for an ablation row."""
    args = ["agent", "--port", str(port), "--root", str(root), "--no-token", *extra]
    argv = ([sys.executable, "-c", f"{prelude}\nfrom rtenv_cli.cli.main import main\n"
             f"main({args!r})"] if prelude else [sys.executable, "-m", "rtenv_cli", *args])
    proc = subprocess.Popen(argv, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    from tests.support.ports import wait_for_port

    wait_for_port(port)
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=20)


def _hit_client(args: tuple[int, int, str, int]) -> list[float]:
    """A light load generator (http.client on a kept-alive connection, like wrk would be): the
    client's own CPU use must not starve the agent on a 2-core box."""
    import http.client

    port, pid, name, count = args
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    out = []
    for i in range(count + 10):  # the first 10 warm the connection and are not counted
        body = json.dumps({"runtime_env": {"pip": ["six==1.16.0"]}, "pid": pid,
                           "holder": f"{name}-{i}"})
        start = time.perf_counter()
        conn.request("POST", "/api/envs", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if i >= 10:
            out.append(time.perf_counter() - start)
        assert resp.status == 200, data
    conn.close()
    return out


async def _post_env(reader: Any, writer: Any, pid: int, holder: str) -> bytes:
    """One cache-hit create on a kept-alive connection (raw HTTP/1.1, as wrk sends it); returns
    the reply's status line and headers."""
    body = json.dumps({"runtime_env": {"pip": ["six==1.16.0"]}, "pid": pid,
                       "holder": holder}).encode()
    writer.write(b"POST /api/envs HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 b"application/json\r\nContent-Length: " + str(len(body)).encode()
                 + b"\r\n\r\n" + body)
    head: bytes = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    await reader.readexactly(length)
    return head


def _hit_connections(port: int, pid: int, connections: int, per_conn: int) -> list[float]:
    """`connections` kept-alive connections with one request in flight each, from this one
    process (asyncio streams, like `wrk -c N`): the load generator stays on about one core, so
    what is measured is the agent under N concurrent requests, not the scheduler sharing two
    cores among N spinning client processes."""
    import asyncio

    async def conn(n: int) -> list[float]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        out = []
        for i in range(per_conn + 10):  # the first 10 warm up and are not counted
            start = time.perf_counter()
            head = await _post_env(reader, writer, pid, f"a{connections}-{n}-{i}")
            assert head.startswith(b"HTTP/1.1 200"), head
            if i >= 10:
                out.append(time.perf_counter() - start)
        writer.close()
        return out

    async def main() -> list[float]:
        parts = await asyncio.gather(*(conn(n) for n in range(connections)))
        return [x for part in parts for x in part]

    return asyncio.run(main())


def _connection_rows(port: int, per_conn: int, label: str, *, note: str = "") -> list[Row]:
    rows = []
    for conns in (1, 2, 4, 8, 16):
        hits = _hit_connections(port, os.getpid(), conns, per_conn)
        p50, p99 = statistics.median(hits), _pct(hits, 0.99)
        rows.append(Row(B, f"cache-hit get-or-create over HTTP, {label}, {conns} concurrent "
                        "connection(s), p99", "ms", p99 * 1e3, None, "< 10 ms", p99 < 0.010,
                        f"p50 {p50 * 1e3:.2f} ms, {len(hits)} requests from one asyncio load "
                        f"generator (like wrk -c N); load average {os.getloadavg()[0]:.1f}"
                        + note))
    return rows


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _steady_load(port: int, pid: int, seconds: float, connections: int = 16
                 ) -> tuple[int, int, list[float]]:
    """Cache hits on `connections` kept-alive connections for `seconds`, as fast as they are
    answered: (requests, errors, latencies)."""
    import asyncio

    async def conn(n: int) -> tuple[int, int, list[float]]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        done = errors = 0
        lat: list[float] = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            # one holder per connection, as a worker asking again: each hit renews its reference
            start = time.perf_counter()
            head = await _post_env(reader, writer, pid, f"load-{n}")
            lat.append(time.perf_counter() - start)
            done += 1
            errors += not head.startswith(b"HTTP/1.1 200")
        writer.close()
        return done, errors, lat

    async def main() -> list[tuple[int, int, list[float]]]:
        return await asyncio.gather(*(conn(n) for n in range(connections)))

    parts = asyncio.run(main())
    return (sum(p[0] for p in parts), sum(p[1] for p in parts),
            [x for p in parts for x in p[2]])


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(quick: bool) -> list[Row]:  # noqa: PLR0915 - one linear script of measurements
    import requests

    from tests.support.ports import free_port

    rows: list[Row] = []
    work = Path(tempfile.mkdtemp(prefix="rtenv-bench-agent-"))
    os.environ["RTENV_HOME"] = str(work / "home")
    try:
        # -- create: rtenv cold / warm ---------------------------------------------------------
        cold_s, venv = _rtenv_create(work / "home", ["six==1.16.0"])
        rtenv_bytes = dir_size(venv)
        warm_root = work / "home2"
        (warm_root / "store").mkdir(parents=True)
        shutil.copytree(work / "home" / "store" / "uv-cache", warm_root / "store" / "uv-cache",
                        symlinks=True)
        warm_s, _ = _rtenv_create(warm_root, ["six==1.16.0"])
        ray_pip_s, ray_pip_bytes, pip_err = _ray_create("pip", ["six==1.16.0"])
        ray_uv_s, ray_uv_bytes, uv_err = _ray_create("uv", ["six==1.16.0"])
        rows += [
            Row(B, "create six (cold) vs Ray pip plugin", "s", cold_s, ray_pip_s,
                ">= 5x faster than Ray's pip plugin", ray_pip_s >= 5 * cold_s and not pip_err,
                "rtenv: empty store + empty uv cache; Ray: fresh head, agent "
                "/get_or_create_runtime_env" + (f"; Ray error: {pip_err}" if pip_err else "")),
            Row(B, "create six (cold) vs Ray uv plugin", "s", cold_s, ray_uv_s, "faster",
                ray_uv_s > cold_s and not uv_err, uv_err),
            Row(B, "create six (warm uv cache) vs Ray pip plugin", "s", warm_s, ray_pip_s,
                ">= 5x faster than Ray's pip plugin", ray_pip_s >= 5 * warm_s and not pip_err),
            Row(B, "env size on disk vs Ray pip plugin", "MB", rtenv_bytes / 1e6,
                ray_pip_bytes / 1e6, ">= 10x smaller", ray_pip_bytes >= 10 * rtenv_bytes,
                "the blocks the venv takes (store.files.dir_size: du -s --block-size=1, each "
                "inode once); Ray clones its base venv"),
            Row(B, "env size on disk vs Ray uv plugin", "MB", rtenv_bytes / 1e6,
                ray_uv_bytes / 1e6, ">= 10x smaller", ray_uv_bytes >= 10 * rtenv_bytes),
        ]

        # -- cache-hit latency -----------------------------------------------------------------
        from rtenv_cli.core.store.envs import Environments
        from rtenv_cli.core.store.store import Store

        envs = Environments(Store(work / "home" / "store"))
        lat = []
        for i in range(200 if quick else 1000):
            start = time.perf_counter()
            h = envs.get_or_create({"pip": ["six==1.16.0"]}, holder=f"p{i}")
            lat.append(time.perf_counter() - start)
            envs.release(h.key, f"p{i}")
        rows.append(Row(B, "cache-hit get-or-create, in process, p99", "ms",
                        _pct(lat, 0.99) * 1e3, None, "< 10 ms", _pct(lat, 0.99) < 0.010,
                        f"p50 {statistics.median(lat) * 1e3:.2f} ms, {len(lat)} calls"))

        port = free_port()
        agent = _agent(work / "home" / "store", port)
        try:
            url = f"http://127.0.0.1:{port}/api/envs"
            body = {"runtime_env": {"pip": ["six==1.16.0"]}, "pid": os.getpid()}
            requests.post(url, json={**body, "holder": "warmup"}, timeout=60).raise_for_status()
            per_client = 50 if quick else HITS_PER_CONNECTION
            rows += _connection_rows(port, per_client, "1 agent process")
            for clients in (1, 2, 4, 8):
                # clients are separate processes, as `rtenv run`s or raylets would be
                with ProcessPoolExecutor(clients) as pool:
                    parts = pool.map(_hit_client, [(port, os.getpid(), f"c{clients}-{n}",
                                                    per_client) for n in range(clients)])
                    hits = [x for part in parts for x in part]
                p50, p99 = statistics.median(hits), _pct(hits, 0.99)
                rows.append(Row(B, f"cache-hit get-or-create over HTTP, {clients} spinning "
                                "client process(es), p99", "ms", p99 * 1e3, None, "", None,
                                f"p50 {p50 * 1e3:.2f} ms, {len(hits)} requests; each client "
                                f"loops without pause, so {clients} + 1 processes share 2 cores "
                                "and the agent gets a fraction of one (scheduler, not agent, "
                                f"latency); load average {os.getloadavg()[0]:.1f}"))
        finally:
            _stop(agent)

        # -- ablation: the same hits with every create going through Starlette's route ---------
        port = free_port()
        agent = _agent(work / "home" / "store", port,
                       prelude="import rtenv_cli.core.agent.hits as m; m.HIT_PATH = False")
        try:
            with_path = {r.metric: r.rtenv for r in rows}
            for conns in (1, 4, 16):
                hits = _hit_connections(port, os.getpid(), conns, per_client)
                p99 = _pct(hits, 0.99) * 1e3
                base = with_path[f"cache-hit get-or-create over HTTP, 1 agent process, {conns} "
                                 "concurrent connection(s), p99"]
                rows.append(Row(B, f"ablation: cache-hit p99 without the hit path, {conns} "
                                "connection(s)", "ms", p99, None,
                                f"slower than {base:.2f} ms (with it)", p99 > base,
                                f"p50 {statistics.median(hits) * 1e3:.2f} ms; every create "
                                "through Starlette's route and its own SQLite commit"))
        finally:
            _stop(agent)

        # -- steady load: the highest rate this box sustains, for a minute --------------------
        port = free_port()
        root = work / "home" / "store"
        agent = _agent(root, port)
        try:
            requests.post(f"http://127.0.0.1:{port}/api/envs", timeout=60, json={
                "runtime_env": {"pip": ["six==1.16.0"]}, "pid": os.getpid(),
                "holder": "warmup"}).raise_for_status()
            rss_start = _rss_mib(agent.pid)
            seconds = 5.0 if quick else 60.0
            count, errors, lat = _steady_load(port, os.getpid(), seconds)
            rss_end = _rss_mib(agent.pid)
            wal = root / "index.sqlite-wal"
            wal_mib = wal.stat().st_size / 2**20 if wal.exists() else 0.0
            index_mib = (root / "index.sqlite").stat().st_size / 2**20
            rows.append(Row(B, f"steady load {seconds:.0f} s at 16 connections: errors",
                            "requests", float(errors), None, "0", errors == 0,
                            f"{count} requests, {count / seconds:.0f}/s; p99 "
                            f"{_pct(lat, 0.99) * 1e3:.2f} ms, p50 "
                            f"{statistics.median(lat) * 1e3:.2f} ms"))
            rows.append(Row(B, "steady load: agent RSS at the end", "MiB", round(rss_end, 1),
                            None, "flat (within 20% of the start)", rss_end <= 1.2 * rss_start,
                            f"{rss_start:.1f} MiB at the start"))
            rows.append(Row(B, "steady load: index and WAL size at the end", "MiB",
                            round(index_mib + wal_mib, 1), None, "< 100 MiB (bounded)",
                            index_mib + wal_mib < 100,
                            f"index.sqlite {index_mib:.1f} MiB, WAL {wal_mib:.1f} MiB"))
        finally:
            _stop(agent)

        port = free_port()
        agent = _agent(work / "home" / "store", port, "--workers", "2")
        try:
            rows += _connection_rows(
                port, 50 if quick else HITS_PER_CONNECTION, "--workers 2",
                note="; 2 agent processes and the load generator share this box's 2 cores")
        finally:
            _stop(agent)

        # -- 100 concurrent identical creates: one build --------------------------------------
        port = free_port()
        agent = _agent(work / "concurrent", port)
        try:
            url = f"http://127.0.0.1:{port}/api/envs"

            def create(i: int) -> bool:
                resp = requests.post(url, json={"runtime_env": {"uv": ["six==1.17.0"]},
                                                "holder": f"h{i}"}, timeout=300)
                resp.raise_for_status()
                return bool(resp.json()["built"])

            start = time.perf_counter()
            with ThreadPoolExecutor(100) as pool:
                built = list(pool.map(create, range(100)))
            wall = time.perf_counter() - start
            builds = sum(built)
            rows.append(Row(B, "100 concurrent identical creates: builds", "builds",
                            float(builds), 1.0, "exactly 1", builds == 1,
                            f"wall {wall:.2f} s; Ray's agent also builds once (research: 10 "
                            "concurrent tasks -> 1 install)"))
        finally:
            _stop(agent)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows
