"""Render a `ValidateReport`: text (source line + caret, grouped per file), GitHub workflow
annotations, and SARIF 2.1.0. Plain ANSI codes instead of rich: validate must start fast.

Info-level findings are for whoever asks: the outputs a person reads as they come (text, and
GitHub annotations shown inline on a pull request) leave them out unless `show_info` is set
(`-v`/`--show-info`) and say how many they left out; JSON and SARIF, read by tools that filter
by level themselves, always carry them. Infos never change the exit status."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from rtenv_cli.core.lint.diagnostic import Diagnostic, Severity
from rtenv_cli.render.output import paint

if TYPE_CHECKING:
    from rtenv_cli.core.lint.engine import FileReport, ValidateReport
    from rtenv_cli.render.output import Output

_STYLE = {Severity.ERROR: "1;31", Severity.WARNING: "1;33", Severity.INFO: "1;36"}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _source_lines(report: FileReport, diag: Diagnostic, color: bool,
                  lines: list[str]) -> list[str]:
    if report.source is None or diag.line is None or diag.column is None:
        return []
    if not 0 < diag.line <= len(lines):
        return []
    text = lines[diag.line - 1].replace("\t", " ")
    if report.secrets:  # the message hides a secret: so does the line quoted under it
        from rtenv_cli.core.lint.rules.env_vars import scrub

        text = scrub(text, set(report.secrets))
    width = 1
    if diag.end_line == diag.line and diag.end_column and diag.end_column > diag.column:
        width = diag.end_column - diag.column
    number = str(diag.line)
    pad = " " * len(number)
    caret = " " * (diag.column - 1) + "^" * max(1, min(width, max(1, len(text) - diag.column + 1)))
    return [f" {pad} |", f" {number} | {text}",
            f" {pad} | {paint(caret, _STYLE[diag.severity], color)}"]


def _shown(diag: Diagnostic, show_info: bool) -> bool:
    return show_info or diag.severity is not Severity.INFO


def _status(report: FileReport, show_info: bool) -> str:
    verdict = "invalid (Ray rejects it)"
    if report.valid:
        verdict = "valid" if not report.count(Severity.ERROR) else "valid for Ray, but"
    counts = [_plural(report.count(s), s.value) for s in Severity
              if report.count(s) and (show_info or s is not Severity.INFO)]
    sep = " " if verdict.endswith("but") else ", "
    return f"{report.path}: {verdict}" + (f"{sep}{', '.join(counts)}" if counts else "")


def render_text(out: Output, report: ValidateReport, *, show_info: bool = False) -> None:
    color = out.color
    for index, file in enumerate(report.files):
        if index:
            out.line()
        lines = file.source.split("\n") if file.source is not None else []
        for diag in file.diagnostics:
            if not _shown(diag, show_info):
                continue
            where = f"{file.path}:{diag.line or 1}:{diag.column or 1}"
            label = paint(diag.severity.value, _STYLE[diag.severity], color)
            out.line(f"{where}: {diag.code} {label}: {diag.message}")
            for line in _source_lines(file, diag, color, lines):
                out.line(line)
            if diag.hint:
                out.line(f"  = hint: {diag.hint}")
        for note in file.notes:
            out.line(f"{file.path}: note: {note}")
        out.line(_status(file, show_info))
    errors, warnings = report.count(Severity.ERROR), report.count(Severity.WARNING)
    infos = report.count(Severity.INFO)
    invalid = sum(1 for f in report.files if not f.valid)
    readers = report.consumers()
    if len(readers) == 1:
        what = f"for {next(iter(readers))}"
    else:
        what = "(" + ", ".join(f"{n} for {name}" for name, n in readers.items()) + ")"
    if not infos:
        extra = ""
    elif show_info:
        extra = f", {_plural(infos, 'info')}"
    else:
        extra = f" ({_plural(infos, 'info')} not shown: -v shows {'it' if infos == 1 else 'them'})"
    out.line()
    out.line(f"Checked {_plural(len(report.files), 'file')} {what}: "
             f"{invalid} invalid, {_plural(errors, 'error')}, {_plural(warnings, 'warning')}"
             + extra)


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(out: Output, report: ValidateReport, *, show_info: bool = False) -> None:
    """GitHub Actions workflow commands: `::error file=...,line=...::message`; infos (notices)
    only with `show_info`, the count of the others in a last `::notice::`."""
    from rtenv_cli.core.lint.registry import get_rule

    level = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}
    for file in report.files:
        for diag in file.diagnostics:
            if not _shown(diag, show_info):
                continue
            props = [f"file={_escape_prop(file.path)}"]
            if diag.line:
                props.append(f"line={diag.line}")
                if diag.column:
                    props.append(f"col={diag.column}")
                if diag.end_line:
                    props.append(f"endLine={diag.end_line}")
                if diag.end_column and diag.end_line == diag.line:
                    props.append(f"endColumn={diag.end_column}")
            props.append(f"title={_escape_prop(f'{diag.code} {get_rule(diag.code).name}')}")
            message = diag.message + (f"\nhint: {diag.hint}" if diag.hint else "")
            out.line(f"::{level[diag.severity]} {','.join(props)}::{_escape_data(message)}")
    hidden = 0 if show_info else report.count(Severity.INFO)
    if hidden:
        out.line(f"::notice title=rtenv validate::{_plural(hidden, 'info')} not shown "
                 "(pass -v to annotate them)")


def sarif(report: ValidateReport) -> dict[str, Any]:
    """A SARIF 2.1.0 log with one run; rules carry their docs, results their regions."""
    from rtenv_cli import __version__
    from rtenv_cli.core.lint.registry import all_rules

    rules = all_rules()
    index = {r.code: i for i, r in enumerate(rules)}
    level = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
    results = []
    for file in report.files:
        for diag in file.diagnostics:
            region: dict[str, int] = {}
            if diag.line:
                region = {"startLine": diag.line, "startColumn": diag.column or 1}
                if diag.end_line:
                    region["endLine"] = diag.end_line
                    region["endColumn"] = diag.end_column or (diag.column or 1) + 1
            location: dict[str, Any] = {"artifactLocation": {"uri": file.path}}
            if region:
                location["region"] = region
            text = diag.message + (f" (hint: {diag.hint})" if diag.hint else "")
            results.append({"ruleId": diag.code, "ruleIndex": index[diag.code],
                            "level": level[diag.severity], "message": {"text": text},
                            "locations": [{"physicalLocation": location}]})
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "rtenv", "version": __version__,
                "rules": [{"id": r.code, "name": r.name,
                           "shortDescription": {"text": r.summary},
                           "fullDescription": {"text": r.what},
                           "help": {"text": r.docs(), "markdown": r.docs()},
                           "defaultConfiguration": {"level": level[r.severity]}}
                          for r in rules]}},
            "results": results,
        }],
    }


def render_sarif(out: Output, report: ValidateReport) -> None:
    out.line(json.dumps(sarif(report), indent=2, ensure_ascii=False))


def render_rules_list(out: Output, rules: tuple[Any, ...]) -> None:
    width = max(len(r.name) for r in rules)
    for rule in rules:
        flag = " (Ray)" if rule.ray else ""
        out.line(f"{rule.code}  {rule.name:<{width}}  {rule.severity.value:<7}  "
                 f"{rule.summary}{flag}")


def render_rule(out: Output, rule: Any) -> None:
    out.line(rule.docs().rstrip("\n"))
