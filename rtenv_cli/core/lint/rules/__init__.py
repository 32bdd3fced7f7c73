"""rtenv's rules beyond Ray's verdict; each module exports checks `(Context) -> [Diagnostic]`."""

from __future__ import annotations

from rtenv_cli.core.lint.rules import (
    env_names,
    env_vars,
    excludes,
    excludes_sources,
    fields,
    foreign,
    keys,
    paths,
    requirements,
    resolve,
    rtenv_field,
    size,
    uris,
)

CHECKS = (*keys.CHECKS, *paths.CHECKS, *excludes.CHECKS, *env_vars.CHECKS,
          *requirements.CHECKS, *size.CHECKS, *resolve.CHECKS, *fields.CHECKS,
          *foreign.CHECKS, *env_names.CHECKS, *uris.CHECKS, *excludes_sources.CHECKS,
          *rtenv_field.CHECKS)
