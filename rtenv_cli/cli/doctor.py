"""`rtenv doctor`: check this machine (and a cluster) for what rtenv's commands need."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from rtenv_cli.cli.options import FormatOpt, TextJson, address_option

AddressOpt = Annotated[str | None, address_option(
    "Also check what this names: a Ray cluster (its GCS host:6379, its dashboard "
    "http://host:8265, or auto), checked for reachability, auth and every node's Ray version, "
    "plugin, caches and disk; an rtenv agent URL; or a file:///shared/dir.")]


def doctor(
    path: Annotated[Path | None, typer.Argument(
        help="A runtime_env file or a working_dir: compare inotify's watch limit with the "
        "directories `push --watch` of it watches. Default: ./runtime_env.yaml when there is "
        "one.", show_default=False)] = None,
    address: AddressOpt = None,
    fmt: FormatOpt = TextJson.text,
) -> None:
    """Check this machine and a cluster for what rtenv's commands need, with the fix for each
    problem.

    Checks rtenv, Python and Ray versions, uv, NVML and the GPUs, cgroup v1/v2 writability,
    inotify's watch limit and the embedded store's size and budget; with --address, the
    cluster's reachability and auth (token mode, token found) and, on every node, Ray's
    version, rtenv's runtime_env plugin, the runtime_env caches and free disk. Each problem is
    one line with its fix.

    Exit status: 0 nothing missing (warnings allowed), 1 something a command needs is missing,
    2 usage error.

    Example:

        $ rtenv doctor

        $ rtenv doctor runtime_env.yaml --address http://127.0.0.1:8265

        $ rtenv doctor --address auto --format json
    """
    from rtenv_cli.core.doctor.service import run_doctor
    from rtenv_cli.render.doctor import render_doctor
    from rtenv_cli.render.output import Output

    out = Output(fmt.value)

    def scan(where: str) -> Any:
        from rtenv_cli.core.cache.ray_nodes import list_ray_nodes

        with out.status(f"running a check task on every node of {where}"):
            return list_ray_nodes(where)

    report = run_doctor(address=address, path=path, scan=scan)
    out.result(report, render_doctor)
    raise typer.Exit(report.exit_code)


def register(app: typer.Typer) -> None:
    app.command(name="doctor")(doctor)
