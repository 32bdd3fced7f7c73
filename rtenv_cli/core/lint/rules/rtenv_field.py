"""The `rtenv` field (rtenv's Ray runtime_env plugin, schema in core/rayplugin/schema.py):
RTE190 schema, RTE191 beside pip/uv/conda, RTE192 a relative requirements file, RTE193 a
`limits` value the plugin cannot apply, RTE194 `ray` in its requirements; the pip/uv
requirement rules (RTE141-146) run on `rtenv.pip` / `rtenv.uv` as on the top-level fields.

Ray keeps the field without checking it (its verdict stays "valid"); the plugin refuses these
on each node, after the job is submitted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from rtenv_cli.core.errors import RtenvError
from rtenv_cli.core.lint.context import Context
from rtenv_cli.core.lint.diagnostic import Diagnostic, Severity
from rtenv_cli.core.spec.model import RTENV_FIELD

_KEY = re.compile(r"\['([^']*)'\]")


def check_rtenv_field(ctx: Context) -> Iterator[Diagnostic]:
    if not isinstance(ctx.data, Mapping) or RTENV_FIELD not in ctx.data:
        return
    from rtenv_cli.core.rayplugin import schema  # only for files that use the field

    value = ctx.data[RTENV_FIELD]
    try:
        spec = schema.parse(value)
    except RtenvError as exc:
        yield _schema_finding(ctx, exc)
        return
    # the plugin's own conflict lists: a venv conflicts with every interpreter-choosing field,
    # `limits` alone only with containers (Ray's pip/uv/conda add to the same command prefix)
    for other in schema.CONFLICTS if spec.kind else schema.LIMITS_CONFLICTS:
        if ctx.data.get(other):
            yield ctx.diag("RTE191", f"`{RTENV_FIELD}` and `{other}` cannot be combined: "
                           "rtenv's plugin refuses the runtime_env", (other,),
                           hint=f"move the requirements into `{RTENV_FIELD}` and drop "
                           f"`{other}`" if spec.kind else f"`{RTENV_FIELD}.limits` cannot "
                           "reach a worker in a container: drop one of them")
    sub = replace(ctx, data=spec.to_dict(), prefix=(*ctx.prefix, RTENV_FIELD))
    from rtenv_cli.core.lint.rules.requirements import check_requirements

    for diag in check_requirements(sub):
        if diag.code != "RTE140":
            yield diag
            continue
        yield replace(diag, code="RTE194", severity=Severity.ERROR,
                      message=diag.message.split(":")[0] + ": rtenv's plugin refuses it, a "
                      "worker must import the node's own Ray",
                      hint="remove `ray` from the requirements (the cluster's Ray is used)")


def _schema_finding(ctx: Context, exc: RtenvError) -> Diagnostic:
    keys: list[Any] = _KEY.findall(exc.message)[1:]  # after ['rtenv']
    if keys[:1] == ["limits"] or "['limits']" in exc.message:
        code = "RTE193"
    elif "is relative" in exc.message:
        code = "RTE192"
    else:
        code = "RTE190"
    return ctx.diag(code, exc.message.split(": ", 1)[-1], (RTENV_FIELD, *keys), hint=exc.hint,
                    prefer="value" if code == "RTE192" else "key")


CHECKS = (check_rtenv_field,)
