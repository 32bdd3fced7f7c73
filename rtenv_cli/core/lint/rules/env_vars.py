"""env_vars rules: RTE130 visibility vars, RTE131 OMP, RTE132 PYTHONPATH, RTE133 secrets,
RTE134 expansion surprises, RTE135 names/sizes the worker cannot set."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from rtenv_cli.core.lint.context import Context, coercion_hint
from rtenv_cli.core.lint.diagnostic import Diagnostic, Severity
from rtenv_cli.core.lint.secrets import CREDENTIAL_FORMATS, is_secret, name_suggests_secret

# variable -> the RAY_EXPERIMENTAL_NOSET_* switch that stops Ray from overwriting it
VISIBILITY_VARS = {
    "CUDA_VISIBLE_DEVICES": "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES": "RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES": "RAY_EXPERIMENTAL_NOSET_ROCR_VISIBLE_DEVICES",
    "NEURON_RT_VISIBLE_CORES": "RAY_EXPERIMENTAL_NOSET_NEURON_RT_VISIBLE_CORES",
    "TPU_VISIBLE_CHIPS": "RAY_EXPERIMENTAL_NOSET_TPU_VISIBLE_CHIPS",
    "HABANA_VISIBLE_MODULES": "RAY_EXPERIMENTAL_NOSET_HABANA_VISIBLE_MODULES",
    "ASCEND_RT_VISIBLE_DEVICES": "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES",
    "ONEAPI_DEVICE_SELECTOR": "RAY_EXPERIMENTAL_NOSET_ONEAPI_DEVICE_SELECTOR",
    "RBLN_DEVICES": "RAY_EXPERIMENTAL_NOSET_RBLN_RT_VISIBLE_DEVICES",
    "TT_VISIBLE_DEVICES": "RAY_EXPERIMENTAL_NOSET_TT_VISIBLE_DEVICES",
    "FURIOSA_DEVICES": "RAY_EXPERIMENTAL_NOSET_FURIOSA_DEVICES",
    "QBRUNTIME_VISIBLE_DEVICES": "RAY_EXPERIMENTAL_NOSET_MBLT_RT_VISIBLE_DEVICES",
}
SECRET_VALUE = CREDENTIAL_FORMATS  # what a secret value looks like (lint/secrets.py decides)
MAX_ARG_STRLEN = 128 * 1024
_SHOW_PREFIX_FROM = 8  # shorter secrets are hidden completely


def redact(value: str) -> str:
    return "****" if len(value) <= _SHOW_PREFIX_FROM else f"{value[:3]}****"


_MIN_SCRUBBED = 4  # shorter values would blank unrelated text; RTE133 still names them


def secret_values(env_vars: object) -> set[str]:
    """The strings of `env_vars` that are secrets (lint/secrets.py: by shape, or by name and
    shape), wherever they sit: a wrongly typed value (`DB_PASSWORD: [..]`) holds its secret in
    a list."""
    if not isinstance(env_vars, Mapping):
        return set()
    found: set[str] = set()
    for key, value in env_vars.items():
        name = key if isinstance(key, str) else ""
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, Mapping):
                stack.extend(item.values())
            elif isinstance(item, (list, tuple)):
                stack.extend(item)
            elif isinstance(item, str) and len(item) >= _MIN_SCRUBBED and is_secret(name, item):
                found.add(item)
    return found


def scrub(text: str, secrets: set[str]) -> str:
    """`text` with every secret value replaced by its redacted form."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, redact(secret))
    return text


def _str_items(ctx: Context) -> dict[str, str]:
    env_vars = ctx.data.get("env_vars") if isinstance(ctx.data, Mapping) else None
    if not isinstance(env_vars, Mapping):
        return {}
    return {k: v for k, v in env_vars.items() if isinstance(k, str) and isinstance(v, str)}


def overridden(ctx: Context) -> Iterator[Diagnostic]:
    items = _str_items(ctx)
    for name, switch in VISIBILITY_VARS.items():
        if name in items and items.get(switch) != "1":
            yield ctx.diag("RTE130", f"Ray overwrites {name} in every task or actor that is "
                           "assigned accelerators: this value only reaches workers without any",
                           ("env_vars", name),
                           hint=f"request the devices (num_gpus=..., resources=...), or set "
                           f"{switch}=\"1\" if you really manage visibility yourself")
    if "OMP_NUM_THREADS" in items:
        yield ctx.diag("RTE131", f"OMP_NUM_THREADS={items['OMP_NUM_THREADS']} applies to every "
                       "worker; Ray would otherwise set it to each task's num_cpus",
                       ("env_vars", "OMP_NUM_THREADS"),
                       hint="remove it and size tasks with num_cpus, unless every worker has "
                       "the same CPU count")
    from rtenv_cli.core.lint.rules.env_names import keeps_node_value  # RTE136's test too

    if "PYTHONPATH" in items and not keeps_node_value("PYTHONPATH", items["PYTHONPATH"]):
        yield ctx.diag("RTE132", "PYTHONPATH replaces the worker's PYTHONPATH (Ray still "
                       "prepends working_dir and py_modules)", ("env_vars", "PYTHONPATH"),
                       hint=f"append the existing value: \"{items['PYTHONPATH']}:$PYTHONPATH\"")


def secrets(ctx: Context) -> Iterator[Diagnostic]:
    for name, value in _str_items(ctx).items():
        if is_secret(name, value):
            yield ctx.diag("RTE133", f"{name}={redact(value)} looks like a secret; runtime_envs "
                           "are stored in the GCS and shown in the dashboard and job logs",
                           ("env_vars", name), prefer="key",
                           hint="read it from the cluster's environment or a secret store, or "
                           "reference it: \"${" + name + "}\"")


def expansion(ctx: Context) -> Iterator[Diagnostic]:
    items = _str_items(ctx)
    refs = {k: v for k, v in items.items() if "$" in v}
    if not refs:
        return
    # the worker's own environment is unknown: assume common variables exist, as non-empty
    base = {name: f"<worker {name}>" for name in ("PATH", "HOME", "PYTHONPATH", "USER",
                                                  "LD_LIBRARY_PATH", "HOSTNAME")}
    from rtenv_cli.core.explain.expand import (  # Ray's update_envs, one place
        expand_env_vars,
        var_refs,
    )

    final = expand_env_vars(items, base)
    for key, raw in sorted(refs.items()):
        got = final.get(key, raw)
        # each said once, however often it is referenced
        problems: dict[str, None] = {}
        outside: dict[str, None] = {}
        for match in var_refs(raw):
            name = match.group(1).strip("{}")
            if name in items and key < name:
                problems[f"`{name}` is set after `{key}` (Ray applies keys in sorted order)"] = None
            elif name not in items and name not in base:
                outside[f"`{name}`"] = None
        shown = redact(got) if ctx.data and name_suggests_secret(key) else got
        if problems:  # wrong whatever the node holds
            yield ctx.diag("RTE134", f"{key} becomes {shown!r} on the worker: "
                           + "; ".join(problems), ("env_vars", key), prefer="value",
                           hint="write the value out, or rename keys so that referenced ones "
                           "sort first")
        elif outside:  # the node's (the raylet's) environment, or a job's env_vars for a task
            yield ctx.diag("RTE134", f"{key} reads {', '.join(outside)} from the node's "
                           "environment (the raylet's; for a task's runtime_env also the "
                           f"job's env_vars): {shown!r} where neither sets it",
                           ("env_vars", key), prefer="value", severity=Severity.INFO,
                           hint="set it on every node before `ray start`, or in env_vars")


def names(ctx: Context) -> Iterator[Diagnostic]:
    env_vars = ctx.data.get("env_vars") if isinstance(ctx.data, Mapping) else None
    if not isinstance(env_vars, Mapping):
        return
    for key, value in env_vars.items():
        if not isinstance(key, str):
            continue
        if key == "" or "=" in key or "\0" in key:
            yield ctx.diag("RTE135", f"env var name {key!r} cannot be set: the worker fails to "
                           "start", ("env_vars", key), hint="use a name without `=`")
        elif isinstance(value, str) and len(key) + len(value) + 1 > MAX_ARG_STRLEN:
            yield ctx.diag("RTE135", f"{key} is {len(value)} characters: over Linux's 128 KiB "
                           "per-variable limit, the worker cannot exec", ("env_vars", key),
                           hint="ship large values as a file in working_dir")


def more_bad_values(ctx: Context) -> Iterator[Diagnostic]:
    """Ray stops at the first non-string env var; report the others too (same fix each)."""
    env_vars = ctx.data.get("env_vars") if isinstance(ctx.data, Mapping) else None
    if not isinstance(env_vars, Mapping):
        return
    reported = {e.json_path for e in ctx.pipeline.errors}
    for key, value in env_vars.items():
        path = ("env_vars", key)
        if (*ctx.prefix, *path) in reported or not isinstance(key, str) or isinstance(value, str):
            continue
        if not any(e.json_path[:len(ctx.prefix) + 1] == (*ctx.prefix, "env_vars")
                   for e in ctx.pipeline.errors):
            return  # Ray rejected nothing here (e.g. env_vars was dropped or not a mapping)
        yield ctx.diag("RTE006", f"runtime_env['env_vars'] must be of type Dict[str, str], but "
                       f"the value {value} is of type {type(value)}", path, prefer="value",
                       ray_error=True,
                       hint=coercion_hint(ctx.raw(path), value) or "write the value as a string")


CHECKS = (overridden, secrets, expansion, names, more_bad_values)
