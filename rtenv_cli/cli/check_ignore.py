"""`rtenv check-ignore`: which rule drops a path from the package (like git check-ignore)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from rtenv_cli.cli.ls_files import ExcludeOpt, KindOpt, PackageKind
from rtenv_cli.cli.options import FormatOpt, TextJson
from rtenv_cli.core.errors import UsageError


def check_ignore(  # noqa: PLR0917 - typer maps each parameter to an option
    paths: Annotated[list[Path], typer.Argument(help="Paths to check.", metavar="PATH...")],
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show the deciding rule: "
                                          "SOURCE:LINE:PATTERN<TAB>PATH.")] = False,
    non_matching: Annotated[bool, typer.Option("--non-matching", "-n", help="Also list paths "
                                               "that are packaged.")] = False,
    root: Annotated[Path, typer.Option("--root", help="The package directory.")] = Path("."),
    runtime_env: Annotated[Path | None, typer.Option(
        "--runtime-env", "-r", metavar="FILE", show_default=False,
        help="A runtime_env file: each path is decided by the package it lies in (the "
        "working_dir or a py_module), with the file's excludes, as `rtenv push` packages it; "
        "a path in no package is reported as such.")] = None,
    kind: KindOpt = PackageKind.working_dir,
    exclude: ExcludeOpt = None,
    fmt: FormatOpt = TextJson.text,
) -> None:
    """Say which ignore rule (.gitignore, .rayignore, excludes, Ray's defaults) drops each path.

    Exit 0 when at least one path is ignored, 1 when none is (like git).

    Example:

        $ rtenv check-ignore -v data/model.ckpt

        $ rtenv check-ignore -v --root src -e '*.log' src/run.log

        $ rtenv check-ignore -v -r runtime_env.yaml src/run.log data/train.csv
    """
    from rtenv_cli.core.packaging.ignore import check_ignore as core_check
    from rtenv_cli.render.output import Output

    out = Output(fmt.value)
    if runtime_env is not None:
        if root != Path("."):
            raise UsageError("--root and --runtime-env both name the package",
                             hint="give one: --runtime-env takes each package from the file")
        decisions = _by_runtime_env(runtime_env, paths, tuple(exclude or ()))
    else:
        decisions = core_check(root.absolute(), [p.absolute() for p in paths], kind.value,
                               excludes=tuple(exclude or ()))
    shown = [(given, d) for given, d in zip(paths, decisions, strict=True)
             if d.ignored or non_matching]
    if out.is_machine:
        out.json({"root": str(root), "runtime_env": None if runtime_env is None else
                  str(runtime_env), "paths": [dict(d.to_dict(), path=str(g))
                                                for g, d in zip(paths, decisions, strict=True)]})
    else:
        for given, d in shown:
            if verbose:
                out.line(f"{d.source or '::'}\t{given}")
            else:
                out.line(str(given))
    if not any(d.ignored for d in decisions):
        raise typer.Exit(1)


OUTSIDE = "outside working_dir and py_modules"  # the source of a path in no package


def _by_runtime_env(path: Path, paths: list[Path], extra: tuple[str, ...]) -> list[Any]:
    """Each path's decision in the package of `path`'s runtime_env that holds it (the deepest,
    when a py_module lies inside the working_dir), with that package's excludes and `extra`."""
    import os
    from dataclasses import replace

    from rtenv_cli.core.packaging.ignore import IgnoreDecision, check_ignore
    from rtenv_cli.core.push import load_input, package_runtime_env

    data, base, _ = load_input(path)
    plans = package_runtime_env(data, base)
    decisions = []
    for given in paths:
        absolute = Path(os.path.abspath(given))
        owners = [p for p in plans if p.source == absolute or p.source in absolute.parents]
        if not owners:
            decisions.append(IgnoreDecision(str(given), True, OUTSIDE))
            continue
        plan = max(owners, key=lambda p: len(p.source.parts))
        [decision] = check_ignore(plan.source, [absolute], plan.kind,  # type: ignore[arg-type]
                                  excludes=(*plan.excludes, *extra))
        decisions.append(replace(decision, path=str(given)))
    return decisions


def register(app: typer.Typer) -> None:
    app.command(name="check-ignore")(check_ignore)
