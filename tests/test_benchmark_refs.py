"""Speed figures live in benchmarks/results, not in comments: a comment that justifies a choice by
its cost names the row that measures it (`fastpaths.json: "import pathspec"`), and the row is
there. A figure typed into a comment (`~15 ms`, `about 90 ms`, `20x faster`) goes stale unseen."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
REFERENCE = re.compile(r"\b(\w+)\.json: \"([^\"\n]+)\"")
# approximate timings and speed-ups; targets (`< 0.3 s`, `>= 3x faster`) and settings are fine
FIGURE = re.compile(r"~\s?\d[\d.,-]*\s?(?:ms|s|us|µs)\b|~\s?\d[\d.]*x\b|\babout \d[\d.,]*\s?m?s\b"
                    r"|(?<!>= )\b\d+(?:\.\d+)?x (?:faster|cheaper|slower)")


def _sources() -> dict[str, str]:
    return {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted((ROOT / "rtenv_cli").rglob("*.py"))}


def _metrics(result: str) -> set[str]:
    return {row["metric"] for row in json.loads((RESULTS / f"{result}.json").read_text())["rows"]}


def test_every_benchmark_row_a_comment_names_exists() -> None:
    refs = [(path, m.group(1), m.group(2)) for path, text in _sources().items()
            for m in REFERENCE.finditer(text) if (RESULTS / f"{m.group(1)}.json").exists()]
    assert len(refs) >= 15  # the comments that name a row today, at least
    missing = [(path, result, metric) for path, result, metric in refs
               if metric not in _metrics(result)]
    assert missing == [], "rows named in comments but not in benchmarks/results"


def test_no_timing_figures_in_comments() -> None:
    found = [(path, text.count("\n", 0, m.start()) + 1, m.group())
             for path, text in _sources().items() for m in FIGURE.finditer(text)]
    assert found == [], "move the figure to a benchmark row and name the row instead"
