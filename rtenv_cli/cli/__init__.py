"""The thin CLI layer: the only package that imports typer.

Each command lives in its own module with a `register(app)` function; `commands.py` lists them
and the root group (group.py) imports the one that runs.
"""

from __future__ import annotations

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


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", "-V", help="Print the version and exit.", is_eager=True,
                     callback=_version),
    ] = False,
) -> None:
    """Ray runtime environments without the surprises."""


# Commands are listed in rtenv_cli/cli/commands.py and imported only when invoked.
