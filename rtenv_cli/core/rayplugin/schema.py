"""The `rtenv` runtime_env field: its schema, in one place (the plugin checks it on each node;
`rtenv validate` can import it).

    runtime_env = {"rtenv": {"pip": ["six==1.16.0"]}}
    runtime_env = {"rtenv": {"uv": {"packages": ["six"], "uv_pip_install_options": [...]}}}

`pip` and `uv` take what Ray's own `pip`/`uv` fields take (a list of requirements, a
requirements file, or a dict with `packages` and options); uv builds both. `pip_version` and
`uv_version` are accepted and ignored (the node's uv builds every environment). A requirements
file is read on the node: its path is absolute there, or starts with
`${RAY_RUNTIME_ENV_CREATE_WORKING_DIR}` (the job's working_dir on the node). `ray` itself may not
be listed: the node's Ray is the one a worker must import.

`working_dir: "rtenv-tree://<id>"` and `py_modules: ["rtenv-tree://<id>", ...]` are trees
`rtenv push` published to the cluster's KV (core/trees/): the plugin materializes each on the
node and applies it as Ray's own working_dir / py_modules (the worker starts in the working_dir;
both are importable; `${RAY_RUNTIME_ENV_CREATE_WORKING_DIR}` in `pip`/`uv` names the tree).
They may come alone, and exclude Ray's own `working_dir` / `py_modules` in the same runtime_env.

`limits: {"memory": "4GB", "cpus": 2}` (core/spec/limits.py) runs each worker of the environment in
its own cgroup (rayplugin/cgexec.py); it may come alone (a plain worker in a cgroup).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rtenv_cli.core.errors import ValidationError
from rtenv_cli.core.spec.fields import FIELDS, names
from rtenv_cli.core.spec.limits import LimitsField, parse_limits
from rtenv_cli.core.spec.model import RTENV_FIELD

FIELD = RTENV_FIELD
PLUGIN_CLASS = "rtenv_cli.ray_plugin.RtenvPlugin"
# Before Ray's built-in plugins (10; working_dir is always first): the plugin removes push's
# guard (GUARD_FIELD) before Ray's nsight plugin, which fails a node without rtenv's plugin
PRIORITY = 9
# the guard beside an `rtenv` field of trees: guard.py (push imports it without this module)
KINDS = ("pip", "uv")
TREES = ("working_dir", "py_modules")  # rtenv-tree:// URIs, written by `rtenv push`
KEYS = (*KINDS, *TREES, "limits")
# fields that also choose the worker's interpreter: one of them with `rtenv` is ambiguous
CONFLICTS = tuple(f.name for f in FIELDS if f.plugin != "ok")  # from the field table
# a worker in a container is started by the container's runtime, not by our prefix
LIMITS_CONFLICTS = names(where="plugin", value="container")
WORKING_DIR_VAR = "${RAY_RUNTIME_ENV_CREATE_WORKING_DIR}"

# the node's settings, read by the plugin in Ray's agent (`rtenv ray-env` prints them)
PLUGINS_ENV = "RAY_RUNTIME_ENV_PLUGINS"
CACHE_SIZE_ENV = "RAY_RUNTIME_ENV_RTENV_CACHE_SIZE_GB"
MAX_SIZE_ENV = "RTENV_MAX_SIZE"  # the store's budget, enforced after each build
MAX_AGE_ENV = "RTENV_MAX_AGE"
# how long the plugin's reference outlives the last process seen using it (engine.py)
LEASE_ENV = "RTENV_RAY_LEASE"

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_FILE_OPTIONS = ("-r", "--requirement", "-c", "--constraint")


@dataclass(frozen=True)
class RtenvSpec:
    """A checked `rtenv` field: which of Ray's fields it mirrors and that field's value (None
    for a field with `limits` alone), and the per-worker limits."""

    kind: str | None  # pip | uv | None
    value: Any  # as Ray's `pip`/`uv` field takes it
    limits: LimitsField | None = None
    working_dir: str | None = None  # rtenv-tree://<manifest id>
    py_modules: tuple[str, ...] = ()

    @property
    def trees(self) -> tuple[str, ...]:
        """Every tree URI, the working_dir's first."""
        return ((self.working_dir,) if self.working_dir else ()) + self.py_modules

    def to_dict(self) -> dict[str, Any]:
        """What the environment's build depends on (the limits do not)."""
        return {self.kind: self.value} if self.kind else {}


def _fail(message: str, path: str, hint: str) -> ValidationError:
    return ValidationError(f"runtime_env['{FIELD}']{path}: {message}", hint=hint,
                           path=f"{FIELD}{path}")


def parse(value: object, runtime_env: Mapping[str, Any] | None = None) -> RtenvSpec:
    """Check an `rtenv` field (and that `runtime_env` sets no field it conflicts with)."""
    if not isinstance(value, Mapping) or not value:
        raise _fail("must be a mapping with `pip`, `uv`, `working_dir`, `py_modules` or "
                    "`limits`", "", 'write e.g. {"rtenv": {"pip": ["six==1.16.0"]}}')
    for key in value:
        if key not in KEYS:
            close = difflib.get_close_matches(str(key), KEYS, n=1)
            raise _fail(f"unknown key {key!r}", f"[{key!r}]",
                        f"did you mean {close[0]!r}?" if close else
                        f"the keys are {', '.join(KEYS)}")
    limits = parse_limits(value["limits"]) if value.get("limits") is not None else None
    working_dir, py_modules = _trees(value, runtime_env)
    kinds = [k for k in KINDS if value.get(k) is not None]
    if len(kinds) > 1 or (not kinds and limits is None and not working_dir and not py_modules):
        raise _fail("needs exactly one of `pip` and `uv` (or `limits`, `working_dir`, "
                    "`py_modules` alone)", "", "keep one of them")
    both = [f for f in (CONFLICTS if kinds else LIMITS_CONFLICTS)
            if runtime_env and runtime_env.get(f)]
    if both:
        raise ValidationError(f"runtime_env sets both `{FIELD}` and `{both[0]}`",
                              hint=f"move the requirements into `{FIELD}` and drop `{both[0]}`"
                              if kinds else f"`{FIELD}.limits` cannot reach a worker in a "
                              f"container: drop one of them",
                              path=both[0])
    if not kinds:
        return RtenvSpec(None, None, limits, working_dir, py_modules)
    kind = kinds[0]
    inner = value[kind]
    _check_paths(inner, kind)
    return RtenvSpec(kind, inner, limits, working_dir, py_modules)


def _trees(value: Mapping[str, Any], runtime_env: Mapping[str, Any] | None
           ) -> tuple[str | None, tuple[str, ...]]:
    """The field's tree URIs, checked (and that Ray's own field of the same name is unset)."""
    from rtenv_cli.core.trees.manifest import TreeFormatError, manifest_id

    wd, mods = value.get("working_dir"), value.get("py_modules")
    if mods is not None and (not isinstance(mods, list) or
                             not all(isinstance(m, str) for m in mods)):
        raise _fail("must be a list of rtenv-tree:// URIs", "['py_modules']",
                    "`rtenv push` writes this field; push again")
    if wd is not None and not isinstance(wd, str):
        raise _fail("must be an rtenv-tree:// URI", "['working_dir']",
                    "`rtenv push` writes this field; push again")
    for path, uri in [("['working_dir']", wd)] * bool(wd) + [
            (f"['py_modules'][{i}]", m) for i, m in enumerate(mods or [])]:
        try:
            manifest_id(uri)
        except TreeFormatError as exc:
            raise _fail(exc.message, path, exc.hint or "") from None
    for key, given in (("working_dir", wd), ("py_modules", mods)):
        if given and runtime_env and runtime_env.get(key):
            raise ValidationError(f"runtime_env sets both `{key}` and `{FIELD}.{key}`",
                                  hint=f"keep one: `rtenv push` moves `{key}` into "
                                  f"`{FIELD}.{key}` when every node runs rtenv's plugin",
                                  path=key)
    return wd or None, tuple(mods or ())


def _check_paths(inner: object, kind: str) -> None:
    """A requirements file is read on the node, where a relative path means nothing."""
    files = []
    if isinstance(inner, str):
        files.append((inner, f"['{kind}']"))
    elif isinstance(inner, Mapping) and isinstance(inner.get("packages"), str):
        files.append((inner["packages"], f"['{kind}']['packages']"))
    for name, path in files:
        if not name.startswith(("/", "~", WORKING_DIR_VAR)):
            raise _fail(f"requirements file {name!r} is relative", path,
                        f"the file is read on each node: give an absolute path there, or "
                        f"{WORKING_DIR_VAR}/{name} for a file in the job's working_dir")


def requirement_name(line: str) -> str | None:
    """The normalised project name a requirement line installs (None for options, comments,
    URLs and paths)."""
    text = line.strip()
    if not text or text.startswith(("#", "-", ".", "/", "~")) or "://" in text.split("@")[0]:
        return None
    match = _NAME.match(text)
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else None


def ray_requirement(lines: list[str]) -> str | None:
    """The first line of `lines` that installs `ray` (any extra, any version), if one does."""
    for line in lines:
        if requirement_name(line) == "ray":
            return line.strip()
    return None
