"""The root options every command follows: `rtenv --quiet/-q` and `--color auto|always|never`
(flag > NO_COLOR/FORCE_COLOR > config file > auto), as ruff and uv have them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
ESC = "\x1b["


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory with one runtime_env that has a warning (RTE101), as the CWD."""
    shutil.copy(ROOT / "examples" / "invalid" / "runtime_env.yaml", tmp_path / "runtime_env.yaml")
    monkeypatch.chdir(tmp_path)
    for name in ("NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


@pytest.mark.parametrize("flag", ["--quiet", "-q"])
def test_quiet_drops_messages_and_keeps_data(project: Path, flag: str) -> None:
    loud = run_cli(["validate"])
    assert "checking 1 file found in the current directory" in loud.stderr
    quiet = run_cli([flag, "validate"])
    assert quiet.exit_code == loud.exit_code
    assert "checking" not in quiet.stderr
    assert quiet.stdout == loud.stdout
    assert "RTE101" in quiet.stdout


def test_quiet_from_the_config_file(project: Path) -> None:
    (project / "rtenv.toml").write_text("quiet = true\n")
    assert "checking" not in run_cli(["validate"]).stderr


def test_color_auto_is_plain_in_a_pipe_and_always_paints(project: Path) -> None:
    assert ESC not in run_cli(["validate"]).stdout
    assert ESC not in run_cli(["--color", "auto", "validate"]).stdout
    assert ESC in run_cli(["--color", "always", "validate"]).stdout


def test_the_flag_beats_no_color_and_force_color(project: Path) -> None:
    assert ESC in run_cli(["--color", "always", "validate"], env={"NO_COLOR": "1"}).stdout
    assert ESC not in run_cli(["--color", "never", "validate"], env={"FORCE_COLOR": "1"}).stdout
    assert ESC not in run_cli(["validate"], env={"NO_COLOR": "1"}).stdout  # still honoured
    assert ESC in run_cli(["validate"], env={"FORCE_COLOR": "1"}).stdout


def test_the_config_file_is_below_the_environment(project: Path) -> None:
    (project / "rtenv.toml").write_text('color = "always"\n')
    assert ESC in run_cli(["validate"]).stdout
    assert ESC not in run_cli(["validate"], env={"NO_COLOR": "1"}).stdout
    assert ESC not in run_cli(["--color", "never", "validate"]).stdout


def test_machine_formats_are_never_painted(project: Path) -> None:
    result = run_cli(["--color", "always", "validate", "--format", "json"])
    assert ESC not in result.stdout
    assert result.json


def test_a_bad_color_is_a_usage_error(project: Path) -> None:
    assert run_cli(["--color", "blue", "validate"]).exit_code == 2
    (project / "rtenv.toml").write_text('color = "blue"\n')
    bad = run_cli(["validate"])
    assert bad.exit_code == 2
    assert "color" in bad.stderr


def test_options_do_not_leak_into_the_next_run(project: Path) -> None:
    run_cli(["-q", "--color", "always", "validate"])
    after = run_cli(["validate"])
    assert "checking" in after.stderr
    assert ESC not in after.stdout
