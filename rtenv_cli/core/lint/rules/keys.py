"""RTE101 unknown fields, RTE102 unknown sub-keys, RTE104 YAML 1.1 coercions, RTE105 shadowing."""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping

from rtenv_cli.core.lint.context import Context, coercion_hint, expects_string, walk
from rtenv_cli.core.lint.diagnostic import Diagnostic
from rtenv_cli.core.lint.rules.foreign import anyscale_keys, looks_foreign
from rtenv_cli.core.spec import fields, model

# keys users put at the top level that belong elsewhere
_MISPLACED = {
    "setup_timeout_seconds": "config", "eager_install": "config", "log_files": "config",
    "packages": "pip or uv", "pip_check": "pip", "pip_version": "pip",
    "pip_install_options": "pip", "uv_check": "uv", "uv_version": "uv",
    "uv_pip_install_options": "uv", "dependencies": "conda", "channels": "conda",
}
# common aliases that difflib would not find
_ALIASES = {"pypi": "pip", "requirements": "pip", "env": "env_vars", "environment": "env_vars",
            "envs": "env_vars", "workdir": "working_dir", "cwd": "working_dir",
            "image": "image_uri", "exclude": "excludes", "modules": "py_modules"}


def suggest(name: str, candidates: tuple[str, ...]) -> str | None:
    lowered = name.lower().replace("-", "_")
    if lowered in _ALIASES and _ALIASES[lowered] in candidates:
        return _ALIASES[lowered]
    if lowered in candidates:
        return lowered
    close = difflib.get_close_matches(lowered, candidates, n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_fields(ctx: Context) -> Iterator[Diagnostic]:
    if not isinstance(ctx.data, Mapping):
        return
    explained = {*anyscale_keys(ctx.data), *looks_foreign(ctx.data, near_miss)}  # RTE109/108
    for key in ctx.data:
        if not isinstance(key, str) or key in model.ALL_TOP_LEVEL_KEYS or key == "self" or \
                key in explained or key == model.RTENV_FIELD:  # the plugin's field: rtenv_field.py
            continue
        if key.startswith("x-"):
            hint = ("YAML anchor holders are shipped to the cluster as unknown fields; move the "
                    "anchor into a field that uses it or drop the key")
        elif key in _MISPLACED:
            hint = f"`{key}` belongs under `{_MISPLACED[key]}`"
        else:
            guess = suggest(key, model.SUGGESTABLE_KEYS)
            hint = (f"did you mean `{guess}`?" if guess else
                    "runtime_env fields: " + ", ".join(model.SUGGESTABLE_KEYS))
        yield ctx.diag("RTE101", f"unknown field `{key}`: Ray keeps it as a plugin name and "
                       "ignores it (one log line on the node)", (key,), hint=hint)


def unknown_subkeys(ctx: Context) -> Iterator[Diagnostic]:
    if not isinstance(ctx.data, Mapping):
        return
    config = ctx.data.get("config")
    if isinstance(config, Mapping):
        for key in config:
            if key not in model.CONFIG_KEYS:
                guess = suggest(str(key), model.CONFIG_KEYS)
                yield ctx.diag(
                    "RTE102", f"unknown config key `{key}`: Ray drops it with a log warning"
                    + (" (the 600 s setup timeout stays)" if guess == "setup_timeout_seconds"
                       else ""), ("config", key),
                    hint=f"did you mean `{guess}`?" if guess else
                    "config keys: " + ", ".join(model.CONFIG_KEYS))
    for field, known in (("conda", model.CONDA_KEYS), ("container", model.CONTAINER_KEYS)):
        value = ctx.data.get(field)
        if isinstance(value, Mapping):
            for key in value:
                if key not in known:
                    guess = suggest(str(key), known)
                    yield ctx.diag("RTE102", f"unknown {field} key `{key}`", (field, key),
                                   hint=f"did you mean `{guess}`?" if guess else
                                   f"{field} keys: " + ", ".join(known))


def yaml_coercions(ctx: Context) -> Iterator[Diagnostic]:
    """Unquoted scalars in string-typed places that YAML 1.1 re-typed, where Ray stays silent."""
    if not isinstance(ctx.data, Mapping):
        return
    reported = {e.json_path for e in ctx.pipeline.errors}  # Ray's error already says it
    for field in _COERCED:
        if field not in ctx.data:
            continue
        for path, value in walk(ctx.data[field], (field,)):
            if not expects_string(path):
                continue
            if isinstance(value, (Mapping, list, str)):
                if isinstance(value, str) and _looks_exponent(ctx.raw(path), value):
                    yield ctx.diag("RTE104", f"`{value}` is a string, not a number: YAML 1.1 "
                                   "needs a dot in a float", path, prefer="value",
                                   hint="write it quoted to make the intent explicit")
                continue
            if (*ctx.prefix, *path) in reported or field == "env_vars":
                continue  # Ray rejects non-string env values: RTE006 carries the same hint
            hint = coercion_hint(ctx.raw(path), value)
            if hint:
                yield ctx.diag("RTE104", f"unquoted value becomes {type(value).__name__} "
                               f"{value!r}, not the text you wrote", path, prefer="value",
                               hint=hint)


def _looks_exponent(raw: str | None, value: str) -> bool:
    import re

    return bool(raw and raw == value and re.fullmatch(r"[-+]?[0-9]+[eE][-+]?[0-9]+", raw))


def shadowed(ctx: Context) -> Iterator[Diagnostic]:
    if not isinstance(ctx.data, Mapping):
        return
    for public, internal in model.RENAMED.items():
        if public in ctx.data and internal in ctx.data:
            yield ctx.diag("RTE105", f"both `{public}` and `{internal}` are set: Ray keeps "
                           f"`{public}` and silently drops `{internal}`", (internal,),
                           hint=f"keep only `{public}`")


def near_miss(key: str) -> str | None:
    """The runtime_env field an unknown top-level `key` stands for (a typo, an alias, a key that
    belongs under a field), or None."""
    if key in _MISPLACED:
        return _MISPLACED[key]
    return suggest(key, model.SUGGESTABLE_KEYS)


def not_a_runtime_env(ctx: Context) -> Iterator[Diagnostic]:
    """RTE108: one finding for a mapping that is mostly foreign keys, instead of an RTE101 each."""
    foreign = looks_foreign(ctx.data, near_miss)
    if not foreign:
        return
    from rtenv_cli.core.lint.context import set_literal_hint

    literal = set_literal_hint(ctx.raw(()), ctx.data)
    if literal:
        yield ctx.diag("RTE108", "this is no runtime_env but a set of names: Ray would apply "
                       "none of them", (foreign[0],), hint=f"{literal}, under the field meant: "
                       "`pip: [...]` for packages")
        return
    shown = ", ".join(f"`{k}`" for k in foreign[:_SHOWN_FOREIGN])
    more = f" and {len(foreign) - _SHOWN_FOREIGN} more" if len(foreign) > _SHOWN_FOREIGN else ""
    yield ctx.diag("RTE108", f"this does not look like a runtime_env: {len(foreign)} of its "
                   f"{len(ctx.data)} top-level keys ({shown}{more}) are no runtime_env fields, "
                   "and Ray would apply none of them", (foreign[0],),
                   hint="if the file is not meant for Ray, leave it out of the check (name the "
                   "files, or pass --glob); runtime_env fields are "
                   + ", ".join(k for k in model.SUGGESTABLE_KEYS if not k.startswith("_")))


_COERCED = fields.names(where="coercions")  # fields RTE104 looks into
_SHOWN_FOREIGN = 4  # keys named in RTE108's message
CHECKS = (unknown_fields, unknown_subkeys, yaml_coercions, shadowed, not_a_runtime_env)
