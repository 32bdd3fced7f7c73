"""env_vars names: RTE136 a search path without the node's own value, RTE137 a typo in a
well-known name (Ray's RAY_*, NCCL, CUDA, Hugging Face, W&B), RTE138 a Ray setting that no
process started by the runtime_env reads."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from rtenv_cli.core.lint.context import Context
from rtenv_cli.core.lint.diagnostic import Diagnostic
from rtenv_cli.core.lint.rules.env_known import (
    CACHE_SIZE,
    CUDA,
    DRIVER_ONLY,
    FAMILIES,
    HUGGING_FACE,
    NCCL,
    PATH_VARS,
    WANDB,
)

_CACHE_SIZE = r"RAY_RUNTIME_ENV_[A-Z_]+_CACHE_SIZE_GB"
_LONG_NAME = 12  # longer names may be two edits away from the one meant
_CLOSE = 0.85
_OWNERS = {"RAY_": "Ray", "NCCL_": "NCCL", "CUDA_": "CUDA",
           "WANDB_": "W&B"}  # difflib ratio that makes a name a candidate at all


def _items(ctx: Context) -> dict[str, str]:
    env_vars = ctx.data.get("env_vars") if isinstance(ctx.data, Mapping) else None
    if not isinstance(env_vars, Mapping):
        return {}
    return {k: v for k, v in env_vars.items() if isinstance(k, str) and isinstance(v, str)}


def keeps_node_value(name: str, value: str) -> bool:
    """Does `value` include the worker's own `name` (`$NAME` or `${NAME}`, which Ray expands
    with os.path.expandvars)?"""
    return re.search(r"\$(?:" + re.escape(name) + r"(?![A-Za-z0-9_])|\{" + re.escape(name)
                     + r"\})", value) is not None


def path_overwritten(ctx: Context) -> Iterator[Diagnostic]:
    for name, value in _items(ctx).items():
        effect = PATH_VARS.get(name)
        if effect is None or keeps_node_value(name, value):
            continue
        yield ctx.diag("RTE136", f"{name}={value!r} replaces the node's {name} on every "
                       f"worker: {effect}", ("env_vars", name), prefer="value",
                       hint=f"append the node's value: \"{value + ':' if value else ''}${name}\"")


def _known(family: str) -> frozenset[str]:
    if family == "RAY_":
        from rtenv_cli.core.lint.rules.ray_env_names import ray_env_names

        return ray_env_names() | frozenset(DRIVER_ONLY)
    return {"NCCL_": NCCL, "CUDA_": CUDA, "WANDB_": WANDB}.get(
        family, HUGGING_FACE)


def _distance(a: str, b: str) -> int:
    """Edit distance with transpositions (optimal string alignment)."""
    rows = [list(range(len(b) + 1))]
    for i, ca in enumerate(a, 1):
        row = [i]
        for j, cb in enumerate(b, 1):
            cost = 0 if ca == cb else 1
            row.append(min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + cost))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                row[j] = min(row[j], rows[-2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]


def meant(name: str) -> str | None:
    """The well-known name `name` is a typo of, or None (known, unrelated, or ambiguous)."""
    family = next((f for f in FAMILIES if name.upper().startswith(f)), None)
    if family is None or re.fullmatch(_CACHE_SIZE, name) or name.startswith("WANDB__"):
        return None
    known = _known(family)
    if name in known:
        return None
    same = [k for k in known if k.lower() == name.lower()]
    if len(same) == 1:
        return same[0]  # Ray's config names are case-sensitive: RAY_memory_usage_threshold
    import difflib

    limit = 2 if len(name) > _LONG_NAME else 1
    close = difflib.get_close_matches(name, known, n=3, cutoff=_CLOSE)
    best = sorted((_distance(name, k), k) for k in close)
    best = [(d, k) for d, k in best if d <= limit]
    if not best or (len(best) > 1 and best[0][0] == best[1][0]):
        return None
    return best[0][1]


def name_typo(ctx: Context) -> Iterator[Diagnostic]:
    for name in _items(ctx):
        guess = meant(name)
        if guess is None:
            continue
        case = guess.lower() == name.lower()
        owner = _OWNERS.get(guess.split("_", 1)[0] + "_", "Hugging Face")
        yield ctx.diag("RTE137", f"`{name}` is not a name {owner} reads, `{guess}` is"
                       + (" (names are case-sensitive)" if case else ": a typo?"),
                       ("env_vars", name), hint=f"did you mean `{guess}`?")


def driver_only(ctx: Context) -> Iterator[Diagnostic]:
    for name in _items(ctx):
        setting = DRIVER_ONLY.get(name)
        if setting is None and re.fullmatch(_CACHE_SIZE, name):
            setting = CACHE_SIZE
        if setting is None:
            continue
        yield ctx.diag("RTE138", f"{name} does nothing in a runtime_env: only {setting.reader} "
                       "reads it, not the workers this runtime_env starts", ("env_vars", name),
                       hint=setting.instead)


CHECKS = (path_overwritten, name_typo, driver_only)
