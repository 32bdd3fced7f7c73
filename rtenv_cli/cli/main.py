"""The console-script entry point."""

from __future__ import annotations

import sys
from collections.abc import Callable


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (errors are handled in RtenvGroup). The process's
    last act (the console script, `python -m rtenv_cli`): see FREEZE_AT_EXIT."""
    app = _import_app()

    if sys.stdout is None:  # started with standard output closed (`>&-`)
        _closed_stdout()
    try:
        code = _run(app, argv)
        # what the command left in stdout's buffer: a closed pipe or a full disk shows here,
        # not at interpreter exit (exit 120 and "Exception ignored"); a command that returns
        # normally still ends in SystemExit (click's standalone mode), so this is the one flush
        sys.stdout.flush()
    except BrokenPipeError:
        from rtenv_cli.cli.group import silence_stdout

        silence_stdout()
        return 1
    except OSError as exc:  # the final flush: /dev/full, a full disk
        from rtenv_cli.cli.group import stdout_failed

        if not stdout_failed(exc):
            raise
        return 1
    if FREEZE_AT_EXIT:
        import gc

        gc.freeze()
    return code


# The imports of the CLI (typer, the app) make some 10^5 objects and no garbage: the cyclic
# garbage collector's passes over them are skipped (with core/push.py's pause while a push runs,
# benchmarks/results/
# trees.json: "ablation: re-push, whole `rtenv push` process, the garbage collector on").
PAUSE_GC = True
# Once the command is done, the interpreter's exit would run one more collection over every
# object the run made (imports, a push's scan), all freed as the process ends: frozen
# (gc.freeze), they are not walked (benchmarks/results/
# trees.json: "ablation: re-push, whole `rtenv push` process, the last collection at exit").
FREEZE_AT_EXIT = True


def _import_app() -> Callable[..., object]:
    import gc

    if not (PAUSE_GC and gc.isenabled()):
        from rtenv_cli.cli import app

        return app
    gc.disable()
    try:
        from rtenv_cli.cli import app
    finally:
        gc.enable()
    return app


def _run(app: Callable[..., object], argv: list[str] | None) -> int:
    """The app's exit code (click ends every run with SystemExit)."""
    try:
        app(args=argv, prog_name="rtenv")
    except SystemExit as exc:
        if exc.code is None:
            return 0
        return exc.code if isinstance(exc.code, int) else 1
    return 0


def _closed_stdout() -> None:
    """Give a closed standard output a stand-in that fails on the first write, so that the
    command ends as for any unwritable output (a message on stderr, exit 1)."""
    import errno
    import io

    class Closed(io.TextIOBase):
        failed = False

        def writable(self) -> bool:
            return True

        def write(self, text: str) -> int:
            self.failed = True
            raise OSError(errno.EBADF, "standard output is closed")

        def flush(self) -> None:
            if self.failed:
                raise OSError(errno.EBADF, "standard output is closed")

    sys.stdout = Closed()


if __name__ == "__main__":
    raise SystemExit(main())
