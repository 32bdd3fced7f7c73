"""Config files: precedence is flag > env var > project config > user config > built-in default.

Flags and env vars are click's job; this module produces click's `default_map` from
`rtenv.toml` (or `[tool.rtenv]` in pyproject.toml) in the CWD, over the user config
(`<user config dir>/rtenv/config.toml`, or the file named by RTENV_CONFIG).

Tables are command names, keys are option names with dashes or underscores:

    [push]
    to = "file:///shared/rtenv"
    [cache.gc]
    keep-storage = "20GB"

With a schema (the CLI derives one from its commands' options), an unknown table or key, or a
value of the wrong type, is an error naming the file and the key, with the closest known name.
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rtenv_cli.core.errors import ConfigError

CONFIG_ENV = "RTENV_CONFIG"
PYPROJECT_TABLE = ("tool", "rtenv")


class Key(Protocol):
    """What a schema knows of one key: how to check a value."""

    def check(self, value: Any) -> Any:
        """The value to use (e.g. one string made a list); raise ValueError or TypeError."""


# table name -> Schema (a table of tables, such as [cache]) or Key
Schema = Mapping[str, Any]


@dataclass(frozen=True)
class ConfigFile:
    """One config file's rtenv table; `prefix` is where that table sits in the file."""

    path: Path
    table: dict[str, Any]
    prefix: tuple[str, ...] = ()


def _toml_load(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    try:
        with path.open("rb") as fh:
            table: dict[str, Any] = tomllib.load(fh)
            return table
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}", path=str(path),
                          hint="fix the TOML syntax, or set RTENV_CONFIG to another file") from None
    except UnicodeDecodeError as exc:  # TOML is UTF-8; tomllib raises this one as it is
        raise ConfigError(f"{path}: byte {exc.start} is not UTF-8 ({exc.reason})",
                          path=str(path), hint="save the file as UTF-8, or set RTENV_CONFIG to "
                          "another file") from None
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
    command reads it at start-up, and importing platformdirs is a visible part of a 0.3 s budget
    (benchmarks/results/fastpaths.json: "import platformdirs").
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


def read_config(cwd: Path | None = None) -> list[ConfigFile]:
    """The rtenv table of each config file, lowest precedence first."""
    out: list[ConfigFile] = []
    for path in config_files(cwd):
        if path.name == "pyproject.toml" and SKIP_FOREIGN_PYPROJECT and _foreign(path):
            out.append(ConfigFile(path, {}, PYPROJECT_TABLE))
            continue
        data: Any = _toml_load(path)
        prefix: tuple[str, ...] = ()
        if path.name == "pyproject.toml":
            for i, part in enumerate(PYPROJECT_TABLE):
                if not isinstance(data, dict) or part not in data:
                    data = {}
                    break
                data = data[part]
                if not isinstance(data, dict):
                    where = ".".join(PYPROJECT_TABLE[:i + 1])
                    raise ConfigError(f"{path}: {where} must be a table, not {_kind(data)}",
                                      path=str(path), hint=f"write it as [{where}]")
            prefix = PYPROJECT_TABLE
        out.append(ConfigFile(path, data, prefix))
    return out


# A project's pyproject.toml whose text never says "rtenv" has no [tool.rtenv] table (a key
# spelled with \u escapes aside), so it is not parsed: importing tomllib compiles its regexes,
# on every command run in a project (benchmarks/results/
# trees.json: "ablation: re-push, whole `rtenv push` process, every pyproject.toml parsed").
# A module switch, for that row.
SKIP_FOREIGN_PYPROJECT = True


def _foreign(path: Path) -> bool:
    """Whether pyproject.toml `path` never names rtenv (False when unreadable: the parse says
    why)."""
    try:
        return b"rtenv" not in path.read_bytes()
    except OSError:
        return False


def _kind(value: Any) -> str:
    names = ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (str, "a string"),
             (list, "an array"), (dict, "a table"))
    return next((name for t, name in names if isinstance(value, t)), "a date or time")


def _spelling(name: str) -> str:
    return name.replace("_", "-")


def _lookup(schema: Schema, key: str) -> tuple[str, Any] | None:
    """The schema's own name for KEY and its entry; dashes and underscores are the same."""
    wanted = _spelling(key)
    for name in schema:  # names only: a lazy schema builds just the entries that are used
        if _spelling(name) == wanted:
            return name, schema[name]
    return None


def _unknown(file: ConfigFile, where: tuple[str, ...], key: str, value: Any,
             schema: Schema) -> ConfigError:
    names = sorted(_spelling(n) for n in schema)
    close = difflib.get_close_matches(_spelling(key), names, n=1, cutoff=0.6)
    if isinstance(value, dict):
        what = f"unknown table [{'.'.join((*where, key))}]"
    else:
        what = f"unknown key {key!r}" + (f" in [{'.'.join(where)}]" if where else "")
    known = "known: " + ", ".join(names)
    suggestion = f"did you mean {close[0]!r}? " if close else ""
    return ConfigError(f"{file.path}: {what}", path=str(file.path),
                       hint=f"{suggestion}{known}")


def _checked(file: ConfigFile, table: dict[str, Any], schema: Schema,
             where: tuple[str, ...]) -> dict[str, Any]:
    """TABLE as click's default_map wants it (schema names), or a ConfigError."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        found = _lookup(schema, key)
        if found is None:
            raise _unknown(file, where, key, value, schema)
        name, entry = found
        here = (*where, key)
        if isinstance(entry, Mapping):
            if not isinstance(value, dict):
                keys = sorted(_spelling(n) for n in entry)
                raise ConfigError(
                    f"{file.path}: {'.'.join(here)} must be a table, not {_kind(value)}",
                    path=str(file.path),
                    hint=f"write [{'.'.join(here)}] and its keys under it"
                    + (f" (one of: {', '.join(keys)})" if keys else ""))
            out[name] = _checked(file, value, entry, here)
            continue
        if isinstance(value, dict):
            raise ConfigError(f"{file.path}: [{'.'.join(where)}] {key} must be a value, "
                              "not a table", path=str(file.path),
                              hint=f"write `{key} = ...` under [{'.'.join(where)}]")
        try:
            out[name] = entry.check(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{file.path}: [{'.'.join(where)}] {key} = {value!r}: {exc}",
                              path=str(file.path),
                              hint=f"see `rtenv {' '.join(where[len(file.prefix):])} --help` "
                              f"for --{_spelling(name)}") from None
    return out


def load_default_map(cwd: Path | None = None, schema: Schema | None = None) -> dict[str, Any]:
    """Merge the config files into a click default_map.

    With SCHEMA, every table and key is checked against it and named as the schema names it;
    without, keys are only spelled with underscores (for readers of one known table).
    """
    merged: dict[str, Any] = {}
    for file in read_config(cwd):
        table = _normalise(file.table) if schema is None else \
            _checked(file, file.table, schema, file.prefix)
        merged = _merge(merged, table)
    return merged
