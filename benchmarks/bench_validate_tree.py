"""`rtenv validate DIR` over many runtime_envs of one project, against one of its files.

Issue 15: `rtenv validate .` on a tree holding several runtime_envs that share one working_dir
walked that working_dir once per file. One validate run now walks and hashes each distinct
working_dir once (lint/context.RunCache), so 100 files must cost no more than a few
single-file calls. Both commands run as processes, interleaved, with bytecode caching on (see
bench_validate).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from benchmarks.bench_validate import _interleaved, _rtenv, env_for
from benchmarks.common import Row, time_process

SHARED_FILES = 100  # runtime_envs of one project, sharing its working_dir
TARGET_SHARED = 3.0  # "one call over 100 files costs no more than a few single-file calls"


def _shared_project(root: Path, *, modules: int, files: int) -> Path:
    """A project of `modules` x 50 small .py files and `files` runtime_envs that all package it
    (with a .gitignore and excludes, as real ones have), under root/configs/."""
    for m in range(modules):
        folder = root / "proj" / "pkg" / f"m{m}"
        folder.mkdir(parents=True)
        for f in range(50):
            (folder / f"f{f}.py").write_text(f"X = {f}\n")
    (root / "proj" / ".gitignore").write_text("outputs/\n*.log\n")
    configs = root / "configs"
    configs.mkdir()
    for i in range(files):
        (configs / f"runtime_env_{i:03d}.yaml").write_text(
            f"working_dir: proj\nexcludes: [outputs/, checkpoints/]\n"
            f"env_vars: {{RUN: '{i}'}}\npip: ['torch==2.3.1']\n")
    return configs


def _shared_working_dir_row(repeat: int, env: dict[str, str], quick: bool) -> Row:
    """`rtenv validate configs/` (100 files, one working_dir) against one of its files."""
    with tempfile.TemporaryDirectory(prefix="rtenv-bench-shared-") as tmp:
        configs = _shared_project(Path(tmp), modules=8 if quick else 40, files=SHARED_FILES)
        one = [*_rtenv(), "validate", str(configs / "runtime_env_000.yaml")]
        many = [*_rtenv(), "validate", str(configs)]
        for argv in (one, many):
            time_process(argv, repeat=1, env=env, cwd=tmp, warmup=1)
        single, hundred = _interleaved(one, many, repeat=repeat, env=env, cwd=tmp)
        files = 400 if quick else 2000
        ratio = hundred["median"] / single["median"]
        return Row(
            "validate_tree", f"wall time: validate {SHARED_FILES} files sharing one working_dir "
            f"({files} files)", "s", hundred["median"], None,
            f"<= {TARGET_SHARED:g}x one file's call ({single['median']:.3f} s)",
            ratio <= TARGET_SHARED,
            f"interleaved runs, median of {repeat}; {ratio:.2f}x the single-file "
            f"call; 100 files min {hundred['min']:.3f} max {hundred['max']:.3f}; one file min "
            f"{single['min']:.3f} max {single['max']:.3f}; the run walks and hashes the "
            "working_dir once (RunCache)")


def run(quick: bool) -> list[Row]:
    repeat = 3 if quick else 7
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="rtenv-bench-pyc-") as pyc:
        row = _shared_working_dir_row(repeat, env_for(pyc), quick)
    row.notes += (f"; load avg {load_before:.2f} -> {os.getloadavg()[0]:.2f} on "
                  f"{os.cpu_count()} cores")
    return [row]
