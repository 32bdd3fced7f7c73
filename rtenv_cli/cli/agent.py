"""`rtenv agent`: run the node agent (package store, environments, cache) over HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rtenv_cli.render.output import Output


def agent(
    *,
    host: Annotated[str, typer.Option("--host", help="Address to bind. Anything but loopback "
                                      "needs --token.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8790,
    root: Annotated[Path | None, typer.Option(
        "--root", help="Store directory. Default: the embedded store under the user cache dir "
        "(RTENV_HOME).", show_default=False)] = None,
    token: Annotated[str | None, typer.Option(
        "--token", envvar="RTENV_AGENT_TOKEN", show_envvar=True,
        help="Require `Authorization: Bearer <token>` on every request.")] = None,
    max_size: Annotated[str | None, typer.Option(
        "--max-size", help="After each create, drop least recently used unreferenced entries "
        "until the store is at most this big (e.g. 20GB).")] = None,
    max_age: Annotated[str | None, typer.Option(
        "--max-age", help="After each create, drop unreferenced entries unused for this long "
        "(e.g. 7d).")] = None,
    workers: Annotated[int, typer.Option(
        "--workers", min=1, help="Server processes sharing the port and the store (cache hits "
        "are answered in parallel; builds still happen once).")] = 1,
) -> None:
    """Run the rtenv node agent: a Ray-compatible package store, delta uploads, environments.

    Environments (uv venvs for pip/uv, unpacked working_dir/py_modules) are built once, shared,
    reference-counted and kept in a crash-safe store; `rtenv run --address` and
    `rtenv push --to` talk to it. It binds 127.0.0.1 by default; any other bind needs a token.
    The API is described at /openapi.json.

    Under systemd (one per node), /etc/systemd/system/rtenv-agent.service:

    \b
        [Service]
        Environment=RTENV_AGENT_TOKEN=change-me
        ExecStart=/opt/venv/bin/rtenv agent --host 0.0.0.0 --root /var/cache/rtenv --max-size 50GB
        Restart=on-failure

    On each node of a Slurm allocation (one task per node, in the background):

    \b
        srun --nodes=$SLURM_NNODES --ntasks-per-node=1 --overlap \\
             rtenv agent --root /tmp/rtenv-$SLURM_JOB_ID &

    Example:

        $ rtenv agent --port 8790

        $ rtenv agent --host 0.0.0.0 --token "$TOKEN" --max-size 20GB
    """
    from rtenv_cli.core.agent.server import AgentConfig, serve
    from rtenv_cli.core.units import parse_duration, parse_size

    out = Output("text")
    config = AgentConfig(root=root, host=host, port=port, token=token,
                         max_bytes=parse_size(max_size) if max_size else None,
                         max_age_s=parse_duration(max_age) if max_age else None,
                         workers=workers)
    from rtenv_cli.core.agent.server import check_bind

    check_bind(config)
    out.message(f"rtenv agent listening on http://{host}:{port} "
                f"({'token required' if token else 'no token'})")
    serve(config)


def register(app: typer.Typer) -> None:
    app.command(name="agent")(agent)
