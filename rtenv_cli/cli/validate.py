"""`rtenv validate`: Ray's verdict for runtime_env files, plus rtenv's rules, with positions."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from rtenv_cli.core.errors import UsageError


class ValidateFormat(str, Enum):
    text = "text"
    json = "json"
    github = "github"
    sarif = "sarif"


class ApiChoice(str, Enum):
    job_submit = "job-submit"
    ray_init = "ray-init"


class FailOn(str, Enum):
    error = "error"
    warning = "warning"


def validate(  # noqa: PLR0917 - typer maps each parameter to an option
    paths: Annotated[list[str] | None, typer.Argument(
        help="runtime_env files (.yaml/.yml/.json), Serve configs or job specs; directories "
        "are searched recursively (.gitignore respected); - reads standard input. None: the "
        "current directory.", show_default=False)] = None,
    api: Annotated[ApiChoice, typer.Option(
        "--api", help="Which Ray entry point to match: `ray job submit --runtime-env` or "
        "`ray.init(runtime_env=...)`.", case_sensitive=False)] = ApiChoice.job_submit,
    base_dir: Annotated[Path | None, typer.Option(
        "--base-dir", help="Resolve relative paths against this directory instead of the "
        "current one (Ray uses the current directory).", show_default=False)] = None,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Treat unknown fields (RTE101) as errors.")] = False,
    fail_on: Annotated[FailOn, typer.Option(
        "--fail-on", help="Exit 1 on warnings too.", case_sensitive=False)] = FailOn.error,
    resolve: Annotated[bool, typer.Option(
        "--resolve", help="Check that pip/uv requirements resolve (runs `uv pip compile`).")]
        = False,
    glob: Annotated[list[str] | None, typer.Option(
        "--glob", help="File name pattern for directories (repeatable). Default: "
        "*runtime_env*.{yaml,yml,json} and *runtime-env*.{yaml,yml,json}.",
        show_default=False)] = None,
    ray_version: Annotated[str | None, typer.Option(
        "--ray-version", help="The cluster's Ray version, for RTE140 (default: the installed "
        "Ray, else 2.60.0).", show_default=False)] = None,
    fmt: Annotated[ValidateFormat, typer.Option(
        "--format", "-f", help="Output format.", case_sensitive=False)] = ValidateFormat.text,
    show_info: Annotated[bool, typer.Option(
        "--show-info", "--verbose", "-v", help="Also show info-level findings in text and "
        "github output (json and sarif always hold them; they never change the exit status).")]
        = False,
) -> None:
    """Check runtime_env files exactly as Ray 2.60.0 would, and beyond.

    The verdict (valid or not) is Ray's: parsing with yaml.safe_load, packaging of local
    working_dir/py_modules, RuntimeEnv(...) and its validators, JSON encoding, and the checks
    that fail the job at start. Every error is reported at once, with file:line:col. rtenv's own
    rules (typos, env_vars Ray overrides, ray pins, sizes, ...) add warnings; see `rtenv rules`.

    Without a path it checks the current directory: files named *runtime_env* or
    *runtime-env* (.yaml/.yml/.json), and Serve configs and job specs found by name and content,
    skipping what .gitignore ignores; it says which files it checked.

    Exit status: 0 all valid, 1 any invalid (or errors / --fail-on warning), 2 usage error.

    Example:

        $ rtenv validate

        $ rtenv validate runtime_env.yaml

        $ rtenv validate --api ray-init --format json configs/

        $ cat runtime_env.json | rtenv validate -
    """
    from rtenv_cli.core.lint.engine import DEFAULT_GLOBS, ValidateOptions, validate_paths
    from rtenv_cli.render.output import Output

    out = Output(fmt.value)
    searched = not paths
    if base_dir is not None and not base_dir.is_dir():
        raise UsageError(f"--base-dir {base_dir}: not a directory")
    options = ValidateOptions(
        api=api.value, base_dir=base_dir.resolve() if base_dir else None, strict=strict,
        fail_on=fail_on.value, resolve=resolve, globs=tuple(glob) if glob else DEFAULT_GLOBS,
        ray_version=ray_version)
    stdin = _read_stdin() if paths and "-" in paths else None
    report = validate_paths(paths or ["."], options, stdin=stdin)
    if not report.files:
        where = " in the current directory" if searched else ""
        raise UsageError(f"no runtime_env files found{where}",
                         hint="name the files, or pass --glob '*.yaml' for a directory")
    if searched:  # say what "everything here" turned out to be (stderr: stdout stays data)
        names = ", ".join(f.path.removeprefix("./") for f in report.files)
        out.message(f"checking {len(report.files)} file{'s' if len(report.files) != 1 else ''} "
                    f"found in the current directory: {names}")
    from rtenv_cli.render import diagnostics

    if fmt is ValidateFormat.json:
        out.json(report)
    elif fmt is ValidateFormat.github:
        diagnostics.render_github(out, report, show_info=show_info)
    elif fmt is ValidateFormat.sarif:
        diagnostics.render_sarif(out, report)
    else:
        diagnostics.render_text(out, report, show_info=show_info)
    raise typer.Exit(report.exit_code)


def _read_stdin() -> bytes:
    from rtenv_cli.core.spec.loader import read_stream

    raw = read_stream(getattr(sys.stdin, "buffer", None))
    if raw is None:
        raise UsageError("-: standard input is closed", hint="pipe the runtime_env in, or pass "
                         "the file's path instead of -")
    return raw


def register(app: typer.Typer) -> None:
    app.command(name="validate")(validate)
