"""`rtenv validate FILE` and `rtenv --help` as processes, against Ray's fastest offline check of
the same file: `import yaml; from ray.runtime_env import RuntimeEnv; RuntimeEnv(**safe_load(f))`.

Both sides run with bytecode caching on (a fresh PYTHONPYCACHEPREFIX, filled by a warm-up run),
as on a normal install: this machine's shell sets PYTHONDONTWRITEBYTECODE=1, which would make
every run recompile every module and measure the compiler instead.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.common import Row, time_process

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 0.3
TARGET_RATIO = 3.0
FILES = ("examples/ci/configs/train_runtime_env.yaml", "examples/invalid/runtime_env.yaml")


def _rtenv() -> list[str]:
    script = Path(sys.executable).with_name("rtenv")
    return [str(script)] if script.exists() else [sys.executable, "-m", "rtenv_cli"]


def _ray_check(file: str) -> list[str]:
    code = ("import yaml\nfrom ray.runtime_env import RuntimeEnv\n"
            f"RuntimeEnv(**(yaml.safe_load(open({file!r})) or {{}}))")
    return [sys.executable, "-c", code]


# `rtenv` started from `python -c`, with and without cli/_fastcoerce (typer's own coercion, which
# imports pydantic, is put back after the package installed the shim)
_MAIN = "import sys\nfrom rtenv_cli.cli.main import main\nsys.exit(main(sys.argv[1:]))"
_NO_SHIM = ("import typer.core as tc\nown = tc._TyperParameter.get_runtime_param\n"
            "import rtenv_cli.cli\ntc._TyperParameter.get_runtime_param = own\n" + _MAIN)


def _shim_ablation(file: str, *, repeat: int, env: dict[str, str], cwd: str) -> Row | None:
    """`rtenv validate FILE` with and without the coercion shim, as processes."""
    from rtenv_cli.cli import _fastcoerce

    if not _fastcoerce.needed():
        return None  # this typer coerces without pydantic: there is nothing to ablate
    with_shim = [sys.executable, "-c", _MAIN, "validate", file]
    without = [sys.executable, "-c", _NO_SHIM, "validate", file]
    for argv in (with_shim, without):
        time_process(argv, repeat=1, env=env, cwd=cwd, warmup=1)
    ours, plain = _interleaved(with_shim, without, repeat=repeat, env=env, cwd=cwd)
    return Row(
        "validate", f"ablation: validate {file} without cli/_fastcoerce", "s", plain["median"],
        None, f"slower than with the shim ({ours['median']:.3f} s)",
        plain["median"] > ours["median"],
        f"interleaved runs, median of {repeat}; with the shim min {ours['min']:.3f} max "
        f"{ours['max']:.3f}; without min {plain['min']:.3f} max {plain['max']:.3f}; without "
        "it typer's coercion imports pydantic")


def env_for(pyc: str) -> dict[str, str]:
    return {"PYTHONPYCACHEPREFIX": pyc, "PYTHONDONTWRITEBYTECODE": "", "NO_COLOR": "1"}


def _interleaved(a: list[str], b: list[str], *, repeat: int, env: dict[str, str],
                 cwd: str) -> tuple[dict[str, float], dict[str, float]]:
    """Alternate the two commands so that load from other processes hits both alike."""
    first: list[float] = []
    second: list[float] = []
    for _ in range(repeat):
        first.append(time_process(a, repeat=1, env=env, cwd=cwd, warmup=0)["median"])
        second.append(time_process(b, repeat=1, env=env, cwd=cwd, warmup=0)["median"])

    def stats(xs: list[float]) -> dict[str, float]:
        return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}

    return stats(first), stats(second)


def run(quick: bool) -> list[Row]:
    repeat = 3 if quick else 15
    rows: list[Row] = []
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="rtenv-bench-pyc-") as pyc, \
            tempfile.TemporaryDirectory(prefix="rtenv-bench-cwd-") as cwd:
        # a neutral CWD (no pyproject.toml: rtenv would read its [tool.rtenv] table, ~15 ms)
        for file in FILES:
            shutil.copy(REPO / file, Path(cwd) / Path(file).name)
            for argv in ([*_rtenv(), "validate", Path(file).name], _ray_check(Path(file).name)):
                time_process(argv, repeat=1, env=env_for(pyc), cwd=cwd, warmup=1)  # fill pyc
        env = env_for(pyc)
        for file in (Path(f).name for f in FILES):
            ours, ray = _interleaved([*_rtenv(), "validate", file], _ray_check(file),
                                     repeat=repeat, env=env, cwd=cwd)
            ratio = ray["median"] / ours["median"]
            rows.append(Row(
                "validate", f"wall time: validate {Path(file).name}", "s", ours["median"],
                ray["median"], f"< {TARGET_S} s and >= {TARGET_RATIO:g}x faster than Ray",
                ours["median"] < TARGET_S and ratio >= TARGET_RATIO,
                f"interleaved runs, median of {repeat}; neutral CWD; "
                f"rtenv min {ours['min']:.3f} max {ours['max']:.3f}; "
                f"ray min {ray['min']:.3f} max {ray['max']:.3f}; ray side = import "
                "ray.runtime_env + RuntimeEnv(**yaml.safe_load(file))"))
        ablation = _shim_ablation(Path(FILES[0]).name, repeat=repeat, env=env, cwd=cwd)
        if ablation is not None:
            rows.append(ablation)
        load = f"; load avg {load_before:.2f} -> {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
        for row in rows:
            row.notes += load
        helped = time_process([*_rtenv(), "--help"], repeat=repeat, env=env, cwd=cwd, warmup=2)
        rows.append(Row("validate", "wall time: rtenv --help", "s", helped["median"], None,
                        f"< {TARGET_S} s", helped["median"] < TARGET_S,
                        f"median of {repeat}; min {helped['min']:.3f} max {helped['max']:.3f}"
                        + load))
    return rows
