"""`rtenv ls-files`: what Ray would package from a directory."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

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
    path: Annotated[Path, typer.Argument(help="The working_dir or py_module directory, or a "
                                         "runtime_env file: then the files of each of its "
                                         "local working_dir/py_modules, with its excludes.")]
    = Path("."),
    kind: KindOpt = PackageKind.working_dir,
    exclude: ExcludeOpt = None,
    sizes: Annotated[bool, typer.Option("--sizes", "-s", help="Show sizes.")] = False,
    fmt: FormatOpt = TextJson.text,
) -> None:
    """List the files (and empty directories) Ray would package, after every ignore rule.

    Given a runtime_env file, lists each of its local working_dir and py_modules packages
    with the file's `excludes` (relative paths resolve against the current directory, as in
    `rtenv push`).

    Example:

        $ rtenv ls-files src/

        $ rtenv ls-files . -e '*.ckpt' --sizes

        $ rtenv ls-files runtime_env.yaml
    """
    from rtenv_cli.core.packaging.walk import scan_package
    from rtenv_cli.render.output import Output

    out = Output(fmt.value)
    if not path.is_file():
        scan = scan_package(path, kind=kind.value, excludes=tuple(exclude or ()))
        _show(out, scan, sizes, None)
        return
    from rtenv_cli.core.push import load_input, package_runtime_env

    data, base, label = load_input(path)
    plans = package_runtime_env(data, base)
    if not plans:
        out.message(f"{label}: no local working_dir or py_modules: nothing to package")
    scans = [(plan.field, scan_package(plan.source, kind=plan.kind,  # type: ignore[arg-type]
                                       excludes=(*plan.excludes, *(exclude or ()))))
             for plan in plans]
    if out.is_machine:
        out.json({"packages": [_listing(scan) | {"field": name} for name, scan in scans]})
        return
    for index, (name, scan) in enumerate(scans):
        if len(scans) > 1:  # one header per package, as `ls` does for several directories
            out.line(f"{'' if index == 0 else chr(10)}{name} ({scan.root}):")
        _show(out, scan, sizes, name)


def _rows(scan: Any) -> list[Any]:
    return sorted((e for e in scan.entries if e.in_zip and e.relpath != "."),
                  key=lambda e: e.relpath)


def _listing(scan: Any) -> dict[str, Any]:
    return {"root": str(scan.root), "file_count": scan.file_count,
            "total_bytes": scan.total_bytes, "root_excluded": scan.root_excluded,
            "entries": [e.to_dict() for e in _rows(scan)]}


def _show(out: Any, scan: Any, sizes: bool, field: str | None) -> None:
    from rtenv_cli.render.units import human_bytes

    if out.is_machine:
        out.json(_listing(scan))
        return
    for e in _rows(scan):
        name = e.relpath + ("/" if e.is_dir else "")
        out.line(f"{human_bytes(e.size):>10}  {name}" if sizes else name)
    if scan.root_excluded:
        out.warning(f"{field + ': ' if field else ''}the root itself is excluded: Ray would "
                    "package nothing", hint=f"see `rtenv check-ignore -v {scan.root}`")


def register(app: typer.Typer) -> None:
    app.command(name="ls-files")(ls_files)
