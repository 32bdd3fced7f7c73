"""The command table: which module implements each command, and its one-line help.

The root group imports a command's module only when that command runs (or its own help is asked
for): Typer builds a command from its signature at import, and building every command costs a
good part of the start-up budget of `rtenv validate FILE` (benchmarks/results/
fastpaths.json: "build every command"). `rtenv --help` lists the
commands from this table; tests/cli/test_commands.py checks that it matches the real commands.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

# name -> (module under rtenv_cli.cli, one-line help), in the order `rtenv --help` lists them
COMMANDS: dict[str, tuple[str, str]] = {
    "validate": ("validate", "Check runtime_env files exactly as Ray 2.60.0 would, and beyond."),
    "rules": ("rules", "List every validation rule, or explain one."),
    "agent": ("agent", "Run the rtenv node agent: a Ray-compatible package store, delta "
                       "uploads, environments."),
    "run": ("run", "Run CMD in the environment of a runtime_env, as a Ray worker would get it."),
    "push": ("push", "Package a runtime_env's working_dir/py_modules exactly like Ray and upload "
                     "what is missing."),
    "ls-files": ("ls_files", "List the files (and empty directories) Ray would package, after "
                             "every ignore rule."),
    "check-ignore": ("check_ignore", "Say which ignore rule (.gitignore, .rayignore, excludes, "
                                     "Ray's defaults) drops each path."),
    "explain": ("explain", "Show the exact environment a Ray 2.60 worker gets, and where each "
                           "variable comes from."),
    "cache": ("cache", "Inspect and clean environment caches: the embedded store, an rtenv "
                       "agent, Ray nodes."),
    "ray-env": ("ray_env", "Print the environment variables that load rtenv's Ray plugin, to "
                           "export before `ray start` on every node."),
    "daemon": ("daemon", "Keep a resident rtenv that runs `rtenv push` without starting Python "
                         "afresh."),
    "doctor": ("doctor", "Check this machine and a cluster for what rtenv's commands need, "
                         "with the fix for each problem."),
}


def build(name: str, finish: Callable[[Any], Any] = lambda command: command) -> Any:
    """Import the module of command NAME and build its click command (a group for `cache`),
    passed through `finish` (the root group gives it its context class). Built once per
    process and FINISH: the resident rtenv (resident/server.py) builds `push` before it forks,
    and each of its children runs that command."""
    key = (name, finish)
    if key not in _BUILT:
        import typer

        module = importlib.import_module(f"rtenv_cli.cli.{COMMANDS[name][0]}")
        holder = typer.Typer(rich_markup_mode=None, add_completion=False,
                             pretty_exceptions_show_locals=False)
        module.register(holder)
        _BUILT[key] = finish(typer.main.get_group(holder).commands[name])
    return _BUILT[key]


_BUILT: dict[tuple[str, Callable[[Any], Any]], Any] = {}


class LazyCommands(MutableMapping[str, Any]):
    """The root group's `commands`: every name of COMMANDS, each built on first access."""

    def __init__(self, finish: Callable[[Any], Any]) -> None:
        self._built: dict[str, Any] = {}
        self._finish = finish

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in COMMANDS:
                raise KeyError(name)
            self._built[name] = build(name, self._finish)
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        del self._built[name]

    def __iter__(self) -> Iterator[str]:
        yield from COMMANDS
        yield from (name for name in self._built if name not in COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS) + sum(1 for name in self._built if name not in COMMANDS)

    def __contains__(self, name: object) -> bool:
        return name in COMMANDS or name in self._built
