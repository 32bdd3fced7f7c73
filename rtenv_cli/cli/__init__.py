"""The thin CLI layer: the only package that imports typer.

Each command lives in its own module with a `register(app)` function; `commands.py` lists them
and the root group (group.py) imports the one that runs.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from rtenv_cli import __version__
from rtenv_cli.cli import _fastcoerce, _helptypes
from rtenv_cli.cli.group import RtenvGroup

_fastcoerce.install()  # before any command is built: typer's own coercion imports pydantic
_helptypes.install()  # types in --help as words (`<a|b>`, not `<list[a|b]>`)

app = typer.Typer(
    name="rtenv",
    cls=RtenvGroup,
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    help=(
        "Ray runtime environments without the surprises: validate, package, push, explain, "
        "run and cache them.\n\n"
        "Example:\n\n"
        "    $ rtenv validate runtime_env.yaml\n\n"
        "    $ rtenv run -r runtime_env.yaml -- python train.py"
    ),
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rtenv {__version__}")
        raise typer.Exit()


class Color(str, Enum):
    auto = "auto"
    always = "always"
    never = "never"


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option("--version", "-V", help="Print the version and exit.", is_eager=True,
                     callback=_version),
    ] = False,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="Print data, warnings and errors only: no progress or status "
        "messages.")] = False,
    color: Annotated[Color, typer.Option(
        "--color", help="Colour: auto (on a terminal, unless NO_COLOR is set), always or "
        "never.")] = Color.auto,
) -> None:
    """Ray runtime environments without the surprises."""
    from rtenv_cli.render.output import configure

    source = ctx.get_parameter_source("color")
    configure(quiet=quiet, color=color.value,
              color_from_config=source is not None and source.name == "DEFAULT_MAP")
    ctx.call_on_close(configure)  # the next run in this process (tests) starts afresh


# Commands are listed in rtenv_cli/cli/commands.py and imported only when invoked.
