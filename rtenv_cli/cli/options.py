"""Options shared by several commands, each defined once (name, env var, help)."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any

import typer


class TextJson(str, Enum):
    text = "text"
    json = "json"


FormatOpt = Annotated[
    TextJson,
    typer.Option("--format", "-f", help="Output format.", case_sensitive=False),
]

RAY_ADDRESS_VARS = ["RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"]


def address_option(help: str) -> Any:
    """`--address` (from RAY_ADDRESS too, as Ray reads it), with HELP saying what this command
    does with it: the name and the variables are shared, the words are each command's own."""
    return typer.Option("--address", envvar=RAY_ADDRESS_VARS, show_envvar=True, help=help,
                        show_default=False)


AddressOpt = Annotated[str | None, address_option(
    "Where to push: a Ray cluster's GCS address (host:6379, the fastest push) or dashboard URL "
    "(http://host:8265), auto (the cluster `ray start` started here), or an rtenv agent URL. "
    "Default: the embedded local store.")]

TargetTokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        help="Bearer token for the target. Default: the target's own variable, "
        "RTENV_AGENT_TOKEN for an rtenv agent, RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH, "
        "~/.ray/auth_token) for a Ray cluster; prefer those: a flag shows in `ps`.",
        show_default=False,
    ),
]

YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]

DryRunOpt = Annotated[bool, typer.Option("--dry-run", "-n", help="Show what would happen; "
                                         "change nothing.")]

VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Say more.")]

# Options that decide the same thing (where a push or a cache command goes). In a command that
# has both, a config-file value for one never beats the other given as a flag or an env var.
SAME_DECISION: tuple[frozenset[str], ...] = (
    frozenset({"to", "address"}),
    frozenset({"agent", "address"}),
)
