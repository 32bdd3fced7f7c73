"""Ignore matching (packaging/ignore.py) beside Ray's own, and the ablation of its fast path.

One `excludes` list of 40 gitignore patterns (no negation) is matched against 20,000 relative
paths, in this process: rtenv's `Matcher.decide` (all patterns joined into one alternation, which
renames pathspec's `ps_d` group in the text of its regexes), the same matcher with one regex per
pattern (the ablation: pathspec's public regexes as they are), and Ray 2.60's `_get_excludes`
matcher (its vendored pathspec 0.8.1, `match_file` on each path).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from benchmarks.common import Row

PATTERNS = [
    *(f"*.{ext}" for ext in ("pyc", "pyo", "so", "o", "a", "log", "tmp", "bak", "swp", "egg")),
    *(f"{d}/" for d in ("build", "dist", ".tox", ".mypy_cache", ".pytest_cache", "node_modules",
                        "htmlcov", ".eggs", "wheels", "site")),
    *(f"/{f}" for f in ("setup.cfg.bak", "core", "nohup.out", ".coverage", "coverage.xml",
                        "Thumbs.db", ".DS_Store", "*.iml", ".idea", ".vscode")),
    *(f"**/{d}/**" for d in ("checkpoints", "outputs", "wandb", "mlruns", "lightning_logs",
                             "runs", "logs", "data/raw", "tmp", "cache")),
]


def _paths(n: int) -> list[str]:
    """Mostly kept source files, some ignored ones, spread over nested directories."""
    exts = ["py", "py", "py", "txt", "yaml", "json", "pyc", "md", "so", "csv"]
    dirs = ["src/pkg", "src/pkg/sub", "tests", "docs", "build/lib", "scripts", "data/raw",
            "configs", "src/pkg/models", "outputs/run1"]
    return [f"{dirs[i % len(dirs)]}/m{i}.{exts[(i // 7) % len(exts)]}" for i in range(n)]


def _best(fn: Callable[[], object], repeat: int) -> dict[str, float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return {"median": statistics.median(times), "min": min(times), "max": max(times)}


def run(quick: bool) -> list[Row]:
    from pathlib import Path

    from ray._private.runtime_env.packaging import _get_excludes

    from rtenv_cli.core.packaging import ignore

    n = 2_000 if quick else 20_000
    repeat = 3 if quick else 15
    paths = _paths(n)
    combined = ignore.compile_lines([("excludes", p) for p in PATTERNS], ".")
    per_rule = ignore.compile_lines([("excludes", p) for p in PATTERNS], ".")
    assert combined is not None
    assert per_rule is not None
    assert combined.combined is not None
    per_rule.combined = None  # the ablation: every path tried against each pattern's regex
    root = Path("/nonexistent-root")
    ray_match = _get_excludes(root, PATTERNS)
    ray_paths = [root / p for p in paths]
    # the three agree on every path (the parity suite checks this against Ray in general)
    ours = [combined.decide(p) is not None for p in paths]
    assert ours == [per_rule.decide(p) is not None for p in paths]
    assert ours == [bool(ray_match(p)) for p in ray_paths]
    dropped = sum(ours)

    fast = _best(lambda: [combined.decide(p) for p in paths], repeat)
    slow = _best(lambda: [per_rule.decide(p) for p in paths], repeat)
    ray = _best(lambda: [ray_match(p) for p in ray_paths], repeat)
    what = f"match {n:,} paths against {len(PATTERNS)} ignore patterns"
    note = (f"median of {repeat} in one process; {dropped:,} of the paths are ignored; "
            "the three matchers agree on every path")
    return [
        Row("ignore", what, "s", fast["median"], ray["median"], "faster than Ray",
            fast["median"] < ray["median"],
            f"{note}; rtenv min {fast['min']:.4f}; Ray = _get_excludes (pathspec 0.8.1)"),
        Row("ignore", f"ablation: {what}, one regex per pattern", "s", slow["median"], None,
            f"slower than the one alternation ({fast['median']:.4f} s)",
            slow["median"] > fast["median"],
            f"{note}; min {slow['min']:.4f}; what the `ps_d` rename in ignore.Matcher buys"),
    ]
