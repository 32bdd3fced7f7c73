"""Only the agent's cache-hit rows, interleaved across checkouts: for work on the hit path.

    python -m benchmarks.agent_hits                          # this checkout, 1 and 2 workers
    python -m benchmarks.agent_hits --tree ../main --tree .  # before/after, turn by turn
    python -m benchmarks.agent_hits --workers 2 --connections 8 16 --rounds 5

The full agent benchmark (`python -m benchmarks.run agent`) also times Ray's plugins and takes
minutes; this starts the agent as it does (`bench_agent._agent`, each checkout's code through
PYTHONPATH) and calls its load generator (`bench_agent._hit_connections`). A box shared with
other work is noisy: compare checkouts in the same run, over several rounds, and read the
medians. Nothing is written to benchmarks/results.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from pathlib import Path

from benchmarks import bench_agent


def _one(tree: Path, store: Path, workers: int, connections: list[int], per_conn: int
         ) -> dict[int, tuple[float, float]]:
    import requests

    from tests.support.ports import free_port

    copy = store.parent / "run"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(store, copy, symlinks=True)  # each run starts from the same index
    os.environ["PYTHONPATH"] = str(tree)
    port = free_port()
    extra = ("--workers", str(workers)) if workers > 1 else ()
    agent = bench_agent._agent(copy, port, *extra)
    try:
        requests.post(f"http://127.0.0.1:{port}/api/envs", timeout=60, json={
            "runtime_env": {"pip": ["six==1.16.0"]}, "pid": os.getpid(),
            "holder": "warmup"}).raise_for_status()
        out = {}
        for conns in connections:
            hits = bench_agent._hit_connections(port, os.getpid(), conns, per_conn)
            out[conns] = (statistics.median(hits) * 1e3, bench_agent._pct(hits, 0.99) * 1e3)
        return out
    finally:
        bench_agent._stop(agent)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", type=Path,
                        help="a checkout whose rtenv_cli the agent runs (repeatable)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-connection", type=int, default=bench_agent.HITS_PER_CONNECTION)
    args = parser.parse_args(argv)
    trees = [t.resolve() for t in args.tree or [Path(__file__).resolve().parent.parent]]
    work = Path(tempfile.mkdtemp(prefix="rtenv-bench-hits-"))
    os.environ["RTENV_HOME"] = str(work / "home")
    here = Path.cwd()
    os.chdir(work)  # `python -m rtenv_cli` puts its cwd before PYTHONPATH: not a checkout's
    results: dict[tuple[Path, int, int], list[tuple[float, float]]] = {}
    try:
        bench_agent._rtenv_create(work / "home", ["six==1.16.0"])  # the environment hits find
        for n in range(args.rounds):
            for workers in args.workers:
                for tree in trees:
                    got = _one(tree, work / "home" / "store", workers, args.connections,
                               args.per_connection)
                    for conns, (p50, p99) in got.items():
                        results.setdefault((tree, workers, conns), []).append((p50, p99))
                        print(f"round {n} {tree.name} workers={workers} c={conns:<2} "
                              f"p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  "
                              f"load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        os.chdir(here)
        shutil.rmtree(work, ignore_errors=True)
    print("\nmedian over rounds")
    for (tree, workers, conns), runs in results.items():
        p99s = [p99 for _p50, p99 in runs]
        print(f"{tree.name} workers={workers} c={conns:<2} "
              f"p50 {statistics.median(p50 for p50, _p99 in runs):6.2f} ms  "
              f"p99 {statistics.median(p99s):6.2f} ms  (each: "
              f"{', '.join(f'{x:.1f}' for x in p99s)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
