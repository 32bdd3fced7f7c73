"""Write new values into a loaded YAML/JSON file by editing the text of each value in place.

A YAML library that dumps the whole file loses the user's comments (PyYAML) and often the
quoting and layout. `rtenv push` of a Serve config or a KubeRay manifest only swaps a few
scalars (a local path for a URI, a requirements file for its lines), so each new value replaces
the text of the old one at the span the loader recorded (`Positions`), written as a JSON
scalar or flow list (both YAML too), and every other byte stays as it was.

A runtime_env inside a YAML string (KubeRay's `runtimeEnvYAML`, `serveConfigV2`) is edited the
same way when its positions are the file's own (a literal block, see embedded.py); otherwise
the whole string is written anew: a double-quoted string, or base64 for `spec.runtimeEnv`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from rtenv_cli.core.errors import ConfigError
from rtenv_cli.core.spec.loader import LoadedDoc, Span

JsonPath = tuple[Any, ...]
_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./:@+=~-]*")  # a URI or path YAML reads as is
_BASE64_FIELDS = ("runtimeEnv",)  # KubeRay's older RayJob field: base64 of the YAML


def scalar_text(value: Any, quote: str = "") -> str:
    """`value` as YAML (and JSON) on one line, in the quoting of the value it replaces (`quote`:
    `"`, `'` or none): a plain scalar when YAML reads it back as the same string, else JSON
    (what a JSON file needs, and YAML reads)."""
    if isinstance(value, str) and quote == "'":
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, str) and not quote and _PLAIN.fullmatch(value) and _reads_back(value):
        return value
    return json.dumps(value, ensure_ascii=False)


def _reads_back(text: str) -> bool:
    import yaml

    try:
        return bool(yaml.safe_load(text) == text)
    except yaml.YAMLError:
        return False


class _Text:
    """The file's text with edits by (line, column) span, applied back to front."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0]
        for line in text.split("\n")[:-1]:
            self.starts.append(self.starts[-1] + len(line) + 1)
        self.edits: list[tuple[int, int, str]] = []

    def offset(self, line: int, column: int) -> int:
        return self.starts[line - 1] + column - 1

    def replace(self, span: Span, new: str) -> None:
        self.edits.append((self.offset(span.line, span.column),
                           self.offset(span.end_line, span.end_column), new))

    def result(self) -> str:
        text = self.text
        for start, end, new in sorted(self.edits, reverse=True):
            text = text[:start] + new + text[end:]
        return text


def rewrite(doc: LoadedDoc, values: Mapping[JsonPath, Any], drop: Sequence[JsonPath] = (),
            embedded: Sequence[tuple[JsonPath, Any]] = ()) -> str:
    """`doc`'s text with the value at each path of `values` replaced, and each entry in `drop`
    removed when it fills whole lines of a block mapping (left otherwise: Ray ignores what is
    dropped here). `embedded` lists `(path of a YAML string, its new data)`: a value under such a
    path whose position is not the file's own is written by rewriting the whole string."""
    if doc.text is None:
        raise ConfigError(f"{doc.path}: cannot rewrite an undecodable file", path=doc.path)
    text = _Text(doc.text)
    whole: set[JsonPath] = set()
    for path, value in values.items():
        holder = next((p for p, _d in embedded if path[:len(p)] == p), None)
        span = doc.positions.value(path)
        if span is None or (holder is not None and span == doc.positions.value(holder)):
            if holder is None:
                raise ConfigError(f"{doc.path}: {'.'.join(map(str, path))}: no position to "
                                  "rewrite", path=doc.path)
            whole.add(holder)
            continue
        start = text.offset(span.line, span.column)
        quote = text.text[start:start + 1] if text.text[start:start + 1] in ("'", '"') else ""
        text.replace(span, scalar_text(value, quote))
    for path in drop:
        holder = next((p for p, _d in embedded if path[:len(p)] == p), None)
        if holder not in whole:
            _drop(doc, text, path)
    for holder, data in embedded:
        if holder in whole:
            span = doc.positions.value(holder)
            if span is not None:  # always: a path under it had this span
                text.replace(span, _string(holder, data))
    return text.result()


def _drop(doc: LoadedDoc, text: _Text, path: JsonPath) -> None:
    key, value = doc.positions.keys.get(path), doc.positions.value(path)
    if key is None or value is None or doc.text is None:
        return
    lines = doc.text.split("\n")
    end_line, end_column = value.end_line, value.end_column
    if not lines[end_line - 1][:end_column - 1].strip():  # a block ends where the next begins
        end_line, end_column = end_line - 1, len(lines[end_line - 2]) + 1
    after = lines[end_line - 1][end_column - 1:].strip()
    if lines[key.line - 1][:key.column - 1].strip() or (after and not after.startswith("#")):
        return  # shares a line with another entry (a flow mapping): left as it is
    stop = text.starts[end_line] if end_line < len(text.starts) else len(text.text)
    text.edits.append((text.offset(key.line, 1), stop, ""))


def _string(holder: JsonPath, data: Any) -> str:
    import yaml

    dumped = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    if holder[-1] in _BASE64_FIELDS:
        import base64

        return base64.b64encode(dumped.encode("utf-8")).decode("ascii")
    return json.dumps(dumped, ensure_ascii=False)
