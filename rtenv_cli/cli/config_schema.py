"""The config files' schema, derived from the commands themselves: a table per command (a table
of tables for a group such as `cache`), a key per long option, checked by the option's own type.

Adding an option to a command adds its key; nothing else lists them. Only the tables a config
file uses are built (building a command imports its module).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


class OptionKey:
    """One option as a config key: the value must be what the option itself accepts."""

    def __init__(self, command: Any, name: str, param: Any) -> None:
        self.command = command
        self.name = name
        self.param = param

    def check(self, value: Any) -> Any:
        param = self.param
        many = bool(param.multiple) or param.nargs != 1
        if many and not isinstance(value, list):
            value = [value]  # `glob = "*.yaml"` for a repeatable option
        if not many and isinstance(value, list):
            raise TypeError("takes one value, not an array")
        for item in value if many else [value]:
            if isinstance(item, (list, dict)):
                raise TypeError("takes plain values, not nested arrays or tables")
        if getattr(param, "is_flag", False) and not isinstance(value, bool):
            raise TypeError("is a flag: write true or false")
        ctx = self.command.context_class(self.command, info_name=self.command.name)
        try:
            param.process_value(ctx, value)
        except Exception as exc:  # the option's own verdict, whatever type it raises
            message = getattr(exc, "message", None) or str(exc)
            raise ValueError(message) from None
        return value


def _long_names(param: Any) -> list[str]:
    return [opt[2:] for opt in param.opts if opt.startswith("--")]


class OptionTable(Mapping[str, OptionKey]):
    """A command's table: its long options, as users write them (`max-size`, `format`)."""

    def __init__(self, command: Any) -> None:
        self._keys = {name: OptionKey(command, name, param) for param in command.params
                      if getattr(param, "param_type_name", "") == "option"
                      for name in _long_names(param)}

    def __getitem__(self, name: str) -> OptionKey:
        return self._keys[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


class CommandTables(Mapping[str, Any]):
    """A group's tables, one per sub-command, each built when first looked at, and a key per
    option of the group itself (the root's `color = "never"`, `quiet = true`)."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self._own = {name: p for p in group.params if not p.is_eager
                     for name in _long_names(p)}

    def __getitem__(self, name: str) -> Any:
        if name in self._own:
            return OptionKey(self.group, name, self._own[name])
        command = self.group.commands[name]
        if getattr(command, "commands", None) is not None:
            return CommandTables(command)
        return OptionTable(command)

    def __iter__(self) -> Iterator[str]:
        yield from self._own
        yield from self.group.commands

    def __len__(self) -> int:
        return len(self._own) + len(self.group.commands)


def config_key(param: Any, default_map: Mapping[str, Any]) -> str | None:
    """The key of PARAM in a checked default_map (one of its long names), if set there."""
    return next((name for name in _long_names(param) if name in default_map), None)
