"""`validate_paths` / `validate_runtime_env`: Ray's verdict plus rtenv's rules, with positions."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtenv_cli.core.errors import UsageError
from rtenv_cli.core.lint.context import (
    DEFAULT_GLOBS,
    Context,
    FileCache,
    RunCache,
    ValidateOptions,
    coercion_hint,
    expects_string,
    set_literal_hint,
)
from rtenv_cli.core.lint.diagnostic import Diagnostic, Severity
from rtenv_cli.core.spec.loader import LoadedDoc, Positions, load_bytes, load_path
from rtenv_cli.core.spec.pipeline import Api, PipelineResult, run_pipeline

if TYPE_CHECKING:
    from rtenv_cli.core.spec.forms import Site

__all__ = ["DEFAULT_GLOBS", "Context", "FileReport", "ValidateOptions", "ValidateReport",
           "check_env", "coercion_hint", "expand_inputs", "expects_string", "validate_bytes",
           "validate_paths", "validate_runtime_env"]

_SHOWN_PATH = 200  # characters of an over-long path argument quoted in its error
STAGE_CODES = {"parse": "RTE001", "shape": "RTE002", "packaging": "RTE003", "upload": "RTE150",
               "setup_hook": "RTE004", "json": "RTE007", "server": "RTE008", "driver": "RTE008"}


@dataclass(frozen=True)
class FileReport:
    path: str
    valid: bool
    diagnostics: tuple[Diagnostic, ...]
    normalized: dict[str, Any] | None
    notes: tuple[str, ...] = ()
    kind: str = "runtime_env"
    source: str | None = field(default=None, repr=False, compare=False)
    # env_vars secret values: the renderer hides them in source excerpts too
    secrets: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    # which check decided a Serve config: Serve's own schema, or rtenv's table (serve_schema.py)
    serve_check: str | None = None

    def count(self, severity: Severity) -> int:
        return sum(1 for d in self.diagnostics if d.severity == severity)

    def to_dict(self) -> dict[str, Any]:
        out = {"path": self.path, "kind": self.kind, "valid": self.valid,
               "diagnostics": [d.to_dict() for d in self.diagnostics],
               "normalized": self.normalized, "notes": list(self.notes)}
        if self.serve_check is not None:
            out["serve_check"] = self.serve_check
        return out


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

    def consumers(self) -> dict[str, int]:
        """How many files each tool reads (`consumer`), in the order the files come."""
        out: dict[str, int] = {}
        for f in self.files:
            name = consumer(f.kind, self.api)
            out[name] = out.get(name, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"api": self.api, "valid": self.valid, "exit_code": self.exit_code,
                "summary": {"files": len(self.files),
                            "invalid": sum(1 for f in self.files if not f.valid),
                            "errors": self.count(Severity.ERROR),
                            "warnings": self.count(Severity.WARNING),
                            "infos": self.count(Severity.INFO)},
                "files": [f.to_dict() for f in self.files]}


_MESSAGE_HINTS = (
    ("setup_timeout_seconds must be greater", "use a positive number of seconds, or -1 for no "
     "timeout"),
    ("must be of type int", "write a whole number of seconds, unquoted"),
    ("eager_install must be a boolean", "write true or false, unquoted"),
    ("can only have these fields", "see `rtenv rules RTE006` for the allowed keys"),
)


def _rule_modules() -> list[Callable[[Context], Iterable[Diagnostic]]]:
    from rtenv_cli.core.lint.rules import CHECKS

    return list(CHECKS)


def _ray_diagnostics(ctx: Context, result: PipelineResult) -> list[Diagnostic]:
    out = []
    for exc in result.errors:
        code = STAGE_CODES.get(exc.stage)
        if code is None:
            code = "RTE005" if exc.check == "conflict" else "RTE006"
        rel = exc.json_path[len(ctx.prefix):]
        hint = exc.hint
        value = _lookup(ctx.data, rel)
        if value is not _MISSING and expects_string(rel):
            hint = coercion_hint(ctx.raw(rel), value) or hint
        for depth in (len(rel), len(rel) - 1):  # the value, or the mapping holding the key
            holder = _lookup(ctx.data, rel[:depth]) if depth > 0 else _MISSING
            literal = set_literal_hint(ctx.raw(rel[:depth]), holder) \
                if holder is not _MISSING else None
            if literal:
                hint = literal
                break
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
              file_dir: Path | None, options: ValidateOptions, cache: FileCache | None = None
              ) -> tuple[list[Diagnostic], PipelineResult]:
    ray = options.semantics()
    cache = FileCache() if cache is None else cache
    result = run_pipeline(data, ray, prefix=prefix, cache=cache)
    ctx = Context(data, prefix, positions, text, ray.base_dir, file_dir, options, result, ray.env,
                  cache)
    diags = _ray_diagnostics(ctx, result)
    if options.compare_apis:
        other = ray.other().api
        alt = run_pipeline(data, ray.other(), prefix=prefix, cache=cache)
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


# the tool that reads each form of file (FileReport.kind, spec/forms.py); a plain runtime_env
# (or one under a lone `runtime_env:` key) is read by the entry point --api names
CONSUMERS = {"job": "ray job submit", "serve": "serve deploy",
             "kuberay": "kubectl apply (KubeRay)", "anyscale-job": "anyscale job submit",
             "anyscale-service": "anyscale service deploy"}


def consumer(kind: str, api: str) -> str:
    """Who reads a file of form `kind`: `rtenv validate`'s summary names it."""
    return CONSUMERS.get(kind) or ("ray job submit" if api == "job-submit" else "ray.init")


def _api_name(api: str) -> str:
    return "`ray job submit`" if api == "job-submit" else "`ray.init(runtime_env=...)`"


def _finish(path: str, doc: LoadedDoc, options: ValidateOptions, run: RunCache | None = None
            ) -> FileReport:
    if run is None:  # one file: its own run (the next validation walks afresh)
        own = RunCache()
        try:
            return _finish(path, doc, options, own)
        finally:
            own.close()
    from rtenv_cli.core.lint import sites
    from rtenv_cli.core.spec.forms import read as read_form

    form = read_form(doc)
    if form is None:
        assert doc.error is not None  # noqa: S101 - forms.read reads every document that parses
        span = doc.error.span
        diag = Diagnostic("RTE001", Severity.ERROR, f"{doc.error.kind}: {doc.error.message}",
                          span.line if span else None, span.column if span else None,
                          span.end_line if span else None, span.end_column if span else None,
                          _parse_hint(doc.error.kind, doc.error.message), (), True)
        report = FileReport(path, False, (diag,), None, kind="unknown", source=doc.text)
        return _as_template(report, f"{doc.error.kind}: {doc.error.message}")
    cache = FileCache(run)
    doc = form.doc
    file_dir = None if path == "-" else Path(path).resolve().parent
    kind = form.kind
    diags: list[Diagnostic] = sites.form_findings(form)
    notes: list[str] = list(form.notes)
    serve_check = None
    if form.serve_configs:  # Serve's schema (pydantic, Ray) only for Serve configs
        from rtenv_cli.core.lint import serve_schema

        found, serve_check, note = serve_schema.check(form.serve_configs, form.sites,
                                                      doc.positions)
        diags += found
        notes.extend([note] if note else [])
    normalized: dict[str, Any] = {}
    valid = not any(d.ray_error for d in diags)

    def check(data: Any, prefix: tuple[Any, ...]) -> tuple[list[Diagnostic], PipelineResult]:
        return check_env(data, prefix=prefix, positions=doc.positions, text=doc.text,
                         file_dir=file_dir, options=options, cache=cache)

    for site in form.sites:
        _share_scans(site.data, run)
        found, result = sites.check_site(site, check, options.api, doc.positions)
        diags.extend(found)
        notes.extend(n for n in result.notes if n not in notes)
        valid = valid and not any(d.ray_error for d in found)
        key = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in site.prefix) or "."
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
    secrets = _secrets(form.sites)
    if secrets:
        from rtenv_cli.core.lint.rules.env_vars import scrub

        diags = [replace(d, message=scrub(d.message, secrets),
                         hint=scrub(d.hint, secrets) if d.hint else d.hint) for d in diags]
    final = normalized.get(".") if kind in ("runtime_env", "wrapped") else normalized
    return _as_template(FileReport(path, valid, tuple(diags), final if valid else None,
                                   tuple(notes), kind, doc.text, frozenset(secrets),
                                   serve_check), None)


def _as_template(report: FileReport, parse_error: str | None) -> FileReport:
    """A template (Jinja, OmegaConf, ...) gets one RTE107 instead of what its placeholders
    cause (a parse error, "variable not set", a missing `{{ dir }}`); the verdict stays Ray's
    on the file as it stands."""
    if report.source is None or "{" not in report.source:
        return report  # every placeholder form has a brace
    from rtenv_cli.core.lint import template

    found = template.find_placeholder(report.source)
    if found is None:
        return report
    diag = Diagnostic("RTE107", _sev("RTE107"), template.describe(found, parse_error),
                      found.line, found.column, found.line, found.end_column, found.hint, (),
                      not report.valid)
    return replace(report, diagnostics=(diag,), normalized=None, notes=())


def _share_scans(data: Any, run: RunCache) -> None:
    """One scan per local package for both pipelines, the size rules and the run's other files;
    packaging is only imported for a runtime_env with a local working_dir or py_module
    (validate must start fast: a URI is never scanned)."""
    if not isinstance(data, dict):
        return
    from rtenv_cli.core.lint.rules.paths import local_paths  # the rules' own "local path"

    if any(where[0] in ("working_dir", "py_modules") for where, _path in local_paths(data)):
        run.share_package_scans()


def _secrets(found_in: Sequence[Site]) -> set[str]:
    from rtenv_cli.core.lint.rules.env_vars import secret_values
    from rtenv_cli.core.lint.rules.uris import uri_secrets

    found: set[str] = set()
    for site in found_in:
        data = site.data
        if site.origin == "wrapped" and isinstance(data, dict):
            data = data.get("runtime_env")
        if isinstance(data, dict):
            found |= secret_values(data.get("env_vars")) | uri_secrets(data)
    return found


def _strip_placeholders(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """Drop the stand-in URIs of local packages that were not hashed (over Ray's limits)."""
    if value is None:
        return None
    from rtenv_cli.core.spec.package_stage import PLACEHOLDER_URI

    out = dict(value)
    if out.get("working_dir") == PLACEHOLDER_URI:
        del out["working_dir"]
    if isinstance(out.get("py_modules"), list):
        out["py_modules"] = [m for m in out["py_modules"] if m != PLACEHOLDER_URI]
    return out


def _sev(code: str) -> Severity:
    from rtenv_cli.core.lint.registry import severity_of

    return severity_of(code)


def _parse_hint(kind: str, message: str = "") -> str:
    from rtenv_cli.core.spec.loader import UNCLOSED_QUOTE

    if message.startswith(UNCLOSED_QUOTE):
        return ("the quote that opens here is never closed (YAML reads on to the end of the "
                "file): close it, or drop the quotes (a value with `: ` or ` #` needs them)")
    return {
        "ScannerError": "Ray parses .json files as YAML 1.1 too: indent with spaces, not tabs",
        "ComposerError": "a runtime_env file holds one document: remove the extra `---`",
        "ConstructorError": "yaml.safe_load refuses Python tags: write plain YAML values",
        "UnicodeDecodeError": "save the file as UTF-8",
        "OSError": "check the path and its permissions",
        "LimitExceeded": "a runtime_env file is small and plain: write the values out",
        "RecursionError": "flatten the nesting: no runtime_env field nests this deep",
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
    """Files to validate; directories are searched recursively (lint/discover.py: by name,
    Serve configs, job specs and other runtime_envs by content, .gitignore respected); `-` is
    standard input."""
    out: list[str] = []
    for raw in paths:
        if raw == "-":
            out.append(raw)
            continue
        path = Path(raw)
        try:
            is_dir, exists = path.is_dir(), path.exists()
        except OSError as exc:  # e.g. a name over the system's limit
            shown = raw if len(raw) <= _SHOWN_PATH else raw[:_SHOWN_PATH] + "..."
            raise UsageError(f"{shown}: {exc.strerror}",
                             hint="pass runtime_env files (.yaml/.yml/.json), directories or "
                             "-") from None
        if is_dir:
            from rtenv_cli.core.lint.discover import find_files

            out.extend(find_files(path, globs, by_content=tuple(globs) == DEFAULT_GLOBS))
        elif exists:
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
    run = RunCache()  # files sharing a working_dir walk it once
    try:
        for name in files:
            doc = load_bytes(stdin or b"", "-") if name == "-" else load_path(name)
            reports.append(_finish(name, doc, options, run))
    finally:
        run.close()
    return ValidateReport(tuple(reports), options.api, options.fail_on)
