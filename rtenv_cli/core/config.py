"""Config files: precedence is flag > env var > project config > user config > built-in default.

Flags and env vars are click's job; this module produces click's `default_map` from
`rtenv.toml` (or `[tool.rtenv]` in pyproject.toml) in the CWD, over the user config
(`<user config dir>/rtenv/config.toml`, or the file named by RTENV_CONFIG).

Tables are command names, keys are option names with dashes or underscores:

    [push]
    to = "file:///shared/rtenv"
    [cache.gc]
    keep-storage = "20GB"
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import ConfigError

CONFIG_ENV = "RTENV_CONFIG"


def _toml_load(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}", path=str(path),
                          hint="fix the TOML syntax, or set RTENV_CONFIG to another file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}", path=str(path)) from None


def _normalise(table: dict[str, Any]) -> dict[str, Any]:
    return {k.replace("-", "_") if not isinstance(v, dict) else k: _normalise(v)
            if isinstance(v, dict) else v for k, v in table.items()}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _user_config_dir() -> Path:
    """platformdirs' user config dir for rtenv.

    On Linux this is platformdirs' XDG rule written out ($XDG_CONFIG_HOME, else ~/.config): every
    command reads it at start-up, and importing platformdirs costs ~8 ms of a 0.3 s budget.
    """
    if sys.platform.startswith("linux"):
        xdg = os.environ.get("XDG_CONFIG_HOME", "").strip()
        return Path(xdg or os.path.expanduser("~/.config")) / "rtenv"
    from platformdirs import user_config_dir

    return Path(user_config_dir("rtenv", appauthor=False))


def config_files(cwd: Path | None = None) -> list[Path]:
    """The config files that apply, lowest precedence first."""
    cwd = cwd or Path.cwd()
    files: list[Path] = []
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(f"{CONFIG_ENV}={explicit}: no such file",
                              hint=f"unset {CONFIG_ENV} or point it at a TOML file")
        files.append(path)
    else:
        user = _user_config_dir() / "config.toml"
        if user.is_file():
            files.append(user)
    for name in ("pyproject.toml", "rtenv.toml"):
        if (cwd / name).is_file():
            files.append(cwd / name)
    return files


def load_default_map(cwd: Path | None = None) -> dict[str, Any]:
    """Merge the config files into a click default_map."""
    merged: dict[str, Any] = {}
    for path in config_files(cwd):
        data = _toml_load(path)
        if path.name == "pyproject.toml":
            data = data.get("tool", {}).get("rtenv", {})
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a table of commands", path=str(path))
        merged = _merge(merged, _normalise(data))
    return merged
