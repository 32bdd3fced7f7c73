"""Text rendering of `rtenv doctor`: one line per check, the fix on the line of its problem."""

from __future__ import annotations

from typing import Any

from rtenv_cli.render.output import Output, paint

_STYLE = {"ok": "32", "warn": "1;33", "fail": "1;31"}


def render_doctor(out: Output, report: Any) -> None:
    checks = report.checks
    width = max((len(c.name) for c in checks), default=0)
    for check in checks:
        status = check.status.value
        line = f"{paint(f'{status:<4}', _STYLE[status], out.color)}  {check.name:<{width}}  " \
               f"{check.detail}"
        if check.fix and status != "ok":
            line += f"; fix: {check.fix}"
        out.line(line)
    counts = {s: sum(1 for c in checks if c.status.value == s) for s in _STYLE}
    out.message(f"\n{counts['ok']} ok, {counts['warn']} warning(s), {counts['fail']} failed")
