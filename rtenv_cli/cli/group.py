"""RtenvGroup: maps every failure to one message and one exit code, and loads config defaults."""

from __future__ import annotations

import os
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from rtenv_cli.core.errors import ExitCode, RtenvError


class RtenvGroup(TyperGroup):
    """The root group. The only place that catches exceptions.

    - RtenvError: its message and hint, exit with its code (1 failure, 2 usage);
    - KeyboardInterrupt: exit 130, no traceback;
    - anything else: `internal error` and exit 2, the traceback only with RTENV_DEBUG=1.
    """

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None,
                     **extra: Any) -> Any:
        if parent is None and "default_map" not in extra:
            from rtenv_cli.core.config import load_default_map

            try:
                extra["default_map"] = load_default_map()
            except RtenvError as exc:
                _report(exc)
                sys.exit(int(exc.exit_code))
        return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except RtenvError as exc:
            _report(exc)
            raise typer.Exit(int(exc.exit_code)) from None
        except KeyboardInterrupt:
            sys.stderr.write("\ninterrupted\n")
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
        except (typer.Exit, typer.Abort):
            raise
        except Exception as exc:
            if _is_click_control_flow(exc) or os.environ.get("RTENV_DEBUG") == "1":
                raise
            from rtenv_cli.core.paths import log_path

            _log_internal_error(exc)
            sys.stderr.write(f"error: internal error: {type(exc).__name__}: {exc}\n")
            sys.stderr.write(f"\nhint: this is a bug in rtenv; rerun with RTENV_DEBUG=1 for the "
                             f"traceback (also written to {log_path()})\n")
            raise typer.Exit(int(ExitCode.USAGE)) from None


def _is_click_control_flow(exc: Exception) -> bool:
    # click's own exceptions (usage errors, --help exits) carry exit codes click reports itself
    return type(exc).__module__.startswith(("typer._click", "click"))


def _report(exc: RtenvError) -> None:
    from rtenv_cli.render.output import current_output

    current_output().error(exc)


def _log_internal_error(exc: Exception) -> None:
    import traceback

    from rtenv_cli.core.paths import log_path

    try:
        path = log_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            fh.write("".join(traceback.format_exception(exc)))
    except OSError:
        pass
