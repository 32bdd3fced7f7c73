"""Shared benchmark helpers: machine description, process timing, peak RSS, result rows."""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).parent / "results"


@dataclass
class Row:
    """One measured quantity, rtenv beside Ray, and the issue's target."""

    benchmark: str
    metric: str
    unit: str
    rtenv: float | None
    ray: float | None = None
    target: str = ""  # human-readable, e.g. "< 0.3 s and >= 3x faster than Ray"
    passed: bool | None = None
    notes: str = ""

    @property
    def ratio(self) -> float | None:
        if self.rtenv and self.ray:
            return self.ray / self.rtenv
        return None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ratio"] = self.ratio
        return data


KEPT = " [kept from the run of "


def kept_rows(benchmark: str, skip: Callable[[str], bool]) -> list[Row]:
    """The rows of benchmark's last results file whose metric SKIP does not name (a run that
    measured only some rows keeps the others), each note ending with the run it was measured
    in: a row kept before keeps its own run's date, not that of the file that carried it."""
    path = RESULTS_DIR / f"{benchmark}.json"
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    rows = []
    for r in data["rows"]:
        if skip(r["metric"]):
            continue
        text, _, kept = r["notes"].partition(KEPT)
        when = kept.removesuffix("]") or data["measured_at"]
        rows.append(Row(benchmark, r["metric"], r["unit"], r["rtenv"], r["ray"], r["target"],
                        r["passed"], f"{text}{KEPT}{when}]"))
    return rows


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_gib, 1),
        "python": platform.python_version(), "platform": platform.platform(),
    }


def time_process(argv: list[str], *, repeat: int = 7, env: dict[str, str] | None = None,
                 cwd: str | None = None, warmup: int = 1) -> dict[str, float]:
    """Wall time of a whole process (median, min, max over `repeat` runs after warm-up)."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    times = []
    for i in range(warmup + repeat):
        start = time.perf_counter()
        subprocess.run(argv, env=full_env, cwd=cwd, check=False, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return {"median": statistics.median(times), "min": min(times), "max": max(times)}


def bytecode_env() -> dict[str, str]:
    """Children import from cached bytecode, as on a normal install (pip compiles on install);
    this machine's shell sets PYTHONDONTWRITEBYTECODE=1, which would make every child process of
    rtenv and Ray alike compile its imports again."""
    import tempfile

    return {"PYTHONDONTWRITEBYTECODE": "",
            "PYTHONPYCACHEPREFIX": os.path.join(tempfile.gettempdir(), "rtenv-bench-pyc")}


def run_measured(argv: list[str], *, env: dict[str, str] | None = None,
                 cwd: str | None = None) -> dict[str, Any]:
    """Run one child process; return wall time, its CPU time (user + sys, `cpu_s`), its peak
    RSS (MiB) and its stdout."""
    full_env = {**os.environ, **bytecode_env()}
    if env:
        full_env.update(env)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=full_env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _pid, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    out = proc.stdout.read() if proc.stdout else ""
    err = proc.stderr.read() if proc.stderr else ""
    return {"seconds": elapsed, "peak_rss_mib": usage.ru_maxrss / 1024,
            "cpu_s": usage.ru_utime + usage.ru_stime,  # with its waited-for children's
            "returncode": os.waitstatus_to_exitcode(status), "stdout": out, "stderr": err}


def python() -> str:
    return sys.executable


def self_peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def ray_put_floor(dashboard_url: str, package: Path, repeat: int = 3) -> float:
    """Median seconds for a Ray dashboard to take one PUT of `package` under a fresh name: the
    server-side floor of any whole-zip push of that package (rtenv's and Ray's alike)."""
    import requests

    times = []
    for _ in range(repeat):
        name = f"_ray_pkg_{os.urandom(8).hex()}.zip"
        with package.open("rb") as fh:
            start = time.perf_counter()
            resp = requests.put(f"{dashboard_url}/api/packages/gcs/{name}", data=fh, timeout=600)
            times.append(time.perf_counter() - start)
        resp.raise_for_status()
    return statistics.median(times)


def ray_gcs_put_floor(gcs_address: str, package: Path, repeat: int = 3) -> float:
    """Median seconds for the GCS to take one KV put of `package` through Ray's own client
    (`_internal_kv_put`, as `ray.init` uploads): the floor of any push to the GCS address."""
    from ray._raylet import GcsClient
    from ray.experimental.internal_kv import _initialize_internal_kv, _internal_kv_put

    _initialize_internal_kv(GcsClient(address=gcs_address))
    data = package.read_bytes()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        _internal_kv_put(f"gcs://_ray_pkg_{os.urandom(8).hex()}.zip", data)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# Ray's driver path (`ray.init(runtime_env={"working_dir": ...})`): hash, zip, one GCS put.
# argv: GCS address, directory. Timed from after the GCS client exists, like RAY_PUSH.
RAY_DRIVER_PUSH = """
import json, sys, time, tempfile, logging
logging.disable(logging.WARNING)
from ray._raylet import GcsClient
from ray.experimental.internal_kv import _initialize_internal_kv
from ray._private.runtime_env.working_dir import upload_working_dir_if_needed
_initialize_internal_kv(GcsClient(address=sys.argv[1]))
env = {"working_dir": sys.argv[2]}
if len(sys.argv) > 3:
    env["excludes"] = sys.argv[3:]
t0 = time.perf_counter()
env = upload_working_dir_if_needed(env, include_gitignore=True, scratch_dir=tempfile.mkdtemp())
print(json.dumps({"uri": env["working_dir"], "total": time.perf_counter() - t0}))
"""
