"""`validate_paths` / `validate_runtime_env`: Ray's verdict plus rtenv's rules, with positions."""

from __future__ import annotations

import fnmatch
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import UsageError
from rtenv_cli.core.lint.diagnostic import Diagnostic, Severity
from rtenv_cli.core.lint.pipeline import Api, PipelineResult, run_pipeline
from rtenv_cli.core.spec.loader import LoadedDoc, Positions, Span, load_bytes, load_path
from rtenv_cli.core.spec.locate import document_kind, find_runtime_envs

DEFAULT_GLOBS = ("*runtime_env*.yaml", "*runtime_env*.yml", "*runtime_env*.json",
                 "*runtime-env*.yaml", "*runtime-env*.yml", "*runtime-env*.json")
_SKIP_DIRS = frozenset({".git", ".venv", "venv", "node_modules", "__pycache__", ".tox"})
STAGE_CODES = {"parse": "RTE001", "shape": "RTE002", "packaging": "RTE003",
               "setup_hook": "RTE004", "json": "RTE007", "server": "RTE008", "driver": "RTE008"}


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


@dataclass(frozen=True)
class FileReport:
    path: str
    valid: bool
    diagnostics: tuple[Diagnostic, ...]
    normalized: dict[str, Any] | None
    notes: tuple[str, ...] = ()
    kind: str = "runtime_env"
    source: str | None = field(default=None, repr=False, compare=False)

    def count(self, severity: Severity) -> int:
        return sum(1 for d in self.diagnostics if d.severity == severity)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "valid": self.valid,
                "diagnostics": [d.to_dict() for d in self.diagnostics],
                "normalized": self.normalized, "notes": list(self.notes)}


@dataclass(frozen=True)
class ValidateReport:
    files: tuple[FileReport, ...]
    api: Api = "job-submit"
    fail_on: str = "error"

    @property
    def valid(self) -> bool:
        return all(f.valid for f in self.files)

    def count(self, severity: Severity) -> int:
        return sum(f.count(severity) for f in self.files)

    @property
    def exit_code(self) -> int:
        if not self.valid or self.count(Severity.ERROR):
            return 1
        if self.fail_on == "warning" and self.count(Severity.WARNING):
            return 1
        return 0

    def to_dict(self) -> dict[str, Any]:
        return {"api": self.api, "valid": self.valid, "exit_code": self.exit_code,
                "summary": {"files": len(self.files),
                            "invalid": sum(1 for f in self.files if not f.valid),
                            "errors": self.count(Severity.ERROR),
                            "warnings": self.count(Severity.WARNING),
                            "infos": self.count(Severity.INFO)},
                "files": [f.to_dict() for f in self.files]}


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
        lines = self.text.split("\n")
        if span.line - 1 >= len(lines):
            return None
        return lines[span.line - 1][span.column - 1: span.end_column - 1]


_STRING_SLOTS = (
    ("env_vars", "*"), ("pip", "#"), ("pip", "packages", "#"), ("pip", "pip_version"),
    ("pip", "pip_install_options", "#"), ("uv", "#"), ("uv", "packages", "#"),
    ("uv", "uv_version"), ("uv", "uv_pip_install_options", "#"), ("image_uri",),
    ("py_executable",), ("worker_process_setup_hook",), ("java_jars", "#"), ("working_dir",),
    ("py_modules", "#"), ("excludes", "#"), ("config", "log_files", "#"), ("conda",),
    ("container", "image"), ("container", "worker_path"), ("container", "run_options", "#"),
)


def expects_string(path: Sequence[Any]) -> bool:
    """Is `path` (relative to the runtime_env) a place where Ray wants a string?"""
    for slot in _STRING_SLOTS:
        if len(slot) == len(path) and all(
                s == p or (s == "*" and isinstance(p, str)) or (s == "#" and isinstance(p, int))
                for s, p in zip(slot, path, strict=True)):
            return True
    return False


_MESSAGE_HINTS = (
    ("setup_timeout_seconds must be greater", "use a positive number of seconds, or -1 for no "
     "timeout"),
    ("must be of type int", "write a whole number of seconds, unquoted"),
    ("eager_install must be a boolean", "write true or false, unquoted"),
    ("can only have these fields", "see `rtenv rules RTE006` for the allowed keys"),
)


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


def _rule_modules() -> list[Callable[[Context], Iterable[Diagnostic]]]:
    from rtenv_cli.core.lint.rules import CHECKS

    return list(CHECKS)


def _ray_diagnostics(ctx: Context, result: PipelineResult) -> list[Diagnostic]:
    out = []
    for exc in result.errors:
        code = STAGE_CODES.get(exc.stage)
        if code is None:
            conflict = exc.message.startswith(("The 'pip' field", "The 'container' field",
                                               "The 'image_uri' field"))
            code = "RTE005" if conflict else "RTE006"
        rel = exc.json_path[len(ctx.prefix):]
        hint = exc.hint
        value = _lookup(ctx.data, rel)
        if value is not _MISSING and expects_string(rel):
            hint = coercion_hint(ctx.raw(rel), value) or hint
        if hint is None and "can only have these fields" in exc.message and rel:
            hint = _subkey_hint(rel)
        if hint is None:
            hint = next((h for m, h in _MESSAGE_HINTS if m in exc.message), None)
        if hint is None and ("is not a valid path" in exc.message or
                             "is not a valid file" in exc.message):
            hint = f"relative paths resolve against {ctx.base_dir} (the current directory)"
        prefer = "key" if code in ("RTE002", "RTE005") or "can only have these fields" in \
            exc.message else "value"
        out.append(ctx.diag(code, exc.message, rel, hint=hint, prefer=prefer, ray_error=True))
    return out


_MISSING = object()


def _subkey_hint(path: Sequence[Any]) -> str:
    from rtenv_cli.core.lint.rules.keys import suggest
    from rtenv_cli.core.spec import model

    known = model.PIP_KEYS if path[0] == "pip" else model.UV_KEYS
    guess = suggest(str(path[-1]), known)
    return (f"did you mean `{guess}`?" if guess else "allowed keys: " + ", ".join(known))


def _lookup(data: Any, path: Sequence[Any]) -> Any:
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return data


def check_env(data: Any, *, prefix: tuple[Any, ...], positions: Positions, text: str | None,
              file_dir: Path | None, options: ValidateOptions
              ) -> tuple[list[Diagnostic], PipelineResult]:
    base_dir = Path(options.base_dir) if options.base_dir else Path.cwd()
    env = os.environ if options.env is None else options.env
    result = run_pipeline(data, base_dir, options.api, env=env, prefix=prefix)
    ctx = Context(data, prefix, positions, text, base_dir, file_dir, options, result, env)
    diags = _ray_diagnostics(ctx, result)
    if options.compare_apis:
        other: Api = "ray-init" if options.api == "job-submit" else "job-submit"
        alt = run_pipeline(data, base_dir, other, env=env, prefix=prefix)
        if alt.valid != result.valid:
            if alt.valid:
                msg = f"{_api_name(other)} accepts this runtime_env, {_api_name(options.api)} "\
                      "does not"
            else:
                first = alt.errors[0]
                msg = (f"{_api_name(other)} rejects this runtime_env ({first.python_type}: "
                       f"{first.message})")
            diags.append(ctx.diag("RTE009", msg, (),
                                  hint=f"run `rtenv validate --api {other}` for the details"))
    for check in _rule_modules():
        diags.extend(check(ctx))
    return diags, result


def _api_name(api: str) -> str:
    return "`ray job submit`" if api == "job-submit" else "`ray.init(runtime_env=...)`"


def _finish(path: str, doc: LoadedDoc, options: ValidateOptions) -> FileReport:
    packscan = sys.modules.get("rtenv_cli.core.lint.packscan")
    if packscan is not None:  # walks are shared by one file's rules, never across files: a
        packscan.forget()  # long-running caller (watch) re-validates an edited tree
    if doc.error is not None:
        span = doc.error.span
        diag = Diagnostic("RTE001", Severity.ERROR, f"{doc.error.kind}: {doc.error.message}",
                          span.line if span else None, span.column if span else None,
                          span.end_line if span else None, span.end_column if span else None,
                          _parse_hint(doc.error.kind), (), True)
        return FileReport(path, False, (diag,), None, kind="unknown", source=doc.text)
    file_dir = None if path == "-" else Path(path).resolve().parent
    kind = document_kind(doc)
    diags: list[Diagnostic] = []
    notes: list[str] = []
    normalized: dict[str, Any] = {}
    valid = True
    for prefix, data in find_runtime_envs(doc):
        found, result = check_env(data, prefix=prefix, positions=doc.positions, text=doc.text,
                                  file_dir=file_dir, options=options)
        diags.extend(found)
        notes.extend(n for n in result.notes if n not in notes)
        valid = valid and not any(d.ray_error for d in found)
        key = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in prefix) or "."
        normalized[key.replace(".[", "[")] = _strip_placeholders(result.normalized)
    for dup in doc.positions.duplicates:
        diags.append(Diagnostic(
            "RTE103", _sev("RTE103"), f"duplicate key {dup.path[-1]!r}: the value on line "
            f"{dup.second.line} silently replaces the one on line {dup.first.line}",
            dup.second.line, dup.second.column, dup.second.end_line, dup.second.end_column,
            "remove one of them", dup.path))
    if options.strict:
        diags = [replace(d, severity=Severity.ERROR) if d.code == "RTE101" else d for d in diags]
    diags.sort(key=lambda d: (d.line or 0, d.column or 0, d.code))
    final = normalized.get(".") if kind == "runtime_env" else normalized
    return FileReport(path, valid, tuple(diags), final if valid else None, tuple(notes), kind,
                      doc.text)


def _strip_placeholders(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """Drop the stand-in URIs of local packages when rtenv's packaging module is missing."""
    if value is None:
        return None
    from rtenv_cli.core.lint.package_stage import PLACEHOLDER_URI

    out = dict(value)
    if out.get("working_dir") == PLACEHOLDER_URI:
        del out["working_dir"]
    if isinstance(out.get("py_modules"), list):
        out["py_modules"] = [m for m in out["py_modules"] if m != PLACEHOLDER_URI]
    return out


def _sev(code: str) -> Severity:
    from rtenv_cli.core.lint.registry import severity_of

    return severity_of(code)


def _parse_hint(kind: str) -> str:
    return {
        "ScannerError": "Ray parses .json files as YAML 1.1 too: indent with spaces, not tabs",
        "ComposerError": "a runtime_env file holds one document: remove the extra `---`",
        "ConstructorError": "yaml.safe_load refuses Python tags: write plain YAML values",
        "UnicodeDecodeError": "save the file as UTF-8",
        "OSError": "check the path and its permissions",
    }.get(kind, "fix the syntax at the marked position")


def validate_runtime_env(data: dict[str, Any], *, base_dir: Path, source: str = "<dict>",
                         options: ValidateOptions | None = None) -> FileReport:
    """Validate an in-memory runtime_env (no positions)."""
    options = replace(options or ValidateOptions(), base_dir=Path(base_dir))
    doc = LoadedDoc(source, data, Positions(), None, None)
    return _finish(source, doc, options)


def validate_bytes(raw: bytes, name: str, options: ValidateOptions) -> FileReport:
    return _finish(name, load_bytes(raw, name), options)


def expand_inputs(paths: Sequence[str], globs: Sequence[str]) -> list[str]:
    """Files to validate; directories are searched recursively; `-` is standard input."""
    out: list[str] = []
    for raw in paths:
        if raw == "-":
            out.append(raw)
            continue
        path = Path(raw)
        if path.is_dir():
            found = []
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
                for name in files:
                    if any(fnmatch.fnmatch(name, g) for g in globs):
                        found.append(str(Path(root) / name))
            out.extend(sorted(found))
        elif path.exists():
            out.append(raw)
        else:
            raise UsageError(f"{raw}: no such file or directory",
                             hint="pass runtime_env files (.yaml/.yml/.json), directories or -")
    return out


def validate_paths(paths: Sequence[str | Path], options: ValidateOptions | None = None, *,
                   stdin: bytes | None = None) -> ValidateReport:
    options = options or ValidateOptions()
    files = expand_inputs([str(p) for p in paths], options.globs)
    reports = []
    for name in files:
        if name == "-":
            reports.append(validate_bytes(stdin or b"", "-", options))
        else:
            reports.append(_finish(name, load_path(name), options))
    return ValidateReport(tuple(reports), options.api, options.fail_on)
