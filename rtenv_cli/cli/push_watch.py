"""`rtenv push --watch` / `--once`: the watch half of `rtenv push`.

`run_watch_cli(...)` is what the push command calls for --watch/--once. Until the PUSH feature's
`rtenv push` is registered, `register()` adds a `push` command with the watch options so that the
feature is usable; it steps aside as soon as another module has registered `push`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from rtenv_cli.cli.options import AddressOpt, FormatOpt, TextJson, VerboseOpt


def run_watch_cli(path: Path, *, address: str | None = None, to: str | None = None,
                  fmt: str = "text", verbose: bool = False, once: bool = False,
                  on_change: str | None = None, quiet_ms: int = 200, max_wait_ms: int = 2000,
                  reconcile_s: float = 60.0, polling: bool = False) -> int:
    """Run a watch session; returns the exit code (0, or 130 on Ctrl-C)."""
    from rtenv_cli.core.watch.session import WatchSession
    from rtenv_cli.core.watch.targets import resolve
    from rtenv_cli.render.output import Output
    from rtenv_cli.render.watch import WatchRenderer

    out = Output(fmt)
    target = resolve(to, address)
    renderer = WatchRenderer(out, verbose=verbose, label=str(path))
    session = WatchSession(path, target, quiet_s=quiet_ms / 1000, max_wait_s=max_wait_ms / 1000,
                           reconcile_s=reconcile_s, polling=polling or None,
                           on_push=renderer.on_push, on_notice=renderer.on_notice,
                           on_change_cmd=on_change)
    try:
        if once:
            session.initial_push()
            return 0
        session.start()
        session.initial_push()
        renderer.start_status(f"watching {path} -> {target.label} · Ctrl-C to stop")
        session.run()
    except KeyboardInterrupt:
        session.stop()
        session.close()
        renderer.stop()
        out.message("stopped")
        return 130
    finally:
        session.close()
        renderer.stop()
    return 0


def push_watch(  # noqa: PLR0917 - typer maps parameters to options
    path: Annotated[Path, typer.Argument(help="runtime_env file or directory (working_dir).")]
    = Path("."),
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Keep watching and re-push on "
                                        "every change until Ctrl-C.")] = False,
    once: Annotated[bool, typer.Option("--once", help="Push once and exit.")] = False,
    on_change: Annotated[str | None, typer.Option(
        "--on-change", metavar="CMD", help="Run CMD after each successful push; the new "
        "runtime_env is in $RTENV_RUNTIME_ENV (JSON), the URI in $RTENV_URI.")] = None,
    address: AddressOpt = None,
    to: Annotated[str | None, typer.Option("--to", help="Push target URL (overrides "
                                           "--address).")] = None,
    quiet_ms: Annotated[int, typer.Option("--quiet-ms", help="Quiet period before a push "
                                          "(events are coalesced).")] = 200,
    max_wait_ms: Annotated[int, typer.Option("--max-wait-ms", help="Push at the latest this "
                                             "long after the first event.")] = 2000,
    polling: Annotated[bool, typer.Option("--poll", envvar="RTENV_WATCH_POLLING",
                                          help="Watch by polling instead of inotify.")] = False,
    verbose: VerboseOpt = False,
    fmt: FormatOpt = TextJson.text,
) -> None:
    """Package and push a runtime_env's working_dir/py_modules; with --watch, re-push on change.

    Every version is a complete, immutable package under its own content URI. Changes are
    confirmed by stat/digest; only changed files are re-hashed. To an rtenv agent (or the
    embedded store) only the files it lacks are sent. --format json prints one JSON object per
    push: uri, added, modified, removed, bytes_sent, elapsed_ms, trigger.

    Example:

        $ rtenv push --watch runtime_env.yaml --address http://127.0.0.1:8265

        $ rtenv push --watch . --format json

        $ rtenv push --watch src/ --on-change './resubmit.sh "$RTENV_URI"'
    """
    code = run_watch_cli(path, address=address, to=to, fmt=fmt.value, verbose=verbose,
                         once=once or not watch, on_change=on_change, quiet_ms=quiet_ms,
                         max_wait_ms=max_wait_ms, polling=polling or
                         os.environ.get("RTENV_WATCH_POLLING") == "1")
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    names = {c.name for c in app.registered_commands}
    if "push" in names:
        return  # the PUSH feature's command is registered; it calls run_watch_cli
    app.command(name="push")(push_watch)
