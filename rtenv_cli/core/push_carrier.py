"""`rtenv push` of a file that carries runtime_envs: a Ray Serve config (`serve deploy`) or a
KubeRay manifest (`kubectl apply`).

Every runtime_env of the file (each application's and each deployment's, a RayJob's
`runtimeEnvYAML`, a RayService's `serveConfigV2`; forms.py finds them) is validated and its
local working_dir/py_modules published as a plain push does; then the same file is written back
with each local path replaced by its URI and each local requirements file by its lines. The
values are edited in the file's text (spec/rewrite.py), so comments, key order and quoting stay.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtenv_cli.core.errors import ConfigError, UsageError
from rtenv_cli.core.transport.base import Target

if TYPE_CHECKING:  # a directory's push never reads a form: spec.forms stays unimported
    from rtenv_cli.core.push import PushResult
    from rtenv_cli.core.spec.forms import Form

CARRIERS = ("serve", "kuberay")  # Form kinds pushed as a whole file
_MISSING = object()  # no value equals it
_EMBEDDED = ("runtimeEnvYAML", "runtimeEnv", "serveConfigV2")  # KubeRay's YAML strings


def read_carrier(path: Path | str | None, cwd: Path) -> Form | None:
    """The form of `path` when it is a Serve config or a KubeRay manifest, else None (a plain
    runtime_env, a job spec, a directory: push's usual input)."""
    if path is None or not (cwd / path).is_file():  # a directory: nothing to import below
        return None
    from rtenv_cli.core.spec.forms import read
    from rtenv_cli.core.spec.loader import load_path

    doc = load_path(cwd / path)
    form = read(doc) if doc.error is None or doc.error.kind == "ComposerError" else None
    return form if form is not None and form.kind in CARRIERS else None


def push_file(path: Path | str | None, **options: Any) -> PushResult:
    """`rtenv push PATH`: a Serve config or KubeRay manifest pushed whole (see the module
    docstring), anything else by core/push.py's `push`; `options` are `push`'s."""
    from rtenv_cli.core.push import push

    cwd = options.get("cwd")
    carrier = read_carrier(path, Path.cwd() if cwd is None else cwd)
    if carrier is None:
        return push(path, **options)
    return push_carrier(carrier, str(path), **options)


def push_carrier(form: Form, label: str, *, target: Target | None, dry_run: bool = False,
                 stage_to: Target | None = None, env: Mapping[str, str] | None = None,
                 progress: Any = None, cwd: Path | None = None, base_dir: Path | None = None,
                 outputs: Sequence[Path] = (), sizes: bool | None = None,
                 rtenv_envs: bool = False, **publish_options: Any) -> PushResult:
    """Push every runtime_env of `form` (`push`'s options; the rest go to `publish`); the
    result's `document` is the file written back."""
    import os

    from rtenv_cli.core.push import (
        PushResult,
        base_path,
        package_runtime_env,
        publish,
        validate,
    )
    from rtenv_cli.core.rayplugin.convert import inline_files
    from rtenv_cli.core.spec.rewrite import rewrite

    if rtenv_envs:
        raise UsageError("--rtenv-envs is not supported for a Serve config or KubeRay manifest",
                         hint="push a runtime_env file with --rtenv-envs")
    if form.errors:
        path, error = form.errors[0]
        raise ConfigError(f"{label}: {'.'.join(map(str, path))}: cannot parse: "
                          f"{error.message}", path=label,
                          hint=f"run `rtenv validate {label}` for where")
    env = dict(os.environ if env is None else env)
    base = base_path(cwd, base_dir)
    sizes = dry_run if sizes is None else sizes
    values: dict[tuple[Any, ...], Any] = {}
    drop: list[tuple[Any, ...]] = []
    packages, notes = [], []
    first: dict[str, Any] = {}
    taken: str | None = None  # the path the packages took (push.tree_path: one per target)
    for site in form.sites:
        where = ".".join(map(str, site.prefix))
        if not isinstance(site.data, dict):
            raise ConfigError(f"{label}: {where}: a runtime_env must be a mapping, not "
                              f"{type(site.data).__name__}", path=label,
                              hint="write keys like working_dir:, env_vars:")
        notes += [f"{where}: {n}" for n in validate(site.data, base, f"{label}: {where}", env)]
        data, inlined = inline_files(site.data, base)
        for json_path, name in inlined:
            values[site.prefix + tuple(json_path)] = _get(data, json_path)
            notes.append(f"{where}.{'.'.join(json_path)}: inlined {name}, so the pushed file "
                         "works from any directory")
        plans = package_runtime_env(data, base, outputs)
        if not plans:
            continue
        result = publish(data, base, target=target, dry_run=dry_run, stage_to=stage_to,
                         env=env, progress=progress, outputs=outputs, sizes=sizes,
                         **publish_options)
        packages += [replace(p, field=f"{where}.{p.field}") for p in result.packages]
        # the publish's notes: the one line saying why not the tree path (push.tree_path), once
        notes += [n for n in result.notes if n not in notes]
        taken = taken or result.path
        for plan in plans:
            values[site.prefix + plan.json_path] = _published(result.runtime_env, plan, label)
        if "excludes" in data:
            drop.append((*site.prefix, "excludes"))
        first = first or result.runtime_env
    if not packages:
        notes.append("no local working_dir or py_modules: nothing to package")
    document = rewrite(form.doc, values, drop, _embedded(form, values, drop))
    _check(form, document, values, label)
    pins = target is not None and target.pins and not dry_run and packages
    from rtenv_cli.core.transport.base import PIN_SECONDS

    return PushResult(tuple(packages), first, target.label if target is not None else
                      "(dry run)", dry_run, PIN_SECONDS if pins else None, tuple(notes),
                      path=taken, document=document)


def _published(runtime_env: Any, plan: Any, label: str) -> Any:
    """The URI a plan's local path became, where the path was."""
    try:
        return _get(runtime_env, plan.json_path)
    except (KeyError, IndexError, TypeError):
        raise ConfigError(f"{label}: {plan.field} was published where a Serve config or "
                          "manifest cannot point to it", path=label,
                          hint="push its runtime_env from a file of its own") from None


def _get(data: Any, path: Sequence[Any]) -> Any:
    for key in path:
        data = data[key]
    return data


def _set(data: Any, path: Sequence[Any], value: Any) -> None:
    _get(data, path[:-1])[path[-1]] = value


def _embedded(form: Form, values: Mapping[tuple[Any, ...], Any],
              drop: Sequence[tuple[Any, ...]]) -> list[tuple[tuple[Any, ...], Any]]:
    """Each KubeRay YAML string of the file with its new data (used when its positions are
    not the file's own and the whole string is written anew)."""
    found: dict[tuple[Any, ...], Any] = {}
    for site in form.sites:
        if site.prefix and site.prefix[-1] in _EMBEDDED:
            found[site.prefix] = copy.deepcopy(site.data)
    for config in form.serve_configs:
        if config.prefix and config.prefix[-1] in _EMBEDDED:
            found[config.prefix] = copy.deepcopy(config.data)
    for holder, data in found.items():
        for path, value in values.items():
            if path[:len(holder)] == holder:
                _set(data, path[len(holder):], value)
        for path in drop:
            if path[:len(holder)] == holder:
                _get(data, path[len(holder):-1]).pop(path[-1], None)
    return list(found.items())


def _check(form: Form, document: str, values: Mapping[tuple[Any, ...], Any],
           label: str) -> None:
    """The written file reads back with the new values (a failed text edit is a bug, never a
    file Ray gets)."""
    from rtenv_cli.core.spec.forms import read
    from rtenv_cli.core.spec.loader import load_text

    again = read(load_text(document, label))  # read() takes a `---` stream's manifests itself
    wrong = [p for p in values if again is None or _lookup(again.doc.data, p) != values[p]]
    if wrong or again is None or len(again.sites) != len(form.sites):
        raise ConfigError(f"{label}: could not write the pushed file in place"
                          f"{' at ' + '.'.join(map(str, wrong[0])) if wrong else ''}",
                          path=label, hint="push each runtime_env from a file of its own, and "
                          "report this file's shape to rtenv")


def _lookup(data: Any, path: tuple[Any, ...]) -> Any:
    """The value at `path`, reading through KubeRay's YAML (and base64) strings."""
    import yaml

    for index, key in enumerate(path):
        if isinstance(data, str) and index and path[index - 1] in _EMBEDDED:
            if path[index - 1] == "runtimeEnv":
                import base64

                data = base64.b64decode(data).decode("utf-8")
            data = yaml.safe_load(data)
        try:
            data = data[key]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    if isinstance(data, str) and path and path[-1] in _EMBEDDED:
        return yaml.safe_load(data)
    return data
