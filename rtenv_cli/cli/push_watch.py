"""`rtenv push --watch` / `--once`: the watch half of `rtenv push`.

`run_watch_cli(...)` is what the push command (cli/push.py) calls for --watch/--once.
"""

from __future__ import annotations

from pathlib import Path


def run_watch_cli(path: Path, *, address: str | None = None, to: str | None = None,
                  token: str | None = None, fmt: str = "text", verbose: bool = False,
                  once: bool = False,
                  on_change: str | None = None, quiet_ms: int = 200, max_wait_ms: int = 2000,
                  reconcile_s: float = 60.0, polling: bool = False,
                  base_dir: Path | None = None, output: Path | None = None,
                  via: str = "auto") -> int:
    """Run a watch session; returns the exit code (0, or 130 on Ctrl-C; with `once`, 1 when the
    --on-change command failed). `output` (-o) is rewritten with the pushed runtime_env after
    every push, before --on-change runs (core/watch/oncommand.py)."""
    from rtenv_cli.core.push import write_runtime_env
    from rtenv_cli.core.transport.resolve import resolve_target
    from rtenv_cli.core.watch.session import PushEvent, WatchSession
    from rtenv_cli.render.output import Output
    from rtenv_cli.render.watch import WatchRenderer

    out = Output(fmt)
    target = resolve_target(to, address, token=token)
    renderer = WatchRenderer(out, verbose=verbose, label=str(path))

    def pushed(event: PushEvent) -> None:
        if output is not None:
            write_runtime_env(output, dict(event.runtime_env))
        renderer.on_push(event)

    session = WatchSession(path, target, quiet_s=quiet_ms / 1000, max_wait_s=max_wait_ms / 1000,
                           reconcile_s=reconcile_s, polling=polling or None,
                           on_push=pushed, on_notice=renderer.on_notice,
                           on_change_cmd=on_change, base_dir=base_dir,
                           outputs=(output,) if output is not None else (), via=via)
    try:
        if once:
            session.initial_push()
            return 1 if session.finish_commands() else 0
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
