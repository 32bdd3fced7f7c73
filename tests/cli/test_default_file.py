"""Every command given no file takes ./runtime_env.yaml (spec/locate.py's `default_file`), as
validate and doctor do, and says which file it used."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support.cli import run_cli


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runtime_env.yaml").write_text("env_vars:\n  FROM_FILE: yes-it-was-read\n")
    return tmp_path


def test_explain_without_a_file_takes_runtime_env_yaml(here: Path) -> None:
    result = run_cli(["explain", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    assert "using runtime_env.yaml" in result.stderr
    assert "yes-it-was-read" in json.dumps(result.json)


def test_run_without_a_file_takes_runtime_env_yaml(here: Path) -> None:
    out = here / "seen.txt"
    code = f"import os; open({str(out)!r}, 'w').write(os.environ.get('FROM_FILE', 'unset'))"
    result = run_cli(["run", "--", sys.executable, "-c", code])
    assert result.exit_code == 0, result.stderr
    assert "using runtime_env.yaml" in result.stderr
    assert out.read_text() == "yes-it-was-read"


def test_no_file_and_none_given_says_nothing(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_cli(["explain", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    assert "using" not in result.stderr
