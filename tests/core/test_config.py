"""Config files: user config (XDG), pyproject.toml [tool.rtenv], rtenv.toml; flag > env > file."""

from __future__ import annotations

from pathlib import Path

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
