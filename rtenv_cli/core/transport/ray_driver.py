"""A Ray driver run in a child process (`cache --address HOST:PORT`, `explain --verify`): the
one wording of its failure when this Python has no `ray` package, which otherwise reads like an
unreachable cluster."""

from __future__ import annotations

import sys

from rtenv_cli.core.errors import UnsupportedError

_MISSING = ("No module named 'ray'", 'No module named "ray"')


def ray_is_missing(output: str) -> bool:
    """Whether a driver's output ends in the import error of a missing `ray` package."""
    return any(m in output for m in _MISSING)


def missing_ray_error(address: str, what: str) -> UnsupportedError:
    """The error for `what` (e.g. "listing the nodes") at `address` without `ray` here."""
    return UnsupportedError(
        f"{what} at {address} runs a Ray driver, but the `ray` package is not installed in "
        f"this Python ({sys.executable})",
        hint="install Ray here in the cluster's version, e.g. pip install 'ray[default]==2.60.0'")
