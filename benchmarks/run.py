"""Run benchmarks side by side with Ray; print a table; write benchmarks/results/<name>.json.

    python -m benchmarks.run              # every benchmarks/bench_*.py
    python -m benchmarks.run validate     # just bench_validate.py
    python -m benchmarks.run --quick      # smaller inputs (smoke test, not for committed results)

A benchmark module exposes `run(quick: bool) -> list[Row]`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import sys
from pathlib import Path

from benchmarks.common import RESULTS_DIR, Row, machine


def _available() -> list[str]:
    return sorted(p.stem.removeprefix("bench_") for p in Path(__file__).parent.glob("bench_*.py"))


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}"


def print_table(rows: list[Row]) -> None:
    headers = ["benchmark", "metric", "unit", "rtenv", "ray", "ray/rtenv", "target", "ok"]
    table = [[r.benchmark, r.metric, r.unit, _fmt(r.rtenv), _fmt(r.ray), _fmt(r.ratio), r.target,
              {True: "yes", False: "NO", None: "-"}[r.passed]] for r in rows]
    widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help=f"benchmarks to run: {', '.join(_available())}")
    parser.add_argument("--quick", action="store_true", help="small inputs; results not written")
    args = parser.parse_args(argv)
    names = args.names or _available()
    failed = False
    for name in names:
        module = importlib.import_module(f"benchmarks.bench_{name}")
        rows: list[Row] = module.run(args.quick)
        print(f"\n== {name} ==")
        print_table(rows)
        failed |= any(r.passed is False for r in rows)
        if not args.quick:
            RESULTS_DIR.mkdir(parents=True, exist_ok=True)
            out = RESULTS_DIR / f"{name}.json"
            out.write_text(json.dumps({
                "benchmark": name,
                "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "machine": machine(),
                "rows": [r.to_dict() for r in rows],
            }, indent=2) + "\n")
            print(f"wrote {out.relative_to(Path.cwd()) if out.is_relative_to(Path.cwd()) else out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
