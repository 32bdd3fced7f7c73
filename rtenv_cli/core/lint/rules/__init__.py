"""rtenv's rules beyond Ray's verdict; each module exports checks `(Context) -> [Diagnostic]`."""

from __future__ import annotations

from rtenv_cli.core.lint.rules import (
    env_vars,
    excludes,
    fields,
    foreign,
    keys,
    paths,
    requirements,
    resolve,
    rtenv_field,
    size,
)

CHECKS = (*keys.CHECKS, *paths.CHECKS, *excludes.CHECKS, *env_vars.CHECKS,
          *requirements.CHECKS, *size.CHECKS, *resolve.CHECKS, *fields.CHECKS,
          *foreign.CHECKS, *rtenv_field.CHECKS)
