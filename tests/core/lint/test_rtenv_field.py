"""The `rtenv` field (rtenv's Ray plugin) in `rtenv validate`: Ray's verdict stays "valid", the
plugin's schema and the requirement rules report with positions inside the field."""

from __future__ import annotations

from pathlib import Path

from rtenv_cli.core.lint.diagnostic import Severity
from tests.core.lint.test_rules import check


def test_a_good_rtenv_field_is_clean(tmp_path: Path) -> None:
    report = check("rtenv:\n  pip: [six==1.16.0]\nenv_vars: {A: '1'}\n", tmp_path)
    assert report.valid
    assert report.diagnostics == [] or all(d.severity is Severity.INFO
                                           for d in report.diagnostics)


def test_typo_has_did_you_mean_at_the_key(tmp_path: Path) -> None:
    report = check("env_vars: {A: '1'}\nrtenv:\n  uvv: [six]\n", tmp_path)
    assert report.valid  # Ray keeps the unknown plugin field
    [diag] = [d for d in report.diagnostics if d.code == "RTE190"]
    assert (diag.line, diag.column) == (3, 3)
    assert diag.hint == "did you mean 'uv'?"
    assert "RTE101" not in {d.code for d in report.diagnostics}


def test_requirement_rules_point_inside_the_field(tmp_path: Path) -> None:
    text = "rtenv:\n  pip:\n    packages: [six, torch, ray]\n    pip_version: '23.3'\n"
    report = check(text, tmp_path)
    codes = {d.code: d for d in report.diagnostics}
    assert codes["RTE144"].json_path == ("rtenv", "pip", "packages", 1)
    assert (codes["RTE194"].line, codes["RTE194"].severity) == (3, Severity.ERROR)
    assert codes["RTE146"].line == 4
    assert "RTE140" not in codes


def test_conflict_names_both_fields(tmp_path: Path) -> None:
    report = check("rtenv: {uv: [six]}\nuv: [six]\n", tmp_path)
    [diag] = [d for d in report.diagnostics if d.code == "RTE191"]
    assert diag.line == 2
    assert "`uv`" in diag.message
