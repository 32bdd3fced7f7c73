"""The root command: version, help, exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtenv_cli import __version__
from tests.support.cli import run_cli, run_process


def test_version() -> None:
    result = run_cli(["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"rtenv {__version__}"


def test_help_lists_example() -> None:
    result = run_cli(["--help"])
    assert result.exit_code == 0
    assert "Example:" in result.stdout


def test_unknown_command_is_usage_error() -> None:
    result = run_cli(["no-such-command"])
    assert result.exit_code == 2
    assert "No such command" in result.stderr


def test_version_as_process() -> None:
    result = run_process(["--version"])
    assert result.exit_code == 0, result.stderr
    assert __version__ in result.stdout


def test_closed_pipe_is_not_an_internal_error(tmp_path: Path) -> None:
    import subprocess
    import sys

    for i in range(50):
        (tmp_path / f"e{i}_runtime_env.yaml").write_text("pypi: [x]\nenv_vars: {A: 1}\n")
    proc = subprocess.Popen([sys.executable, "-m", "rtenv_cli", "validate", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdout.close()  # the reader is gone before rtenv writes: `rtenv validate DIR | true`
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1
    assert "internal error" not in stderr
    assert "Traceback" not in stderr


def test_fastcoerce_applies_wherever_typer_coerces_with_pydantic(tmp_path: Path) -> None:
    """The shim patches typer's private coercion; on a typer that has it (0.29), it must apply
    (a silent no-op would put pydantic back on every command's start-up)."""
    import subprocess
    import sys

    env_file = tmp_path / "runtime_env.yaml"
    env_file.write_text("env_vars:\n  A: b\n")
    code = (
        "import sys\nfrom rtenv_cli.cli import _fastcoerce\nfrom rtenv_cli.cli.main import main\n"
        f"code = main(['validate', '--api', 'RAY-INIT', '-f', 'json', '--glob', '*.yaml', "
        f"{str(env_file)!r}])\n"
        "print(code, _fastcoerce.needed(), _fastcoerce.install(), 'pydantic' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip().splitlines()[-1]
    exit_code, needed, installed, pydantic = out.split()
    assert exit_code == "0"
    assert installed == needed
    assert pydantic == "False"


def test_fastcoerce_errors_are_typers() -> None:
    bad_int = run_cli(["push", "--quiet-ms", "soon", "--dry-run"])
    assert bad_int.exit_code == 2
    assert "'soon' is not a valid integer" in bad_int.stderr
    bad_choice = run_cli(["validate", "--format", "yaml", "x.yaml"])
    assert bad_choice.exit_code == 2
    assert "yaml" in bad_choice.stderr


@pytest.mark.parametrize("args", [
    ["explain", "nope.yaml", "--format", "json"],
    ["validate", "nope.yaml", "--format", "json"],
    ["push", "nope.yaml", "--dry-run", "--format", "json"],
    ["ls-files", "nope", "--format", "json"],
])
def test_every_json_command_reports_its_errors_as_json(tmp_path: Path, args: list[str]) -> None:
    result = run_process(args, cwd=str(tmp_path))
    assert result.exit_code in (1, 2), result.stderr
    error = result.json["error"]
    assert "nope" in error["message"]
    assert result.stderr.startswith("error: ")


def test_json_format_from_the_config_also_makes_errors_json(tmp_path: Path) -> None:
    (tmp_path / "rtenv.toml").write_text('[explain]\nformat = "json"\n')
    result = run_process(["explain", "nope.yaml"], cwd=str(tmp_path))
    assert result.exit_code == 2
    assert "nope.yaml" in result.json["error"]["message"]


def test_text_errors_print_nothing_on_stdout(tmp_path: Path) -> None:
    result = run_process(["explain", "nope.yaml"], cwd=str(tmp_path))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "nope.yaml" in result.stderr


def test_one_byte_formatter_in_iec_units() -> None:
    from rtenv_cli.render.units import human_bytes

    assert [human_bytes(n) for n in (None, 0, 1023, 1024, 1536, 100 * 2**20, 3 * 2**40,
                                     5 * 2**50)] == [
        "-", "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "100.0 MiB", "3.0 TiB", "5120.0 TiB"]


def test_tables_are_whole_when_piped(tmp_path: Path) -> None:
    """A pipe has no width: no 80-column (or $COLUMNS) cut, no shortened labels or URIs."""
    (tmp_path / "a_working_dir_whose_name_is_longer_than_any_column").mkdir()
    (tmp_path / "a_working_dir_whose_name_is_longer_than_any_column" / "m.py").write_text("x\n")
    pushed = run_process(["push", "a_working_dir_whose_name_is_longer_than_any_column",
                          "--to", "local", "-f", "json"], cwd=str(tmp_path))
    assert pushed.exit_code == 0, pushed.stderr
    uri = pushed.json["packages"][0]["uri"]
    listing = run_process(["cache", "ls"], cwd=str(tmp_path), env={"COLUMNS": "40"})
    assert listing.exit_code == 0, listing.stderr
    rows = [line for line in listing.stdout.splitlines() if uri in line]
    assert len(rows) == 1
    assert len(rows[0]) > 80
    assert "…" not in listing.stdout
