"""`rtenv rules [CODE]`."""

from __future__ import annotations

from tests.support.cli import run_cli


def test_lists_every_rule() -> None:
    result = run_cli(["rules"])
    assert result.exit_code == 0
    assert "RTE101  unknown-field" in result.stdout
    assert len(result.stdout.splitlines()) >= 30


def test_explains_one_rule_with_examples() -> None:
    result = run_cli(["rules", "RTE130"])
    assert result.exit_code == 0
    for section in ("## What it does", "## Why is this bad?", "## Example", "Use instead:"):
        assert section in result.stdout
    assert "CUDA_VISIBLE_DEVICES" in result.stdout
    by_name = run_cli(["rules", "overridden-visibility-var", "--format", "json"])
    assert by_name.json["code"] == "RTE130"
    assert by_name.json["use_instead"]


def test_json_list_and_unknown_code() -> None:
    listed = run_cli(["rules", "-f", "json"]).json["rules"]
    assert {r["code"] for r in listed} >= {"RTE001", "RTE150"}
    unknown = run_cli(["rules", "RTE999"])
    assert unknown.exit_code == 2
    assert "unknown rule" in unknown.stderr
