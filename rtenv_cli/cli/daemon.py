"""`rtenv daemon start|stop|status`: the resident rtenv that runs `rtenv push` with its imports
already done (cli/resident/)."""

from __future__ import annotations

from typing import Annotated

import typer

from rtenv_cli.cli.options import FormatOpt, TextJson
from rtenv_cli.render.output import Output

daemon_app = typer.Typer(
    name="daemon", no_args_is_help=True, rich_markup_mode=None,
    help="Keep a resident rtenv that runs `rtenv push` without starting Python afresh."
    "\n\nA whole `rtenv push` process spends most of a re-push starting: the daemon has "
    "imported everything once, and each `rtenv push` of this user (same RTENV_HOME, same "
    "install) hands it its command line, directory, environment and terminal. Output, exit "
    "code and Ctrl-C are the command's own. RTENV_DAEMON=0 runs a command without it."
    "\n\nExample:\n\n    $ rtenv daemon start\n\n    $ rtenv push --address auto",
)


@daemon_app.command("start")
def start(
    idle: Annotated[str, typer.Option(
        "--idle", help="Exit after this long with no command to run (e.g. 30m, 8h).")] = "30m",
    fmt: FormatOpt = TextJson.text,
) -> None:
    """Start the daemon for this user and RTENV_HOME (nothing to do if a current one runs; one
    that runs other code, after an upgrade, is replaced)."""
    from rtenv_cli.core.units import parse_duration
    from rtenv_cli.render.daemon import render_state
    from rtenv_cli.resident.control import start as start_daemon

    state, started = start_daemon(idle=parse_duration(idle))
    Output(fmt.value).result(state, lambda out, s: render_state(
        out, s, verb="started" if started else "already running"))


@daemon_app.command("stop")
def stop(fmt: FormatOpt = TextJson.text) -> None:
    """Stop the daemon (commands it is running go on to their end).

    Exit status: 0 stopped (or none ran), 1 it has not ended within a minute, 2 usage error.
    """
    from rtenv_cli.render.daemon import render_state
    from rtenv_cli.resident.control import stop as stop_daemon

    state = stop_daemon()
    Output(fmt.value).result(state, lambda out, s: render_state(
        out, s, verb="not running" if not s.running else "stopped" if s.stopped
        else "still stopping"))
    if state.stopped is False:
        raise typer.Exit(1)


@daemon_app.command("status")
def status(fmt: FormatOpt = TextJson.text) -> None:
    """Say whether a daemon runs, since when, and whether it runs this install's code.

    Exit status: 0 a current daemon runs, 1 none runs (or only a stale one), 2 usage error.
    """
    from rtenv_cli.render.daemon import render_state
    from rtenv_cli.resident.control import status as daemon_status

    state = daemon_status()
    Output(fmt.value).result(state, lambda out, s: render_state(
        out, s, verb="running" if s.running else "not running"))
    if not (state.running and state.current):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(daemon_app, name="daemon")
