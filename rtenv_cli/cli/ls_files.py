"""`rtenv ls-files`: what Ray would package from a directory."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from rtenv_cli.cli.options import FormatOpt, TextJson


class PackageKind(str, Enum):
    working_dir = "working_dir"
    py_module = "py_module"


KindOpt = Annotated[PackageKind, typer.Option(
    "--kind", case_sensitive=False, help="working_dir (Ray's default excludes apply) or "
    "py_module.")]
ExcludeOpt = Annotated[list[str] | None, typer.Option(
    "--exclude", "-e", metavar="PATTERN", help="An `excludes` pattern (repeatable), as in the "
    "runtime_env.")]


def ls_files(
    path: Annotated[Path, typer.Argument(help="The working_dir or py_module directory.")]
    = Path("."),
    kind: KindOpt = PackageKind.working_dir,
    exclude: ExcludeOpt = None,
    sizes: Annotated[bool, typer.Option("--sizes", "-s", help="Show sizes.")] = False,
    fmt: FormatOpt = TextJson.text,
) -> None:
    """List the files (and empty directories) Ray would package, after every ignore rule.

    Example:

        $ rtenv ls-files src/

        $ rtenv ls-files . -e '*.ckpt' --sizes
    """
    from rtenv_cli.core.packaging.walk import scan_package
    from rtenv_cli.render.output import Output
    from rtenv_cli.render.units import human_bytes

    out = Output(fmt.value)
    scan = scan_package(path, kind=kind.value, excludes=tuple(exclude or ()))
    rows = sorted((e for e in scan.entries if e.in_zip and e.relpath != "."),
                  key=lambda e: e.relpath)
    if out.is_machine:
        out.json({"root": str(scan.root), "file_count": scan.file_count,
                  "total_bytes": scan.total_bytes, "root_excluded": scan.root_excluded,
                  "entries": [e.to_dict() for e in rows]})
        return
    for e in rows:
        name = e.relpath + ("/" if e.is_dir else "")
        out.line(f"{human_bytes(e.size):>10}  {name}" if sizes else name)
    if scan.root_excluded:
        out.warning("the root itself is excluded: Ray would package nothing",
                    hint="see `rtenv check-ignore -v .`")


def register(app: typer.Typer) -> None:
    app.command(name="ls-files")(ls_files)
