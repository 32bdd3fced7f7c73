"""`Output`: the one place that writes to the terminal.

Data goes to stdout (pipeable); messages, warnings, progress and hints go to stderr (uv's style).
Colour is off under NO_COLOR, when the stream is not a TTY, when TERM=dumb, and for machine formats;
`rtenv --color always|never` decides over all of these but the last, and `rtenv --quiet` drops
messages and progress (data, warnings and errors stay).
rich is imported only when a table, colour or a progress bar is actually drawn.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TextIO

from rtenv_cli.core.errors import RtenvError, UsageError

if TYPE_CHECKING:
    from rich.console import Console

MACHINE_FORMATS = frozenset({"json", "github", "sarif", "dotenv", "shell"})


def paint(text: str, style: str, color: bool) -> str:
    """TEXT in an ANSI SGR STYLE (e.g. "1;31", bold red) when COLOR, else as it is."""
    return f"\x1b[{style}m{text}\x1b[0m" if color else text


COLOR_CHOICES = ("auto", "always", "never")


class _Chosen:
    """The root options `--quiet` and `--color` of this invocation (set by `configure`)."""

    quiet = False
    color = "auto"
    color_from_config = False  # a config file's `color`: NO_COLOR and FORCE_COLOR beat it


def configure(*, quiet: bool = False, color: str = "auto",
              color_from_config: bool = False) -> None:
    """`rtenv --quiet/-q` and `--color auto|always|never`: every Output of the run follows them
    (flag > NO_COLOR/FORCE_COLOR > config file > auto)."""
    if color not in COLOR_CHOICES:
        raise UsageError(f"--color {color}: not one of {', '.join(COLOR_CHOICES)}")
    _Chosen.quiet, _Chosen.color, _Chosen.color_from_config = quiet, color, color_from_config


def _wants_color(stream: TextIO) -> bool:
    if _Chosen.color != "auto" and not _Chosen.color_from_config:
        return _Chosen.color == "always"
    if os.environ.get("NO_COLOR", "") != "":
        return False
    if os.environ.get("FORCE_COLOR", "") != "":
        return True
    if _Chosen.color != "auto":
        return _Chosen.color == "always"
    if os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


_ESCAPED_BYTES = range(0xDC80, 0xDD00)  # how surrogateescape holds the bytes 0x80-0xff


def _escape_unencodable(exc: UnicodeError) -> tuple[bytes, int]:
    """Codec error handler "rtenv-escape": `surrogateescape` for what it can (the original byte
    of an undecodable file name), a `\\udXXX` escape for any other lone surrogate."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    out = bytearray()
    for ch in exc.object[exc.start:exc.end]:
        cp = ord(ch)
        if cp in _ESCAPED_BYTES:
            out.append(cp - 0xDC00)
        else:
            out += (f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}").encode()  # noqa: PLR2004 - the BMP
    return bytes(out), exc.end


_HANDLER = "rtenv-escape"


def _lenient(stream: TextIO) -> TextIO:
    """`stream`, never failing on a lone surrogate in user data (a JSON `"\\ud800"`, a file
    name that is not UTF-8): a strict UTF-8 stream would turn it into an internal error."""
    if getattr(stream, "errors", None) in ("strict", "surrogateescape") and \
            hasattr(stream, "reconfigure"):
        import codecs

        try:
            codecs.lookup_error(_HANDLER)
        except LookupError:
            codecs.register_error(_HANDLER, _escape_unencodable)
        with contextlib.suppress(ValueError, OSError):  # a stream that cannot change it
            stream.reconfigure(errors=_HANDLER)
    return stream


_SURROGATE = re.compile("[\ud800-\udfff]")


def _json_text(obj: Any, indent: int | None) -> str:
    """JSON that is valid UTF-8: lone surrogates written as `\\udXXX` escapes (of the same
    value), everything else as itself."""
    text = json.dumps(to_jsonable(obj), indent=indent, ensure_ascii=False)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def to_jsonable(obj: Any) -> Any:
    """Dataclasses with `to_dict`, paths and sets become plain JSON values."""
    if hasattr(obj, "to_dict"):
        return to_jsonable(obj.to_dict())
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    return obj


class Output:
    """Renders results, errors, prompts and progress for one command invocation."""

    def __init__(self, fmt: str = "text", *, quiet: bool | None = None) -> None:
        self.fmt = fmt
        self.quiet = _Chosen.quiet if quiet is None else quiet  # None: `rtenv --quiet`'s
        self._console: Console | None = None
        self._err_console: Console | None = None

    # streams are looked up at call time so that test runners can swap them
    @property
    def stdout(self) -> TextIO:
        return _lenient(sys.stdout)

    @property
    def stderr(self) -> TextIO:
        return _lenient(sys.stderr)

    @property
    def is_machine(self) -> bool:
        return self.fmt in MACHINE_FORMATS

    @property
    def color(self) -> bool:
        return not self.is_machine and _wants_color(self.stdout)

    @property
    def err_color(self) -> bool:
        return _wants_color(self.stderr)

    @property
    def is_terminal(self) -> bool:
        """Whether stdout is a terminal (a pipe or a file gets whole lines, never cut)."""
        isatty = getattr(self.stdout, "isatty", None)
        return bool(isatty and isatty())

    def console(self) -> Console:
        """A rich Console on stdout (for tables); plain when colour is off. A pipe or a file has
        no width: tables are as wide as their content, not cut at 80 columns (or $COLUMNS)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(
                file=self.stdout,
                width=None if self.is_terminal else sys.maxsize,
                no_color=not self.color,
                color_system="auto" if self.color else None,
                highlight=False,
                soft_wrap=True,
            )
        return self._console

    def err_console(self) -> Console:
        if self._err_console is None:
            from rich.console import Console

            self._err_console = Console(
                file=self.stderr,
                no_color=not self.err_color,
                color_system="auto" if self.err_color else None,
                highlight=False,
                soft_wrap=True,
            )
        return self._err_console

    # -- data -------------------------------------------------------------------------------------
    def line(self, text: str = "") -> None:
        """One line of data on stdout."""
        self.stdout.write(text + "\n")

    def json(self, obj: Any, *, indent: int | None = 2) -> None:
        self.stdout.write(_json_text(obj, indent) + "\n")
        self.stdout.flush()

    def json_line(self, obj: Any) -> None:
        """One JSON object per line (for event streams such as `push --watch`)."""
        self.json(obj, indent=None)

    def result(self, obj: Any, render_text: Callable[[Output, Any], None]) -> None:
        """JSON for --format json, else the feature's text renderer."""
        if self.fmt == "json":
            self.json(obj)
        else:
            render_text(self, obj)

    # -- messages (stderr) ------------------------------------------------------------------------
    def _styled(self, label: str, style: str) -> str:
        return paint(label, style, self.err_color)

    def message(self, text: str) -> None:
        if not self.quiet:
            self.stderr.write(text + "\n")

    def warning(self, text: str, hint: str | None = None) -> None:
        self.stderr.write(f"{self._styled('warning', '1;33')}: {text}\n")
        if hint:
            self.stderr.write(f"{self._styled('hint', '1;36')}: {hint}\n")

    def error(self, exc: RtenvError) -> None:
        if self.fmt == "json":
            self.json({"error": exc.to_dict()})
        where = f"{exc.path}: " if exc.path and exc.path not in exc.message else ""
        self.stderr.write(f"{self._styled('error', '1;31')}: {where}{exc.message}\n")
        if exc.hint:
            self.stderr.write(f"\n{self._styled('hint', '1;36')}: {exc.hint}\n")
        self.stderr.flush()

    # -- interaction ------------------------------------------------------------------------------
    def confirm(self, question: str, *, yes: bool = False) -> bool:
        """A `[y/N]` prompt on stderr; `--yes` answers it; no TTY and no --yes is a usage error."""
        if yes:
            return True
        stdin = sys.stdin
        interactive = stdin is not None and stdin.isatty()
        if not interactive and os.environ.get("RTENV_ASSUME_TTY") != "1":
            # RTENV_ASSUME_TTY=1 lets tests drive the prompt through a pipe
            raise UsageError(
                f"{question} needs confirmation, but standard input is not a terminal",
                hint="pass --yes to proceed, or --dry-run to only see the plan",
            )
        self.stderr.write(f"{question} [y/N] ")
        self.stderr.flush()
        answer = stdin.readline().strip().lower()
        return answer in {"y", "yes"}

    @property
    def live(self) -> bool:
        """Whether progress may be drawn: text output, and stderr is a terminal (a pipe, a file
        or TERM=dumb gets none; NO_COLOR only takes the colour away)."""
        if self.is_machine or self.quiet or os.environ.get("TERM") == "dumb":
            return False
        isatty = getattr(self.stderr, "isatty", None)
        return bool(isatty and isatty())

    @contextlib.contextmanager
    def status(self, label: str) -> Iterator[None]:
        """A spinner with LABEL on stderr while the block runs (work of unknown length: a scan
        of Ray nodes, an environment build); nothing when progress is off (see `live`)."""
        if not self.live:
            yield
            return
        with self.err_console().status(label, spinner="dots"):
            yield

    @contextlib.contextmanager
    def progress(self, label: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
        """Yield `advance(n)`; draws a rich bar on a TTY for text output, nothing otherwise."""
        if not self.live:
            yield lambda _n: None
            return
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        columns = [TextColumn("{task.description}"), BarColumn(), DownloadColumn()]
        columns.append(TimeRemainingColumn())
        with Progress(*columns, console=self.err_console(), transient=True) as bar:
            task = bar.add_task(label, total=total)
            yield lambda n: bar.advance(task, n)
