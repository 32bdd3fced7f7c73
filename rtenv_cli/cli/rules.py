"""`rtenv rules [CODE]`: list rtenv's rules, or explain one with a bad and a fixed example."""

from __future__ import annotations

from typing import Annotated

import typer

from rtenv_cli.cli.options import FormatOpt, TextJson


def _codes() -> list[str]:
    """What TAB offers for CODE: every rule's code."""
    from rtenv_cli.core.lint.registry import all_rules

    return [r.code for r in all_rules()]


def rules(
    code: Annotated[str | None, typer.Argument(
        help="A rule code (RTE101) or name (unknown-field) to explain.",
        show_default=False, autocompletion=_codes)] = None,
    fmt: FormatOpt = TextJson.text,
) -> None:
    """List every validation rule, or explain one.

    Example:

        $ rtenv rules

        $ rtenv rules RTE130

        $ rtenv rules unknown-field --format json
    """
    from rtenv_cli.core.lint.registry import all_rules, get_rule
    from rtenv_cli.render import diagnostics
    from rtenv_cli.render.output import Output

    out = Output(fmt.value)
    if code is None:
        found = all_rules()
        if fmt is TextJson.json:
            out.json({"rules": [r.to_dict() for r in found]})
        else:
            diagnostics.render_rules_list(out, found)
        return
    rule = get_rule(code)
    if fmt is TextJson.json:
        out.json(rule.to_dict())
    else:
        diagnostics.render_rule(out, rule)


def register(app: typer.Typer) -> None:
    app.command(name="rules")(rules)
