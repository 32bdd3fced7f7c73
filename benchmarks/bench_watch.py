"""`rtenv push --watch` vs Ray's own re-push, one-file edit on a 10,000-file / 200 MB tree.

- to a real `rtenv agent` on loopback (delta protocol): time from the save (a write, closed) to
  the new package being published (the watcher's JSON event line, printed after the agent
  committed it) and bytes sent, over the full 200 MB tree; target p50 < 100 ms;
- to a real Ray head whose runtime-env agent loads rtenv's plugin: the tree path (the changed
  file and a manifest of changes into the GCS KV, `--via auto`), and the zip path (`--via zip`:
  whole zip, cached compressed entries, streamed PUT) beside Ray's
  `JobSubmissionClient._upload_working_dir_if_needed` (full hash + zip + PUT) for the same edit;
  both on the tree minus `data/` (83 MB): the dashboard refuses bodies over 100 MiB; target
  p50 < 150 ms to the cluster;
- idle CPU of the watcher process while nothing changes (utime+stime from /proc over a window);
- an `ablation:` row per fast path of the agent route, the same edits with it switched off in
  the watcher or the agent (`prelude`): the save's delta worked out from the whole tree's
  manifest (watch/delta.py INCREMENTAL), blobs and manifest in two requests (ONE_REQUEST), the
  agent hashing and encoding every row of the package (store/delta.py IN_PLACE), a save's blob
  synced with the whole file system (store/blobs.py FEW_BLOBS).

RTENV_BENCH_WATCH=agent runs the agent rows only (a few minutes); the Ray rows of the last full
run are then kept in the results file as they were, their notes saying so.

The tree has bench_push's shape: 9,500 text files of 0.3-8 KB, 440 random files of
40-160 KB, 60 random files of about 1.9 MB, 413 directories.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from queue import Empty, Queue
from typing import Any

from benchmarks.common import (
    RAY_DRIVER_PUSH,
    Row,
    bytecode_env,
    kept_rows,
    ray_gcs_put_floor,
    ray_put_floor,
    run_measured,
)

B = "watch"
_TICKS = os.sysconf("SC_CLK_TCK")


def make_tree(root: Path, *, files: int = 10_000, scale: float = 1.0) -> int:
    """Deterministic tree; returns total bytes."""
    rng = random.Random(20261123)
    total = 0
    words = [f"word{i}" for i in range(500)]
    n_text, n_mid = int(files * 0.95), int(files * 0.044)
    n_big = files - n_text - n_mid
    for i in range(n_text):
        d = root / "src" / f"pkg{i % 350:03d}"
        d.mkdir(parents=True, exist_ok=True)
        size = rng.randint(300, 8000)
        text = (" ".join(rng.choices(words, k=size // 5)) + "\n").encode()[:size]
        (d / f"mod_{i}.py").write_bytes(text)
        total += len(text)
    for i in range(n_mid):
        d = root / "assets" / f"a{i % 50:02d}"
        d.mkdir(parents=True, exist_ok=True)
        data = rng.randbytes(int(rng.randint(40_000, 160_000) * scale))
        (d / f"blob_{i}.bin").write_bytes(data)
        total += len(data)
    for i in range(n_big):
        d = root / "data" / f"shard{i % 12:02d}"
        d.mkdir(parents=True, exist_ok=True)
        data = rng.randbytes(int(1_950_000 * scale))
        (d / f"weights_{i}.bin").write_bytes(data)
        total += len(data)
    return total


class Watcher:
    """`rtenv push --watch ... --format json` as a child process; JSON lines on a queue."""

    def __init__(self, path: Path, address: str, home: Path, via: str = "auto",
                 prelude: str = "") -> None:
        """`prelude` (Python) runs first, e.g. to switch off a fast path for an ablation row."""
        env = dict(os.environ, RTENV_HOME=str(home), RAY_USAGE_STATS_ENABLED="0",
                   **bytecode_env())
        args = ["push", "--watch", str(path), "--format", "json", "--address", address,
                "--via", via]
        self.proc = subprocess.Popen(
            _argv(args, prelude), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
        self.lines: Queue[tuple[float, dict[str, Any]]] = Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put((time.perf_counter(), json.loads(line)))

    def next(self, timeout: float = 300) -> tuple[float, dict[str, Any]]:
        try:
            return self.lines.get(timeout=timeout)
        except Empty:
            err = self.proc.stderr.read() if self.proc.poll() is not None else ""  # type: ignore[union-attr]
            raise RuntimeError(f"no push event within {timeout} s {err}") from None

    def cpu_seconds(self) -> float:
        return _cpu(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def _argv(args: list[str], prelude: str) -> list[str]:
    if not prelude:
        return [sys.executable, "-m", "rtenv_cli", *args]
    return [sys.executable, "-c", f"{prelude}\nfrom rtenv_cli.cli.main import main\n"
            f"main({args!r})"]


def _agent(root: Path, port: int, prelude: str = "") -> subprocess.Popen[bytes]:
    """`rtenv agent` on `root` (`prelude`: as for Watcher)."""
    from tests.support.ports import wait_for_port

    proc = subprocess.Popen(_argv(["agent", "--port", str(port), "--root", str(root),
                                   "--no-token"], prelude), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_port(port, timeout=60)
    return proc


def _stop_agent(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)


# (metric, the watcher's prelude, the agent's prelude, what is off)
ABLATIONS = (
    ("ablation: agent save -> published p50, the delta from the tree's whole manifest",
     "import rtenv_cli.core.watch.delta as m; m.INCREMENTAL = False", "",
     "the watcher works out each save's manifest over every file and compares it with the "
     "last one (watch/delta.py INCREMENTAL off)"),
    ("ablation: agent save -> published p50, blobs and manifest in two requests",
     "import rtenv_cli.core.watch.delta as m; m.ONE_REQUEST = False", "",
     "the watcher sends the blob (POST /api/blobs), then the manifest (POST "
     "/api/manifests/commit): two round trips and two hops to the agent's worker threads "
     "(watch/delta.py ONE_REQUEST off)"),
    ("ablation: agent save -> published p50, every row hashed and encoded by the agent", "",
     "import rtenv_cli.core.store.delta as m; m.IN_PLACE = False",
     "the agent copies and sorts the package's rows, XORs every digest and encodes every row "
     "(store/delta.py IN_PLACE off)"),
    ("ablation: agent save -> published p50, a save's blob synced with the file system", "",
     "import rtenv_cli.core.store.blobs as m; m.FEW_BLOBS = 0",
     "the agent makes a save's blob durable by syncfs, as a first push's thousands "
     "(store/blobs.py FEW_BLOBS 0)"),
)


def _cpu(pid: int) -> float:
    """utime+stime of a process so far, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _watch_edits(store: Path, tree: Path, home: Path, n: int, first: int, *,
                 client: str = "", server: str = "", idle_s: float = 0
                 ) -> tuple[list[float], list[dict[str, Any]], dict[str, Any], float, float]:
    """An agent on `store` and a watcher of `tree` (their preludes `server`, `client`): `n`
    edits numbered from `first`; (times, events, the initial push's event, CPU seconds per
    edit of both processes, the watcher's idle CPU share over `idle_s`)."""
    from tests.support.ports import free_port

    port = free_port()
    agent = _agent(store, port, server)
    try:
        w = Watcher(tree, f"http://127.0.0.1:{port}", home, prelude=client)
        try:
            _t, initial = w.next()
            cpu0 = _cpu(agent.pid) + w.cpu_seconds()
            times, events = _measure_edits(w, tree, n, first)
            cpu = (_cpu(agent.pid) + w.cpu_seconds() - cpu0) / max(n, 1)
            idle = _idle_cpu(w, idle_s) if idle_s else 0.0
        finally:
            w.stop()
    finally:
        _stop_agent(agent)
    return times, events, initial, cpu, idle


def _agent_rows(work: Path, tree: Path, *, files: int, total: int, n_edits: int,
                idle_s: float) -> list[Row]:
    """The agent rows: the watch with every fast path, its ablations (one agent and watcher
    each, on the same store: their initial push sends no blob), the client's share. On a
    shared box the wall times are noisy: each row also says the CPU time both processes
    spent per edit, and an ablation passes when it costs more time or more CPU."""
    store = work / "agent-store"
    # the first push fills the store (and its index: SQLite checkpoints after it); then each
    # configuration starts from that store, with the same kind of work before its edits
    _t, _e, first, _c, idle = _watch_edits(store, tree, work / "home-first", 0, 0,
                                           idle_s=idle_s)
    times, events, _first, cpu, _idle = _watch_edits(store, tree, work / "home", n_edits, 0)
    sent = statistics.median(e["bytes_sent"] for e in events)
    p50 = statistics.median(times)
    load = f"; load average {os.getloadavg()[0]:.1f}"
    rows = [
        Row(B, f"agent: save -> published p50 ({files} files, {total / 1e6:.0f} MB)",
            "s", p50, None, "< 0.1 s", p50 < 0.1,
            f"p90 {_pct(times, 0.9):.3f} s over {n_edits} edits, from the write to the "
            "push event; the save's close ends the wait (no quiet period); one request "
            "with the blob and a manifest of changes worked out from the paths the save "
            "touched; the agent commits from the base's hash and stored rows; agent + "
            f"watcher CPU {cpu * 1e3:.1f} ms per edit; initial push "
            f"{first['elapsed_ms'] / 1000:.2f} s" + load),
        Row(B, "agent: bytes sent per one-file edit", "bytes", sent, total,
            "< 1% of package bytes", sent < 0.01 * total,
            f"{100 * sent / total:.3f}% of {total} B (the changed manifest entries + 1 blob)"),
        Row(B, "watcher idle CPU (no changes)", "% of a core", 100 * idle, None, "< 2%",
            idle < 0.02, f"utime+stime over {idle_s:.0f} s, rtenv's inotify watcher"),
    ]
    for k, (metric, client, server, what) in enumerate(ABLATIONS):
        off, _events, _first, cpu_off, _idle = _watch_edits(
            store, tree, work / f"home-{k}", n_edits, 1000 * (k + 2), client=client,
            server=server)
        q50 = statistics.median(off)
        rows.append(Row(B, metric, "s", q50, None,
                        f"slower than {p50:.3f} s or more CPU than {cpu * 1e3:.1f} ms per "
                        "edit (with it)", q50 > p50 or cpu_off > cpu,
                        f"p90 {_pct(off, 0.9):.3f} s over {n_edits} edits; agent + watcher "
                        f"CPU {cpu_off * 1e3:.1f} ms per edit; {what}" + load))
    client = _client_share(tree, n_edits)
    rows.append(Row(B, "agent: client-side work per edit p50 (confirm, URI, manifest, blob)",
                    "s", statistics.median(client), None, "", None,
                    "server calls answered in memory; the rest of the agent latency above is "
                    "the HTTP call and the agent's commit (the blob and the manifest written "
                    "and synced; no zip built)"))
    return rows


def _kept_rows(metrics: set[str]) -> list[Row]:
    """The rows of the last results file but `metrics` (RTENV_BENCH_WATCH=agent)."""
    return kept_rows(B, lambda m: m in metrics or m.startswith(
        ("agent", "ablation: agent", "watcher idle")))


def _edit(root: Path, i: int) -> Path:
    path = root / "src" / "pkg007" / "mod_7.py"
    path.write_text(f"# edit {i}\nVALUE = {i}\n" + "x = 1\n" * 500)
    return path


def _measure_edits(w: Watcher, root: Path, n: int, first: int = 0
                   ) -> tuple[list[float], list[dict[str, Any]]]:
    """`n` edits numbered from `first`: every run needs its own numbers, or a later run's
    packages already exist on the target and nothing is uploaded."""
    times, events = [], []
    for i in range(first, first + n):
        start = time.perf_counter()
        _edit(root, i)
        t, ev = w.next()
        times.append(t - start)
        events.append(ev)
        time.sleep(0.3)  # let the watcher settle so edits do not coalesce across samples
    return times, events


def _vs_ray(metric: str, times: list[float], theirs: float, notes: str) -> Row:
    """A save -> published row to a Ray head, against Ray's own re-push of the same edit."""
    p50 = statistics.median(times)
    return Row(B, metric, "s", p50, theirs, "< 0.15 s and >= 10x faster than Ray's re-push",
               p50 < 0.15 and theirs / p50 >= 10,
               f"p90 {_pct(times, 0.9):.3f} s over {len(times)} edits, from the write to the "
               "push event" + notes)


def _wait_plugin(address: str, timeout: float = 120) -> None:
    """Until the head's runtime-env agent announced rtenv's plugin (the tree path's condition)."""
    from rtenv_cli.core.transport.ray_kv import RayKV
    from rtenv_cli.core.trees.cluster import readiness

    kv = RayKV.connect(address, env={})
    deadline = time.monotonic() + timeout
    try:
        while not readiness(kv).ok:
            if time.monotonic() > deadline:
                raise RuntimeError(readiness(kv).why_not())
            time.sleep(0.2)
    finally:
        kv.close()


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def _idle_cpu(w: Watcher, seconds: float) -> float:
    before, t0 = w.cpu_seconds(), time.perf_counter()
    time.sleep(seconds)
    return (w.cpu_seconds() - before) / (time.perf_counter() - t0)


def _ray_repush(dashboard: str, root: Path, n: int) -> tuple[list[float], int]:
    """Ray's own path for each edit: JobSubmissionClient hash + zip + PUT of the whole package."""
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(dashboard)
    times, size = [], 0
    for i in range(n):
        _edit(root, 1000 + i)
        env = {"working_dir": str(root), "excludes": ["data"]}
        start = time.perf_counter()
        client._upload_working_dir_if_needed(env)
        times.append(time.perf_counter() - start)
        size = 0
    return times, size


def child_json(code: str, *args: str) -> dict[str, Any]:
    """Run `code` in a fresh interpreter the way every benchmark child runs; its last line."""
    res = run_measured([sys.executable, "-c", code, *args], env={"RAY_USAGE_STATS_ENABLED": "0"})
    if res["returncode"] != 0:
        raise RuntimeError(res["stderr"][-3000:])
    return dict(json.loads(res["stdout"].strip().splitlines()[-1]))


def _client_share(tree: Path, n: int) -> list[float]:
    """Client-side cost of one edit as `push --watch` pays it after the first push (stat/digest
    confirm, URI, manifest of changes, blob read, JSON), with the server calls answered in
    memory."""
    from rtenv_cli.core.watch.publish import DeltaPublisher
    from rtenv_cli.core.watch.snapshot import Snapshot
    from rtenv_cli.core.watch.sources import Source

    class Memory:
        def __init__(self) -> None:
            self.have: set[str] = set()

        def missing_blobs(self, manifest: dict[str, Any]) -> list[str]:
            return [e["sha256"] for e in manifest["entries"]
                    if e["sha256"] and e["sha256"] not in self.have]

        def put_blobs(self, blobs: list[tuple[str, Path]]) -> None:
            for sha, path in blobs:
                path.read_bytes()
                self.have.add(sha)

        def commit_manifest(self, manifest: dict[str, Any]) -> dict[str, Any]:
            json.dumps(manifest)  # what requests would serialise
            return {"uri": manifest["uri"]}

        def publish(self, manifest: dict[str, Any], blobs: list[tuple[str, Path]]
                    ) -> dict[str, Any]:
            self.put_blobs(blobs)
            return self.commit_manifest(manifest)

    snap = Snapshot(tree)
    snap.full_scan()
    src = Source("working_dir", snap)
    publisher = DeltaPublisher(Memory())  # type: ignore[arg-type]
    publisher.push(src)
    times = []
    for i in range(n):
        path = _edit(tree, 5000 + i)
        start = time.perf_counter()
        snap.update([str(path)])
        publisher.push(src)
        times.append(time.perf_counter() - start)
    return times


def run(quick: bool) -> list[Row]:
    from tests.support.ray_head import ray_head

    work = Path(tempfile.mkdtemp(prefix="rtenv-bench-watch-"))
    files, scale = (2_000, 0.2) if quick else (10_000, 1.0)
    n_edits = 5 if quick else 15
    idle_s = 5.0 if quick else 20.0
    rows: list[Row] = []
    try:
        tree = work / "tree"
        total = make_tree(tree, files=files, scale=scale)
        # -- rtenv agent, delta protocol, full tree --------------------------------------------
        rows += _agent_rows(work, tree, files=files, total=total, n_edits=n_edits,
                            idle_s=idle_s)
        if os.environ.get("RTENV_BENCH_WATCH") == "agent":
            return rows + _kept_rows({r.metric for r in rows})
        # -- Ray head: whole zips, tree minus data/ (under the 100 MiB HTTP limit) --------------
        env_file = work / "runtime_env.yaml"
        env_file.write_text(f"working_dir: {tree}\nexcludes: [data]\n")
        from rtenv_cli.core.rayplugin.setup import ray_env_vars

        plugin_env = {**ray_env_vars(root=work / "node-home"),
                      "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        with ray_head(env=plugin_env) as head:
            _wait_plugin(head.address)
            times: dict[str, list[float]] = {}
            sent_by: dict[str, float] = {}
            for k, (via, address, path) in enumerate((
                    ("tree", head.address, "auto"), ("gcs", head.address, "zip"),
                    ("dashboard-tree", head.dashboard_url, "auto"),
                    ("dashboard", head.dashboard_url, "zip"))):
                w = Watcher(env_file, address, work / f"home-ray-{via}", path)
                try:
                    _t, start = w.next()
                    assert start["uri"].startswith("rtenv-tree://" if path == "auto"
                                                   else "gcs://"), (via, start)
                    times[via], r_events = _measure_edits(w, tree, n_edits, 100 * (k + 1))
                    assert all(e["bytes_sent"] > 0 for e in r_events), r_events
                    sent_by[via] = statistics.median(e["bytes_sent"] for e in r_events)
                finally:
                    w.stop()
            ray_times, _ = _ray_repush(head.dashboard_url, tree, max(2, n_edits // 3))
            drv_times = []
            for i in range(max(2, n_edits // 3)):
                _edit(tree, 2000 + i)
                drv_times.append(child_json(RAY_DRIVER_PUSH, head.address, str(tree),
                                            "data")["total"])
            from rtenv_cli.core.packaging.build import build_package

            package = build_package(tree, kind="working_dir", excludes=["data"], env={},
                                    dest_dir=work / "floor", use_cache=False)
            floor = ray_put_floor(head.dashboard_url, package.path)
            gcs_floor = ray_gcs_put_floor(head.address, package.path)
        ours, theirs = statistics.median(times["gcs"]), statistics.median(ray_times)
        via_dash, drv = statistics.median(times["dashboard"]), statistics.median(drv_times)
        zip_sent = sent_by["gcs"]
        rows += [
            _vs_ray("Ray head (GCS address, plugin loaded): save -> published p50, tree path",
                    times["tree"], theirs,
                    f"; {sent_by['tree']:.0f} B sent per edit (the file, its pack's index, a "
                    "manifest of changes) into the GCS KV; the head's runtime-env agent loads "
                    "rtenv's plugin, so `push --watch` takes the tree path as `rtenv push` "
                    "does. Ray: job-submit re-push (hash x2 + zip + dashboard PUT)"),
            _vs_ray("Ray head (GCS address, --via zip): save -> published p50, zip path",
                    times["gcs"], theirs,
                    f". Whole zip {zip_sent / 1e6:.1f} MB streamed to the GCS in one gRPC put "
                    "(Ray's gcs:// API takes whole zips), unchanged members copied as byte "
                    "ranges, published at the save's close (no quiet period). Ray: job-submit "
                    "re-push (hash x2 + zip + dashboard PUT); Ray's driver path (ray.init, GCS) "
                    f"{drv:.2f} s = {drv / ours:.1f}x"),
            _vs_ray("Ray head (dashboard URL, plugin loaded): save -> published p50, tree path",
                    times["dashboard-tree"], theirs,
                    f"; {sent_by['dashboard-tree']:.0f} B sent per edit: the dashboard names "
                    "its cluster's GCS and the watch publishes there, as to a GCS address"),
            Row(B, "Ray head (dashboard URL, --via zip): one-file edit -> new package uploaded "
                "(p50)", "s", via_dash, theirs, "", None,
                "the zip path through Ray's /api/packages PUT"),
            Row(B, "Ray head: the dashboard taking one PUT of that package", "s",
                floor, theirs, "", None,
                f"floor of any push through the dashboard: at best {theirs / floor:.1f}x"),
            Row(B, "Ray head: the GCS taking one KV put of that package (Ray's client)", "s",
                gcs_floor, theirs, "", None,
                "one put of that package through Ray's own client, measured after the edits "
                "above (the GCS takes puts more slowly as it holds more packages); rtenv's "
                "watch overlaps its put with the quiet period"),
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows
