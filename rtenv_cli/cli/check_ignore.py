"""`rtenv check-ignore`: which rule drops a path from the package (like git check-ignore)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rtenv_cli.cli.ls_files import ExcludeOpt, KindOpt, PackageKind
from rtenv_cli.cli.options import FormatOpt, TextJson


def check_ignore(  # noqa: PLR0917 - typer maps each parameter to an option
    paths: Annotated[list[Path], typer.Argument(help="Paths to check.", metavar="PATH...")],
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show the deciding rule: "
                                          "SOURCE:LINE:PATTERN<TAB>PATH.")] = False,
    non_matching: Annotated[bool, typer.Option("--non-matching", "-n", help="Also list paths "
                                               "that are packaged.")] = False,
    root: Annotated[Path, typer.Option("--root", help="The package directory.")] = Path("."),
    kind: KindOpt = PackageKind.working_dir,
    exclude: ExcludeOpt = None,
    fmt: FormatOpt = TextJson.text,
) -> None:
    """Say which ignore rule (.gitignore, .rayignore, excludes, Ray's defaults) drops each path.

    Exit 0 when at least one path is ignored, 1 when none is (like git).

    Example:

        $ rtenv check-ignore -v data/model.ckpt

        $ rtenv check-ignore -v --root src -e '*.log' src/run.log
    """
    from rtenv_cli.core.packaging.ignore import check_ignore as core_check
    from rtenv_cli.render.output import Output

    out = Output(fmt.value)
    decisions = core_check(root.absolute(), [p.absolute() for p in paths], kind.value,
                           excludes=tuple(exclude or ()))
    shown = [(given, d) for given, d in zip(paths, decisions, strict=True)
             if d.ignored or non_matching]
    if out.is_machine:
        out.json({"root": str(root), "paths": [dict(d.to_dict(), path=str(g))
                                                for g, d in zip(paths, decisions, strict=True)]})
    else:
        for given, d in shown:
            if verbose:
                out.line(f"{d.source or '::'}\t{given}")
            else:
                out.line(str(given))
    if not any(d.ignored for d in decisions):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command(name="check-ignore")(check_ignore)
