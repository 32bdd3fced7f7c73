"""Config files: user config (XDG), pyproject.toml [tool.rtenv], rtenv.toml; flag > env > file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rtenv_cli.core.config import _user_config_dir, config_files, load_default_map
from rtenv_cli.core.errors import ConfigError
from tests.support.cli import run_cli


def test_user_config_dir_is_platformdirs_own(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from platformdirs import user_config_dir

    for xdg in (str(tmp_path / "xdg"), ""):
        monkeypatch.setenv("XDG_CONFIG_HOME", xdg)
        assert _user_config_dir() == Path(user_config_dir("rtenv", appauthor=False))


def test_files_merge_in_precedence_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    xdg = tmp_path / "xdg"
    (xdg / "rtenv").mkdir(parents=True)
    (xdg / "rtenv" / "config.toml").write_text('[validate]\nformat = "json"\nstrict = true\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text('[tool.rtenv.validate]\nformat = "github"\n')
    assert config_files(project) == [xdg / "rtenv" / "config.toml", project / "pyproject.toml"]
    assert load_default_map(project) == {"validate": {"format": "github", "strict": True}}


def test_explicit_config_that_is_missing_is_an_error(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RTENV_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(ConfigError, match="no such file"):
        config_files(tmp_path)


def test_user_config_sets_a_default_and_the_flag_wins(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    xdg = tmp_path / "xdg"
    (xdg / "rtenv").mkdir(parents=True)
    (xdg / "rtenv" / "config.toml").write_text('[validate]\nformat = "json"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    monkeypatch.chdir(tmp_path)
    env = tmp_path / "runtime_env.yaml"
    env.write_text("env_vars:\n  A: b\n")
    assert run_cli(["validate", str(env)]).json["files"][0]["valid"] is True
    text = run_cli(["validate", "--format", "text", str(env)])
    assert text.stdout.startswith(f"{env}: valid")


def _rtenv_in(cwd: Path, args: list[str], env: dict[str, str] | None = None) -> Any:
    from tests.support.cli import run_process

    return run_process(args, cwd=str(cwd), env=env)


@pytest.mark.parametrize(("config", "named", "suggestion"), [
    ('[push]\ntoo = "file:///shared"\n', "unknown key 'too' in [push]", "did you mean 'to'?"),
    ('[validat]\nformat = "json"\n', "unknown table [validat]", "did you mean 'validate'?"),
    ('[cache.gcc]\nkeep-storage = "2GB"\n', "unknown table [cache.gcc]", "did you mean 'gc'?"),
    ('[agent]\nmax_sise = "2GB"\n', "unknown key 'max_sise' in [agent]",
     "did you mean 'max-size'?"),
])
def test_unknown_tables_and_keys_are_errors_with_the_closest_name(
        tmp_path: Path, config: str, named: str, suggestion: str) -> None:
    (tmp_path / "rtenv.toml").write_text(config)
    result = _rtenv_in(tmp_path, ["rules"])
    assert result.exit_code == 2, result.stderr
    assert f"{tmp_path / 'rtenv.toml'}: {named}" in result.stderr
    assert suggestion in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("pyproject", "message"), [
    ("[tool.rtenv]\nvalidate = 5\n", "tool.rtenv.validate must be a table, not an integer"),
    ("[tool]\nrtenv = 5\n", "tool.rtenv must be a table, not an integer"),
    ('[tool.rtenv.push]\nquiet-ms = "abc"\n',
     "[tool.rtenv.push] quiet-ms = 'abc': 'abc' is not a valid integer"),
    ('[tool.rtenv.validate]\nstrict = "yes"\n', "[tool.rtenv.validate] strict = 'yes': is a flag"),
    ('[tool.rtenv.validate]\nformat = "yaml"\n', "[tool.rtenv.validate] format = 'yaml'"),
    ("[tool.rtenv.push]\nto = []\n", "[tool.rtenv.push] to = []: takes one value"),
    ("[tool.rtenv.push.to]\nx = 1\n", "[tool.rtenv.push] to must be a value, not a table"),
])
def test_values_of_the_wrong_type_are_clear_errors(tmp_path: Path, pyproject: str,
                                                   message: str) -> None:
    (tmp_path / "pyproject.toml").write_text(pyproject)
    result = _rtenv_in(tmp_path, ["rules"])
    assert result.exit_code == 2, result.stderr
    assert f"{tmp_path / 'pyproject.toml'}: {message}" in result.stderr
    assert "Traceback" not in result.stderr
    assert "internal error" not in result.stderr


def test_every_option_of_every_command_is_a_key(tmp_path: Path) -> None:
    """The schema is the commands' own options: each long option is accepted as a key."""
    import typer

    from rtenv_cli.cli import app
    from rtenv_cli.cli.config_schema import CommandTables
    from rtenv_cli.cli.group import RtenvGroup

    root = typer.main.get_group(app)
    assert isinstance(root, RtenvGroup)
    tables = CommandTables(root)
    assert set(tables) == set(root.commands) | {"quiet", "color"}  # the root's own options
    push = root.commands["push"]
    longs = {o[2:] for p in push.params for o in p.opts if o.startswith("--")}
    assert set(tables["push"]) == longs
    assert {"gc", "ls", "purge"} <= set(tables["cache"])
    assert {"max-size", "max-age"} <= set(tables["agent"])  # the embedded store reads these
    assert "keep-storage" in tables["cache"]["gc"]


def test_a_good_config_is_taken_as_written(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "rtenv.toml").write_text(
        '[validate]\nformat = "json"\nglob = "*.yml"\nstrict = true\n'
        '[agent]\nmax-size = "1GB"\nmax_age = "7d"\n[cache.gc]\nkeep-storage = "2GB"\n')
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "a.yml").write_text("env_vars:\n  A: b\n")
    result = _rtenv_in(tmp_path, ["validate", "conf"])
    assert result.exit_code == 0, result.stderr
    assert result.json["files"][0]["path"].endswith("a.yml")

    from rtenv_cli.core.run import embedded_budget
    from rtenv_cli.core.units import parse_size

    monkeypatch.chdir(tmp_path)
    budget = embedded_budget()
    assert budget is not None
    assert budget.max_bytes == parse_size("1GB")
    assert budget.max_age_s == 7 * 86400


def _push_setup(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text("X = 1\n")
    config_target, explicit_target = tmp_path / "from-config", tmp_path / "explicit"
    config_target.mkdir()
    explicit_target.mkdir()
    (tmp_path / "rtenv.toml").write_text(f'[push]\nto = "{config_target.as_uri()}"\n')
    return config_target, explicit_target


def _zips(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("*.zip"))


def test_an_explicit_address_beats_a_config_to(tmp_path: Path) -> None:
    config_target, explicit_target = _push_setup(tmp_path)
    result = _rtenv_in(tmp_path, ["push", "src", "--address", explicit_target.as_uri(),
                                  "--format", "json"])
    assert result.exit_code == 0, result.stderr
    assert _zips(explicit_target)
    assert not _zips(config_target)
    # the config's own target still applies when nothing else decides
    again = _rtenv_in(tmp_path, ["push", "src", "--format", "json"])
    assert again.exit_code == 0, again.stderr
    assert _zips(config_target)


def test_an_address_env_var_beats_a_config_to(tmp_path: Path) -> None:
    config_target, explicit_target = _push_setup(tmp_path)
    result = _rtenv_in(tmp_path, ["push", "src", "-f", "json"],
                       env={"RAY_ADDRESS": explicit_target.as_uri()})
    assert result.exit_code == 0, result.stderr
    assert _zips(explicit_target)
    assert not _zips(config_target)


def test_an_explicit_to_still_beats_a_config_address(tmp_path: Path) -> None:
    config_target, explicit_target = _push_setup(tmp_path)
    (tmp_path / "rtenv.toml").write_text(f'[push]\naddress = "{config_target.as_uri()}"\n')
    result = _rtenv_in(tmp_path, ["push", "src", "--to", explicit_target.as_uri(), "-f", "json"])
    assert result.exit_code == 0, result.stderr
    assert _zips(explicit_target)
    assert not _zips(config_target)


def test_a_pyproject_that_never_names_rtenv_is_not_parsed(tmp_path: Path) -> None:
    # a project's own table, even broken TOML, is none of rtenv's business (and not parsed:
    # config.SKIP_FOREIGN_PYPROJECT); the same file naming rtenv is parsed and its error shown
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nbroken = \n')
    result = _rtenv_in(tmp_path, ["rules"])
    assert result.exit_code == 0, result.stderr
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nbroken = \n[tool.rtenv]\n')
    result = _rtenv_in(tmp_path, ["rules"])
    assert result.exit_code == 2, result.stderr
    assert "fix the TOML syntax" in result.stderr
