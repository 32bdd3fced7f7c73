"""Fields Ray passes through unchecked: RTE170 values the node will reject, RTE171 URIs that only
fail on the node, RTE172 silent precedence between fields."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import urlparse

from rtenv_cli.core.lint.context import Context
from rtenv_cli.core.lint.diagnostic import Diagnostic
from rtenv_cli.core.spec.fields import names

_INTERNAL_SCHEMES = ("pip", "uv", "conda")
_NODE_STR = names(where="node_str")  # strings Ray checks only on the node


def _type(value: object) -> str:
    return type(value).__name__


def node_types(ctx: Context) -> Iterator[Diagnostic]:
    data = ctx.data
    if not isinstance(data, Mapping) or ctx.pipeline.errors:
        return
    for field in _NODE_STR:
        value = data.get(field)
        if value is not None and not isinstance(value, str):
            yield ctx.diag("RTE170", f"`{field}` is {_type(value)} {value!r}: Ray does not check "
                           "it at submit, the node needs a string", (field,), prefer="value",
                           hint="quote it")
    jars = data.get("java_jars")
    if jars is not None and not (isinstance(jars, list) and all(isinstance(j, str) for j in jars)):
        yield ctx.diag("RTE170", "`java_jars` must be a list of URI strings; the node fails "
                       "otherwise", ("java_jars",), prefer="value",
                       hint="java_jars: [\"s3://bucket/lib.jar\"]")
    container = data.get("container")
    if container and not isinstance(container, Mapping):
        yield ctx.diag("RTE170", f"`container` is {_type(container)}: the node calls "
                       "container.get('image') and fails", ("container",), prefer="value",
                       hint="container: {image: ..., run_options: [...]}, or use image_uri")
    for field in ("nsight", "_nsight"):
        value = data.get(field)
        if isinstance(value, str) and value != "default":
            yield ctx.diag("RTE170", f"`{field}: {value}`: the node only accepts \"default\" "
                           "or a mapping of nsys options", (field,), prefer="value",
                           hint="nsight: default")
    conda = data.get("conda")
    if isinstance(conda, Mapping) and "dependencies" in conda and \
            not isinstance(conda["dependencies"], list):
        yield ctx.diag("RTE170", "conda `dependencies` must be a list; conda env create fails "
                       "on the node", ("conda", "dependencies"), prefer="value",
                       hint="dependencies: [python=3.11, pip, {pip: [requests]}]")
    if isinstance(conda, str):
        suffix = Path(conda).suffix
        if suffix.lower() in (".yaml", ".yml") and suffix not in (".yaml", ".yml"):
            yield ctx.diag("RTE170", f"`{conda}` is treated as a conda env *name*: Ray only "
                           "reads files ending in lower-case .yaml/.yml", ("conda",),
                           prefer="value", hint=f"rename it to {Path(conda).stem}.yaml")
        elif suffix in (".yaml", ".yml") and "conda" in data and \
                ctx.pipeline.normalized is not None and "conda" not in ctx.pipeline.normalized:
            yield ctx.diag("RTE170", f"`{conda}` is empty: Ray silently drops the conda field",
                           ("conda",), prefer="value", hint="fill in the environment, or remove "
                           "the field")
    env_vars = data.get("env_vars")
    if isinstance(env_vars, Mapping) and "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR" in env_vars:
        yield ctx.diag("RTE170", "`__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR` is reserved for "
                       "Ray's setup hook", ("env_vars", "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"),
                       hint="set worker_process_setup_hook instead")


def node_uris(ctx: Context) -> Iterator[Diagnostic]:
    data = ctx.data
    if not isinstance(data, Mapping):
        return
    entries: list[tuple[tuple[object, ...], object]] = [(("working_dir",), data.get("working_dir"))]
    mods = data.get("py_modules")
    if isinstance(mods, list):
        entries += [(("py_modules", i), m) for i, m in enumerate(mods)]
    for path, value in entries:
        if not isinstance(value, str):
            continue
        scheme = urlparse(value).scheme
        if scheme in _INTERNAL_SCHEMES:
            yield ctx.diag("RTE171", f"`{value}`: the {scheme}:// scheme is internal to Ray; it "
                           "passes submit unchecked and fails on the node", path, prefer="value",
                           hint="use a local path or an s3://, gs://, https:// ... archive URI")
        elif scheme == "local":
            yield ctx.diag("RTE171", f"`{value}` must already exist on every node; Ray checks it "
                           "only when a worker starts there", path, prefer="value",
                           hint="bake the directory into the node image, or ship it as a "
                           "package")


def precedence(ctx: Context) -> Iterator[Diagnostic]:
    data = ctx.data
    if not isinstance(data, Mapping) or not data.get("py_executable"):
        return
    managers = [f for f in ("pip", "uv", "conda") if data.get(f)]
    if managers:
        yield ctx.diag("RTE172", f"`py_executable` overrides the interpreter that {managers[0]} "
                       "sets up (the py_executable plugin runs later)", ("py_executable",),
                       hint=f"remove py_executable to run inside the {managers[0]} environment")
    profilers = [f for f in ("nsight", "_nsight", "rocprof_sys", "_rocprof_sys") if data.get(f)]
    if profilers:
        yield ctx.diag("RTE172", f"`{profilers[0]}` replaces the interpreter command set by "
                       "`py_executable`", (profilers[0],),
                       hint="profile without py_executable, or wrap it yourself")


CHECKS = (node_types, node_uris, precedence)
