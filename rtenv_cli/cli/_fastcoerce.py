"""Keep pydantic off the startup path of every command.

typer 0.29 coerces every non-flag parameter through a pydantic `TypeAdapter`, which imports
pydantic: a large part of the whole budget of `rtenv validate FILE` (< 0.3 s, and >= 3x faster
than importing Ray), measured in benchmarks/results/
validate.json: "ablation: validate train_runtime_env.yaml without cli/_fastcoerce".
For the simple annotations our commands use (str, Path, Enum choices, int, float, lists of
those), we coerce with typer's own pydantic-free helpers (`coerce_cli_choice`,
`coerce_cli_path`) and fall back to typer's adapter for anything else, so
behaviour and error messages stay typer's.

This patches typer's private internals (`typer.core._TyperParameter.get_runtime_param`,
`typer._coercion.RuntimeParam`), so pyproject.toml caps typer below the next minor version, and
tests/cli/test_app.py fails when the patch does not apply to a typer that coerces with pydantic.
Older typer (before 0.29) coerces without pydantic and needs no patch.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin

_installed = False
_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off", ""})


def needed() -> bool:
    """Whether this typer coerces parameters through pydantic (the patch's reason to exist)."""
    from importlib.util import find_spec

    return find_spec("typer._coercion") is not None


def _flag(v: Any, p: Any, c: Any) -> Any:
    if isinstance(v, bool):
        return v
    text = str(v).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    from typer import BadParameter

    raise BadParameter(f"{v!r} is not a valid boolean.", ctx=c, param=p)


def _text(v: Any, _p: Any, _c: Any) -> Any:
    return v if isinstance(v, str) else str(v)


def _path(v: Any, _p: Any, _c: Any) -> Any:
    return v if isinstance(v, Path) else Path(v)


def _choice(annotation: type[Enum], info: Any) -> Any:
    from typer import BadParameter, _param_types

    choices = list(annotation)

    def choice(v: Any, p: Any, c: Any) -> Any:
        try:
            return _param_types.coerce_cli_choice(
                v, choices=choices, case_sensitive=info.case_sensitive, ctx=c)
        except ValueError as exc:  # typer's adapter turns this into BadParameter too
            raise BadParameter(str(exc), ctx=c, param=p) from None
    return choice


def _number(annotation: type[int | float]) -> Any:
    def number(v: Any, p: Any, c: Any) -> Any:
        try:
            return annotation(v)
        except (TypeError, ValueError):
            from typer import BadParameter

            name = "integer" if annotation is int else "float"
            raise BadParameter(f"{v!r} is not a valid {name}.", ctx=c, param=p) from None
    return number


def _plain_path(info: Any) -> bool:
    """A Path option typer would only wrap: no checks, no resolution, no dash."""
    return not (info.exists or info.resolve_path or info.allow_dash
                or info.path_type is not None or info.file_okay is not True
                or info.dir_okay is not True or info.writable or info.readable is not True)


def leaf(annotation: Any, info: Any) -> Any | None:  # noqa: PLR0911 - one return per type
    """A coercion function for one value, or None when typer must handle it."""
    if info.parser is not None or getattr(info, "click_type", None) is not None:
        return None
    if annotation is bool:
        return _flag
    if annotation is str:
        return _text
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return _choice(annotation, info)
    if annotation is Path and _plain_path(info):
        return _path
    if annotation in (int, float) and info.min is None and info.max is None:
        return _number(annotation)
    return None


def install() -> bool:
    """Patch typer's coercion once per process; return whether the patch is in place."""
    global _installed  # noqa: PLW0603 - patch once per process
    if _installed:
        return True
    try:
        from typer import _coercion, _param_types  # noqa: F401 - present: typer coerces with pydantic
        from typer.core import _TyperParameter
    except ImportError:  # a typer without pydantic coercion: nothing to avoid
        return False
    _installed = True
    original = _TyperParameter.get_runtime_param

    @dataclass(frozen=True)
    class FastRuntimeParam(_coercion.RuntimeParam):
        fn: Any = None
        many: bool = False

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            if self.many:
                items = value if isinstance(value, (list, tuple)) else [value]
                return [self.fn(v, param, ctx) for v in items]
            return self.fn(value, param, ctx)

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None:
            desc = self.type_descriptor
            annotation, info = desc.annotation, desc.parameter_info
            fn = None
            many = False
            if desc.file_annotation is None:
                if get_origin(annotation) is list and len(get_args(annotation)) == 1:
                    fn, many = leaf(get_args(annotation)[0], info), True
                else:
                    fn = leaf(annotation, info)
            if fn is not None:
                self._runtime_param = FastRuntimeParam(info, annotation, fn, many)

        return original(self)

    _TyperParameter.get_runtime_param = get_runtime_param  # type: ignore[method-assign]
    return True
