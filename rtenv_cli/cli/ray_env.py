"""`rtenv ray-env`: the environment a node's `ray start` needs for rtenv's Ray plugin."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rtenv_cli.render.output import Output


def _formats() -> list[str]:
    """What TAB offers for --format: the env formats, and text for --check."""
    from rtenv_cli.core.rayplugin.setup import FORMATS

    return [*FORMATS, "text"]


def ray_env(
    *,
    fmt: Annotated[str, typer.Option(
        "--format", "-f", help="shell (export lines), json ({\"env\": {...}}) or yaml (a "
        "KubeRay `env:` list); with --check: text or json.",
        autocompletion=_formats)] = "shell",
    root: Annotated[Path | None, typer.Option(
        "--root", help="rtenv's home on the nodes (RTENV_HOME; the store is ROOT/store). "
        "Default: RTENV_HOME if set, else each node's user cache dir.",
        show_default=False)] = None,
    max_size: Annotated[str | None, typer.Option(
        "--max-size", help="Keep the store at most this big: least recently used unreferenced "
        "environments go after each build (e.g. 20GB).")] = None,
    max_age: Annotated[str | None, typer.Option(
        "--max-age", help="Drop unreferenced environments unused for this long after each "
        "build (e.g. 7d).")] = None,
    check: Annotated[str | None, typer.Option(
        "--check", help="Instead: report per node of the Ray cluster at this address "
        "(dashboard URL or GCS address) whether its agent loads the plugin; exit 1 if one "
        "does not.", show_default=False)] = None,
) -> None:
    """Print the environment variables that load rtenv's Ray plugin, to export before
    `ray start` on every node.

    With the plugin, `runtime_env={"rtenv": {"pip": [...]}}` (or `{"uv": ...}`) builds the
    workers' venv with uv on the node's rtenv store (once per node, kept across jobs and Ray
    sessions) instead of Ray's clone of its own venv. The class path is
    rtenv_cli.ray_plugin.RtenvPlugin; the node's Python must have rtenv installed.

    \b
        $ eval "$(rtenv ray-env --root /var/cache/rtenv)" && ray start --head
        $ rtenv ray-env --format yaml      # KubeRay: under the container's env
        $ rtenv ray-env --check http://127.0.0.1:8265

    On each node of a Slurm allocation (one task per node; mktemp -d makes the node's store a
    fresh directory of this user's alone, 0700, that nobody could have made first):

    \b
        srun --nodes=$SLURM_NNODES --ntasks-per-node=1 --overlap \\
             bash -c 'home=$(mktemp -d "${TMPDIR:-/tmp}/rtenv-$SLURM_JOB_ID.XXXXXX") &&
                      eval "$(rtenv ray-env --root "$home")" &&
                      ray start --address=$HEAD:6379 --block' &
    """
    from rtenv_cli.core.errors import UsageError

    if check is not None:
        _check(check, fmt)
        return
    from rtenv_cli.core.rayplugin.setup import FORMATS, format_env, ray_env_vars

    if fmt not in FORMATS:
        raise UsageError(f"unknown --format {fmt!r}", hint=f"use one of {', '.join(FORMATS)}")
    out = Output("json" if fmt == "json" else "text")
    out.line(format_env(ray_env_vars(root=root, max_size=max_size, max_age=max_age), fmt))


def _check(address: str, fmt: str) -> None:
    from rtenv_cli.core.errors import UsageError
    from rtenv_cli.core.rayplugin.nodes import plugin_status

    if fmt not in ("text", "json", "shell"):
        raise UsageError(f"--check reports as text or json, not {fmt!r}",
                         hint="use --format text or --format json")
    out = Output("json" if fmt == "json" else "text")
    status = plugin_status(address)
    if out.fmt == "json":
        out.json(status.to_dict())
    else:
        for node in status.nodes:
            state = "loaded" if node.get("loaded") else f"MISSING ({node.get('reason')})"
            out.line(f"{node['node_id'][:12]}  {node.get('node_ip', '')}  {state}")
    if not status.ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command(name="ray-env")(ray_env)
