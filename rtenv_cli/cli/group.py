"""RtenvGroup: maps every failure to one message and one exit code, and loads config defaults."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import typer
from typer import Context
from typer.core import TyperGroup

from rtenv_cli.core.errors import ExitCode, RtenvError, from_os_error

if TYPE_CHECKING:
    from pathlib import Path


class RtenvContext(Context):
    """A context whose config defaults (`default_map`) name options as users write them, and
    never let a config value beat an explicit choice of the same thing.

    Config files say `format = "json"` or `keep-storage = "20GB"`; click looks defaults up by
    parameter name (`fmt`, `keep_storage`): this maps a parameter onto its long names. Options
    in `SAME_DECISION` pick one thing together (push's `--to` and `--address`): a config value
    for one is not used when another was given as a flag or an env var.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.meta[_LEAF] = self  # the innermost context: its params say how to report errors

    def lookup_default(self, name: str, call: bool = True) -> Any:
        if self.default_map:
            from rtenv_cli.cli.config_schema import config_key

            param = self._param(name)
            key = config_key(param, self.default_map) if param is not None else None
            if key is not None:
                if self._decided_elsewhere(name):
                    return None
                value = self.default_map[key]
                return value() if call and callable(value) else value
        return super().lookup_default(name, call)  # type: ignore[call-overload]

    def _param(self, name: str) -> Any:
        return next((p for p in self.command.params if p.name == name), None)

    def _decided_elsewhere(self, name: str) -> bool:
        """Whether an option that decides the same as NAME was given as a flag or env var.

        Click processes the options given on the command line before the others, so such an
        option's source is known when NAME falls back to the config; an env var is looked up.
        """
        from rtenv_cli.cli.options import SAME_DECISION

        for group in SAME_DECISION:
            if name not in group:
                continue
            for other in group - {name}:
                param = self._param(other)
                if param is None:
                    continue
                source = self.get_parameter_source(other)
                if source is not None and source.name in _EXPLICIT:
                    return True
                if param.resolve_envvar_value(self) is not None:
                    return True
        return False


_LEAF = "rtenv.leaf_context"
_ARGV = "rtenv.argv"  # the command line, for errors click raises before any --format is parsed
_EXPLICIT = frozenset({"COMMANDLINE", "ENVIRONMENT", "PROMPT"})


def use_rtenv_context(command: Any) -> Any:
    """Give COMMAND and its sub-commands the RtenvContext; return COMMAND."""
    command.context_class = RtenvContext
    for sub in getattr(command, "commands", {}).values():
        use_rtenv_context(sub)
    return command


class RtenvGroup(TyperGroup):
    """The root group: the one boundary where an exception that escapes a command becomes a
    message and an exit code (code below it catches only what it can handle or report itself).

    - RtenvError: its message and hint, exit with its code (1 failure, 2 usage);
    - KeyboardInterrupt: exit 130, no traceback;
    - anything else: `internal error` and exit 2, the traceback only with RTENV_DEBUG=1.
    """

    context_class = RtenvContext

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from rtenv_cli.cli.commands import LazyCommands

        lazy = LazyCommands(use_rtenv_context)
        for name, command in self.commands.items():
            lazy[name] = command
        self.commands = lazy

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)  # names only: listing must not import every command

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The commands section of `rtenv --help`, from the static table (no imports)."""
        from rtenv_cli.cli.commands import COMMANDS

        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            if name in COMMANDS:
                rows.append((name, _short_help(COMMANDS[name][1], limit)))
            else:
                command = self.commands[name]
                if not command.hidden:
                    rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None,
                     **extra: Any) -> Any:
        if parent is None and "default_map" not in extra:
            from rtenv_cli.cli.config_schema import CommandTables
            from rtenv_cli.core.config import load_default_map

            try:
                extra["default_map"] = load_default_map(schema=CommandTables(self))
            except RtenvError as exc:
                _report(exc, None)
                sys.exit(int(exc.exit_code))
        argv = list(args)
        ctx = super().make_context(info_name, args, parent=parent, **extra)
        ctx.meta[_ARGV] = argv
        return ctx

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except RtenvError as exc:
            _report(exc, ctx.meta.get(_LEAF))
            raise typer.Exit(int(exc.exit_code)) from None
        except BrokenPipeError:
            # the reader went away (`rtenv ... | head`): stop quietly, as cat or grep would
            silence_stdout()
            raise typer.Exit(int(ExitCode.FAILURE)) from None
        except KeyboardInterrupt:
            sys.stderr.write("\ninterrupted\n")
            raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
        except OSError as exc:
            if stdout_failed(exc):
                raise typer.Exit(int(ExitCode.FAILURE)) from None
            mapped = from_os_error(exc)  # the one table of what an OS error tells the user
            if mapped is None:
                raise _internal(exc) from None
            _report(mapped, ctx.meta.get(_LEAF))
            raise typer.Exit(int(mapped.exit_code)) from None
        except (typer.Exit, typer.Abort):
            raise
        except Exception as exc:
            if _is_click_usage_error(exc) and _wants_json(ctx.meta.get(_ARGV, ())):
                _report_usage_error(exc)
                raise typer.Exit(int(ExitCode.USAGE)) from None
            if _is_click_control_flow(exc):
                raise
            raise _internal(exc) from None


def _internal(exc: Exception) -> BaseException:
    """Report an unexpected exception (`internal error`) and return the exit to raise."""
    if os.environ.get("RTENV_DEBUG") == "1":
        return exc
    logged = _log_internal_error(exc)
    sys.stderr.write(f"error: internal error: {type(exc).__name__}: {exc}\n")
    sys.stderr.write("\nhint: this is a bug in rtenv; rerun with RTENV_DEBUG=1 for the "
                     "traceback" + (f" (also written to {logged})" if logged else "") + "\n")
    return typer.Exit(int(ExitCode.USAGE))


def stdout_failed(exc: OSError) -> bool:
    """Did writing standard output fail (a full disk, /dev/full, a closed descriptor)? Then say
    so on stderr, drop what is still buffered, and let the caller exit 1 quietly."""
    import errno

    if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EBADF, errno.EFBIG,
                         errno.EPIPE) or not _raised_by_output(exc):
        return False
    silence_stdout()
    import contextlib

    with contextlib.suppress(OSError):  # what is still buffered goes nowhere, also at exit
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stderr.write(f"error: cannot write to standard output: {exc.strerror or exc}\n")
    return True


def _short_help(text: str, limit: int) -> str:
    """TEXT cut at a word to fit LIMIT columns, as click shortens a command's help."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 2)].rsplit(" ", 1)[0] + "..."


def silence_stdout() -> None:
    """Point stdout at /dev/null so that the flush at exit does not fail again (Python docs'
    recipe for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _raised_by_output(exc: BaseException) -> bool:
    """Was `exc` raised while rendering (rtenv_cli.render writes only stdout and stderr) or by
    the final flush in main?"""
    tb = exc.__traceback__
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame.f_globals.get("__name__", ""))
        tb = tb.tb_next
    return bool(frames) and (frames[-1] == "rtenv_cli.cli.main" or
                             any(name.startswith("rtenv_cli.render") for name in frames))


def _is_click_control_flow(exc: Exception) -> bool:
    # click's own exceptions (usage errors, --help exits) carry exit codes click reports itself
    return type(exc).__module__.startswith(("typer._click", "click"))


def _is_click_usage_error(exc: Exception) -> bool:
    """click's UsageError (an unknown option, a bad value), from click or typer's copy of it
    (typer exports only its BadParameter subclass)."""
    return _is_click_control_flow(exc) and any(
        c.__name__ == "UsageError" for c in type(exc).__mro__)


def _report_usage_error(exc: Any) -> None:
    """A click usage error as rtenv's, on the one error renderer (JSON on stdout)."""
    from rtenv_cli.core.errors import UsageError

    command = getattr(getattr(exc, "ctx", None), "command_path", None)
    hint = f"see `{command} --help`" if command else None
    _report(UsageError(exc.format_message(), hint=hint), None, fmt="json")


def _report(exc: RtenvError, ctx: Any, fmt: str | None = None) -> None:
    """EXC for the user, in the format the failed command was asked for (its parsed --format,
    or `fmt`: `{"error": ...}` on stdout for json, whichever command it is)."""
    from rtenv_cli.render.output import Output

    if fmt is None:
        given = ctx.params.get("fmt") if ctx is not None else None
        fmt = str(getattr(given, "value", given or "text"))
    Output(fmt).error(exc)


def _wants_json(argv: Any) -> bool:
    """`--format json` (`--format=json`, `-f json`, `-fjson`) among the arguments click could
    not parse (up to a `--`, after which they are a command's own)."""
    words = list(argv)
    if "--" in words:
        words = words[:words.index("--")]
    for i, word in enumerate(words):
        value = words[i + 1] if word in ("--format", "-f") and i + 1 < len(words) else (
            word.partition("=")[2] if word.startswith("--format=") else
            word[2:] if word.startswith("-f") and not word.startswith("--") else None)
        if value is not None and value.lower() == "json":
            return True
    return False


def _log_internal_error(exc: Exception) -> Path | None:
    """Append the traceback to the log in RTENV_HOME; the log's path, or None when the home is
    not usable (not writable, or not this user's alone: nothing is written there)."""
    import traceback

    from rtenv_cli.core.paths import log_path

    try:
        path = log_path()
        with path.open("a", encoding="utf-8") as fh:
            fh.write("".join(traceback.format_exception(exc)))
    except (OSError, RtenvError):
        return None
    return path
