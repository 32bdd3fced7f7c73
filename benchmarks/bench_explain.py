"""`rtenv explain` as a process vs asking Ray: a driver that runs one task and reads its env.

Both answer "what CUDA_VISIBLE_DEVICES / OMP_NUM_THREADS does a 1-GPU task get"; the Ray side
needs a running head (started here, with 8 fake GPUs) and a fresh driver + worker each time.

Both sides import from cached bytecode (`common.bytecode_env`), as on a normal install: this
machine's shell sets PYTHONDONTWRITEBYTECODE=1, which would make every run compile rtenv's modules
again (about 0.1 s) and measure the compiler.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from benchmarks.common import Row, bytecode_env, time_process

TARGET = 0.3

RAY_PROBE = (
    "import os, sys, ray\n"
    "ray.init(address=sys.argv[1], log_to_driver=False)\n"
    "@ray.remote(num_gpus=1)\n"
    "def f():\n"
    "    return {k: os.environ.get(k) for k in ('CUDA_VISIBLE_DEVICES', 'OMP_NUM_THREADS')}\n"
    "print(ray.get(f.remote()))\n"
)


def cpu_time(argv: list[str], repeat: int, env: dict[str, str]) -> float:
    """Median user+sys CPU seconds of the child: steadier than wall time on a shared box."""
    import resource
    import statistics
    import subprocess

    samples = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(argv, env={**os.environ, **env}, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        samples.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(samples)


def run(quick: bool) -> list[Row]:
    from tests.support.ray_head import ray_head

    repeat = 3 if quick else 7
    with tempfile.TemporaryDirectory() as tmp:
        rte = Path(tmp) / "runtime_env.yaml"
        rte.write_text("env_vars:\n  A: '1'\n  B: ${A}/x\n")
        base = [sys.executable, "-m", "rtenv_cli", "explain", str(rte), "--num-gpus", "1",
                "--node-env", "CUDA_VISIBLE_DEVICES=3,5,6,7"]
        env = {"NO_COLOR": "1", **bytecode_env()}
        js = time_process([*base, "--format", "json"], repeat=repeat, env=env)
        txt = time_process(base, repeat=repeat, env=env)
        helpt = time_process([sys.executable, "-m", "rtenv_cli", "--help"], repeat=repeat, env=env)
        js_cpu = cpu_time([*base, "--format", "json"], repeat, env)
        txt_cpu = cpu_time(base, repeat, env)
        load = os.getloadavg()[0]
    with ray_head(num_gpus=8) as head:
        ray_env = {**head.client_env(), "PATH": os.environ.get("PATH", ""), **bytecode_env()}
        ray_t = time_process([sys.executable, "-c", RAY_PROBE, head.address],
                             repeat=2 if quick else 5, env=ray_env)
    rows = [
        Row("explain", "process wall time, --format json", "s", js["median"], ray_t["median"],
            f"< {TARGET} s", js["median"] < TARGET,
            f"min {js['min']:.3f} max {js['max']:.3f}; ray = driver + 1 task on a live head"),
        Row("explain", "process wall time, rich table", "s", txt["median"], ray_t["median"],
            f"< {TARGET} s", txt["median"] < TARGET, f"min {txt['min']:.3f} max {txt['max']:.3f}"),
        Row("explain", "baseline: rtenv --help", "s", helpt["median"], None, "", None,
            f"the CLI's fixed start-up cost; 1-min load average {load:.1f} on "
            f"{os.cpu_count()} cores during the run"),
        Row("explain", "process CPU time (user+sys), --format json", "s", js_cpu, None,
            f"< {TARGET} s", js_cpu < TARGET, "load-independent view of the same process"),
        Row("explain", "process CPU time (user+sys), rich table", "s", txt_cpu, None,
            f"< {TARGET} s", txt_cpu < TARGET, ""),
    ]
    return rows
