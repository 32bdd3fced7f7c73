"""Option and argument types in --help as words, not Python types.

typer 0.29 shows a repeatable option's type as `<list[str]>` (or `<list[a|b]>`) and an
argument's type beside its metavar (`PATH... <list[str]>`). This shows `<a|b>` for a repeatable
choice (the help says "repeatable") and only the metavar when a parameter names one. It patches
typer's private `_TyperParameter.display_type` and `TyperArgument.display_type_rich` (typer is
capped below 0.30 in pyproject.toml); tests/cli/test_help.py fails when the patch does not apply.
"""

from __future__ import annotations

from typing import Any

_installed = False


def install() -> None:
    global _installed  # noqa: PLW0603 - patch once per process
    if _installed:
        return
    from typer import core

    parameter: Any = getattr(core, "_TyperParameter", None)
    argument: Any = getattr(core, "TyperArgument", None)
    if parameter is None or argument is None or not hasattr(parameter, "display_type"):
        return  # another typer: its own display stays
    shown = parameter.display_type

    def display_type(self: Any, ctx: Any) -> Any:
        text = shown(self, ctx)
        if isinstance(text, str) and text.startswith("<list[") and text.endswith("]>"):
            return "<" + text[len("<list["):-len("]>")] + ">"
        return text

    def argument_type(self: Any, ctx: Any) -> Any:
        return None if self.metavar is not None else self.display_type(ctx)

    parameter.display_type = display_type
    argument.display_type_rich = argument_type
    _installed = True
