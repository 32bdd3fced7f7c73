"""YAML held in a string inside YAML: KubeRay's `spec.runtimeEnvYAML` and `spec.serveConfigV2`
(block scalars, `|`), or an older RayJob's base64 `spec.runtimeEnv`.

The string is parsed with Ray's loader (`load_text`) and its positions are moved into the outer
file's coordinates, so findings name FILE lines: exactly for a literal block (`|`, `|-`, `|2`) and
for a one-line quoted or plain string without escapes; any other style (folded `>`, escapes,
base64) maps every position onto the string's own span in the file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from rtenv_cli.core.spec.loader import LoadedDoc, ParseError, Positions, Span, load_text

Mapper = Callable[[Span], Span]


@dataclass(frozen=True)
class Embedded:
    """One embedded document: its data and its parse error, both in outer-file coordinates."""

    prefix: tuple[Any, ...]  # where the string sits in the outer document
    data: object
    error: ParseError | None
    exact: bool  # positions are the embedded text's own (False: all on the string's span)


def _block_mapper(lines: list[str], value: Span, content: str) -> Mapper | None:
    """Line k of a literal block's content is file line `value.line + k`, shifted right by the
    block's indentation; None when the file text does not bear that out."""
    line = value.line - 1
    if line >= len(lines) or not lines[line][value.column - 1:].startswith("|"):
        return None
    inner = content.split("\n")
    while inner and inner[-1] == "":  # the chomped (or kept) final line breaks
        inner.pop()
    first = next((i for i, text in enumerate(inner) if text.strip()), None)
    if first is None:
        return None
    at = value.line + first  # 0-based index of the file line holding inner[first]
    if at >= len(lines) or not lines[at].endswith(inner[first]):
        return None
    indent = len(lines[at]) - len(inner[first])
    for k, text in enumerate(inner):
        file_line = value.line + k
        if file_line >= len(lines):
            return None
        expected = " " * indent + text if text else ""
        if lines[file_line].rstrip() != expected.rstrip():
            return None
    down, right = value.line, indent

    def shift(span: Span) -> Span:
        return Span(span.line + down, span.column + right, span.end_line + down,
                    span.end_column + right)

    return shift


def _inline_mapper(lines: list[str], value: Span, content: str) -> Mapper | None:
    """A one-line string written without escapes: columns shift by the quote, if any."""
    if value.line != value.end_line or "\n" in content or value.line > len(lines):
        return None
    raw = lines[value.line - 1][value.column - 1: value.end_column - 1]
    quoted = raw[:1] in ("'", '"') and raw[-1:] == raw[:1] and len(raw) > 1
    if (raw[1:-1] if quoted else raw) != content:
        return None
    right = value.column - 1 + (1 if quoted else 0)

    def shift(span: Span) -> Span:
        return Span(value.line, span.column + right, value.line, span.end_column + right)

    return shift


def _mapper(outer: LoadedDoc, path: tuple[Any, ...], content: str | None
            ) -> tuple[Mapper, bool]:
    """How spans of `content` move into the file; `content` None: the string was decoded
    (base64), so every span lands on the string."""
    value = outer.positions.value(path)
    if value is None:
        return (lambda span: span), False
    if content is not None:
        lines = (outer.text or "").split("\n")
        exact = _block_mapper(lines, value, content) or _inline_mapper(lines, value, content)
        if exact is not None:
            return exact, True
    return (lambda _span: value), False


def embed(outer: LoadedDoc, path: tuple[Any, ...], content: str, *, decoded: bool = False
          ) -> Embedded:
    """Parse `content` (the string at `path` of `outer`, or its decoded form) and merge its
    positions into `outer.positions` under `path`."""
    inner = load_text(content, f"{outer.path}:{'.'.join(map(str, path))}")
    shift, exact = _mapper(outer, path, None if decoded else content)
    merge(outer.positions, inner.positions, path, shift)
    error = inner.error
    if error is not None and error.span is not None:
        error = replace(error, span=shift(error.span))
    return Embedded(path, inner.data if error is None else None, error, exact)


def merge(into: Positions, inner: Positions, prefix: tuple[Any, ...], shift: Mapper) -> None:
    """Copy `inner`'s spans into `into` under `prefix`, moved by `shift`."""
    for path, span in inner.keys.items():
        key = (*prefix, *path)
        into.keys[key] = shift(span)
    for path, span in inner.values.items():
        if path:  # the string's own span stays the outer one
            key = (*prefix, *path)
            into.values[key] = shift(span)
    for dup in inner.duplicates:
        into.duplicates.append(replace(dup, path=(*prefix, *dup.path), first=shift(dup.first),
                                       second=shift(dup.second)))
