"""What a rule sees (`Context`), the options of a validate run, and the helpers rules and the
engine share. Rules and the engine both depend on this module; it depends on neither."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtenv_cli.core.lint.diagnostic import Diagnostic, Severity
from rtenv_cli.core.spec.fields import string_slots
from rtenv_cli.core.spec.loader import Positions, Span

if TYPE_CHECKING:
    from rtenv_cli.core.packaging.packscan import Walked
    from rtenv_cli.core.spec.construct import RaySemantics
    from rtenv_cli.core.spec.pipeline_result import Api, PipelineResult

DEFAULT_GLOBS = ("*runtime_env*.yaml", "*runtime_env*.yml", "*runtime_env*.json",
                 "*runtime-env*.yaml", "*runtime-env*.yml", "*runtime-env*.json")


@dataclass(frozen=True)
class ValidateOptions:
    api: Api = "job-submit"
    base_dir: Path | None = None  # Ray resolves relative paths against the CWD
    strict: bool = False  # unknown keys become errors
    fail_on: str = "error"  # "error" or "warning"
    resolve: bool = False  # run `uv pip compile` on pip/uv requirements
    globs: tuple[str, ...] = DEFAULT_GLOBS
    ray_version: str | None = None  # the cluster's Ray; default: the installed one, else 2.60.0
    env: Mapping[str, str] | None = None  # the submitting process's environment
    compare_apis: bool = True  # report where job-submit and ray-init disagree

    @classmethod
    def before_submit(cls, api: Api, env: Mapping[str, str]) -> ValidateOptions:
        """What a command checks a runtime_env with just before it hands it to Ray itself (push,
        run): Ray's verdict for that one entry point, in the environment the command runs in."""
        return cls(api=api, env=dict(env), compare_apis=False)

    def semantics(self) -> RaySemantics:
        """How Ray reads the runtime_envs of this run: the one value the pipeline and the
        construction step take."""
        from rtenv_cli.core.spec.construct import RaySemantics

        return RaySemantics(Path(self.base_dir) if self.base_dir else Path.cwd(), self.api,
                            os.environ if self.env is None else self.env)


@dataclass
class RunCache:
    """What one validate run computes once for all its files: the walks of each local package
    and the Ray URIs computed from them, keyed by the package's absolute path, kind, excludes
    and Ray's ignore switches. `validate_paths` makes one per call, so files sharing a
    working_dir walk it once, and the next run (an edited tree) walks afresh."""

    walks: dict[tuple[Any, ...], Walked] = field(default_factory=dict)
    uris: dict[tuple[Any, ...], str] = field(default_factory=dict)
    _scans_memo: AbstractContextManager[None] | None = None

    def share_package_scans(self) -> None:
        """From now until `close`, packaging's scans are memoized for the whole run (entered on
        the first local package: packaging is only imported when a file has one)."""
        if self._scans_memo is None:
            from rtenv_cli.core.packaging.walk import memoized_scans

            self._scans_memo = memoized_scans()
            self._scans_memo.__enter__()

    def close(self) -> None:
        if self._scans_memo is not None:
            self._scans_memo.__exit__(None, None, None)
            self._scans_memo = None


@dataclass
class FileCache:
    """What one file's checks compute once and share: package walks (pipeline and rules, from
    the run's `RunCache`), the size scans of each runtime_env (size and excludes rules), the
    source split in lines. The engine makes one per file."""

    run: RunCache = field(default_factory=RunCache)
    scans: dict[tuple[Any, ...], list[Any]] = field(default_factory=dict)
    _lines: tuple[str, list[str]] | None = None

    @property
    def walks(self) -> dict[tuple[Any, ...], Walked]:
        return self.run.walks

    @property
    def uris(self) -> dict[tuple[Any, ...], str]:
        return self.run.uris

    def lines(self, text: str) -> list[str]:
        if self._lines is None or self._lines[0] is not text:
            self._lines = (text, text.split("\n"))
        return self._lines[1]


@dataclass
class Context:
    """What a rule sees: one runtime_env, where it sits in its file, and Ray's result for it."""

    data: Any
    prefix: tuple[Any, ...]
    positions: Positions
    text: str | None
    base_dir: Path
    file_dir: Path | None
    options: ValidateOptions
    pipeline: PipelineResult
    env: Mapping[str, str]
    cache: FileCache = field(default_factory=FileCache)

    def span(self, path: Sequence[Any], prefer: str = "key") -> Span | None:
        full = (*self.prefix, *path)
        first = self.positions.value if prefer == "value" else self.positions.key
        return first(full) or self.positions.best(full)

    def diag(self, code: str, message: str, path: Sequence[Any] = (), *,
             severity: Severity | None = None, hint: str | None = None,
             prefer: str = "key", ray_error: bool = False) -> Diagnostic:
        from rtenv_cli.core.lint.registry import severity_of

        span = self.span(path, prefer)
        return Diagnostic(code, severity or severity_of(code), message,
                          span.line if span else None, span.column if span else None,
                          span.end_line if span else None, span.end_column if span else None,
                          hint, (*self.prefix, *path), ray_error)

    def raw(self, path: Sequence[Any]) -> str | None:
        """The source text of a value (None for non-scalars or without text)."""
        span = self.positions.value((*self.prefix, *path))
        if span is None or self.text is None or span.line != span.end_line:
            return None
        lines = self.cache.lines(self.text)
        if span.line - 1 >= len(lines):
            return None
        return lines[span.line - 1][span.column - 1: span.end_column - 1]


def diag_at(positions: Positions, code: str, message: str, path: tuple[Any, ...], *,
            hint: str | None = None, ray_error: bool = False, prefer: str = "key"
            ) -> Diagnostic:
    """A finding at `path` of a document (no runtime_env Context needed)."""
    from rtenv_cli.core.lint.registry import severity_of

    first = positions.value if prefer == "value" else positions.key
    span = first(path) or positions.best(path)
    return Diagnostic(code, severity_of(code), message, span.line if span else None,
                      span.column if span else None, span.end_line if span else None,
                      span.end_column if span else None, hint, path, ray_error)


_STRING_SLOTS = string_slots()  # from the field table


def walk(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every node of a parsed runtime_env value with its JSON path (`path` + keys and list
    indexes), the value itself first, depth first."""
    yield path, value
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from walk(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from walk(item, (*path, index))


def expects_string(path: Sequence[Any]) -> bool:
    """Is `path` (relative to the runtime_env) a place where Ray wants a string?"""
    for slot in _STRING_SLOTS:
        if len(slot) == len(path) and all(
                s == p or (s == "*" and isinstance(p, str)) or (s == "#" and isinstance(p, int))
                for s, p in zip(slot, path, strict=True)):
            return True
    return False


def set_literal_hint(raw: str | None, value: Any) -> str | None:
    """`{"torch", "numpy"}`: YAML's flow mapping of keys without values (a Python set literal,
    most likely), with the list meant."""
    if not isinstance(value, dict) or not value or any(v is not None for v in value.values()) \
            or raw is None or not raw.lstrip().startswith("{") or ":" in raw:
        return None
    items = ", ".join(str(k) for k in value)
    return (f"YAML reads `{raw.strip()}` as a mapping of keys without values, not a set: "
            f"write a list, `[{items}]`")


def coercion_hint(raw: str | None, value: Any) -> str | None:
    """Why YAML 1.1 made `raw` a non-string, and the quoted fix."""
    if raw is None or not raw or raw[0] in "\"'[{|>&*!":
        return None
    import datetime

    if raw[:1].isdigit() and isinstance(value, (int, float)) and not isinstance(value, bool) \
            and raw == str(value):
        return f"write it as a string: \"{raw}\""
    kinds = ((bool, "a boolean"), (int, "an integer"), (float, "a float"),
             (datetime.datetime, "a timestamp"), (datetime.date, "a date"),
             (type(None), "null"))
    for typ, name in kinds:
        if isinstance(value, typ):
            return f"YAML 1.1 reads `{raw}` as {name} ({value!r}); quote it: \"{raw}\""
    return None
