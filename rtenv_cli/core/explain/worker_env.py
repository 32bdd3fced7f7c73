"""Predict the environment of a Ray 2.60.0 worker for an allocation, with provenance.

The order Ray builds it in (see shared research, re-checked against Ray's source):
1. the worker inherits the raylet's (node's) environment;
2. runtime_env `env_vars` (job and task merged per key, task wins) are applied one key at a
   time in sorted order with `${VAR}` expansion (`expand.py`), after working_dir/py_modules have
   prepended their directories to PYTHONPATH (each plugin also appends the node PYTHONPATH);
3. at task start the worker writes each accelerator family's visible-ids variable (unless the
   family got no ids, or its NOSET switch is on) and OMP_NUM_THREADS if it is still unset.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rtenv_cli.core.explain import accelerators as acc
from rtenv_cli.core.explain.allocation import ResourceRequest
from rtenv_cli.core.explain.expand import explain_expansion
from rtenv_cli.core.explain.interpreter import SESSION
from rtenv_cli.core.explain.limits import SECTION as LIMITS_SECTION
from rtenv_cli.core.explain.limits import limits_notes
from rtenv_cli.core.explain.rtenv_env import STORE, VENV_KEY
from rtenv_cli.core.spec.fields import explain_notes
from rtenv_cli.core.spec.model import RTENV_FIELD

REDACTED = "<redacted>"
SecretTest = Callable[[str, object], bool]  # (name, value) -> is it a secret (lint/secrets.py)

SRC_NODE = "node env"
SRC_JOB = "job runtime_env"
SRC_TASK = "task runtime_env"
SRC_PLUGIN = "working_dir/py_modules (PYTHONPATH)"
SRC_ACCEL = "ray: accelerator visibility"
SRC_OMP = "ray: OMP_NUM_THREADS from num_cpus"
NODE_ONLY = (SESSION, STORE, VENV_KEY)  # parts of a value only the node knows


@dataclass(frozen=True)
class ExplainRequest:
    kind: str = "task"                                  # task | actor
    num_cpus: float | None = None                       # None: Ray's default for the kind
    resources: tuple[ResourceRequest, ...] = ()         # GPU and the other accelerator families
    gpu_vendor: str = "nvidia"
    accelerator_type: str | None = None
    job_runtime_env: Mapping[str, object] | None = None
    task_runtime_env: Mapping[str, object] | None = None
    node_env: Mapping[str, str] = field(default_factory=dict)
    node_env_known: bool = False                        # False: the node env was not given
    node_cwd: str | None = None
    tpu_chips_on_node: int = 0                          # autodetected chips (0 for fake TPUs)


@dataclass(frozen=True)
class EnvPreview:
    env: dict[str, str | None]
    sources: dict[str, str]
    notes: dict[str, list[str]]
    cwd: str
    pythonpath: list[str]
    devices: list[dict[str, object]]
    warnings: list[str]
    errors: list[str]
    runtime_env: dict[str, object]
    kind: str = "task"
    python: str | None = None  # the worker's interpreter when a plugin sets it (pip, uv, rtenv)
    python_source: str | None = None  # which plugin set it (interpreter.py)
    hidden: tuple[str, ...] = ()  # the variables `redacted` hid, sorted

    def redacted(self, is_secret: SecretTest) -> EnvPreview:
        """Every value `is_secret` calls a secret (by what the value is, not its name alone:
        validate's detector) as `<redacted>`; `hidden` names them."""
        hidden = {k for k, v in self.env.items() if v is not None and is_secret(k, v)}
        env = {k: (REDACTED if k in hidden else v) for k, v in self.env.items()}
        rte = dict(self.runtime_env)
        env_vars = rte.get("env_vars")
        if isinstance(env_vars, dict):
            secret = {str(k) for k, v in env_vars.items() if is_secret(str(k), v)}
            hidden |= secret
            rte["env_vars"] = {k: (REDACTED if str(k) in secret else v)
                               for k, v in env_vars.items()}
        return replace(self, env=env, runtime_env=rte, hidden=tuple(sorted(hidden)))

    def node_only(self) -> set[str]:
        """The variables whose predicted value holds a part only the node knows (a placeholder
        such as <session_dir>): a file a shell sources must not set them."""
        return {k for k, v in self.env.items()
                if v is not None and any(part in v for part in NODE_ONLY)}

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "env": dict(sorted(self.env.items())),
                "sources": dict(sorted(self.sources.items())),
                "notes": {k: v for k, v in sorted(self.notes.items()) if v},
                "cwd": self.cwd, "pythonpath": self.pythonpath, "devices": self.devices,
                "warnings": self.warnings, "errors": self.errors,
                "runtime_env": self.runtime_env,
                **({"python": self.python, "python_source": self.python_source}
                   if self.python else {})}


def merge_runtime_envs(job: Mapping[str, object] | None, task: Mapping[str, object] | None
                       ) -> tuple[dict[str, object], dict[str, str]]:
    """Job <- task: env_vars merged per key (task wins), every other field replaced whole.

    Returns the merged runtime_env and, per env_vars key, which level it came from.
    """
    merged: dict[str, object] = dict(job or {})
    origin: dict[str, str] = {str(k): SRC_JOB for k in _env_vars(job)}
    for key, value in (task or {}).items():
        if key == "env_vars":
            merged["env_vars"] = {**_env_vars(job), **_env_vars(task)}
            origin.update({str(k): SRC_TASK for k in _env_vars(task)})
        else:
            merged[key] = value
    return merged, origin


def _env_vars(rte: Mapping[str, object] | None) -> dict[str, str]:
    ev = (rte or {}).get("env_vars") or {}
    return {str(k): str(v) for k, v in ev.items()} if isinstance(ev, Mapping) else {}


def _is_uri(value: object) -> bool:
    return isinstance(value, str) and "://" in value


def _local_package_name(path: str, kind: str, excludes: object) -> str:
    """Ray's package name for a local directory/file (`_ray_pkg_<hash>`), or a placeholder."""
    from pathlib import Path

    source = Path(path)
    try:
        found = source.exists()
    except OSError as exc:  # e.g. a name over the file system's limit
        return f"_ray_pkg_<hash of {source.name[:40]}: {exc.strerror}>"
    if not found:
        return f"_ray_pkg_<hash of {source.name}: not found here>"
    try:
        from rtenv_cli.core.packaging.hashing import package_uri

        uri = package_uri(source, kind="working_dir" if kind == "working_dir" else "py_module",
                          excludes=tuple(excludes) if isinstance(excludes, list) else ())
    except Exception:  # a name we cannot compute is shown as a placeholder, never an error
        return f"_ray_pkg_<hash of {source.name}>"
    return uri.rsplit("/", 1)[-1]


def _pkg_dir(uri: object, kind: str, excludes: object = None) -> str:
    text = str(uri)
    if text.startswith("local://"):
        return text[len("local://"):]
    name = text.rsplit("/", 1)[-1] if "://" in text else _local_package_name(text, kind, excludes)
    for ext in (".zip", ".tar.gz", ".tar.xz", ".whl"):
        name = name.removesuffix(ext)
    return f"{SESSION}/runtime_resources/{kind}_files/{name}"


MAX_DEPTH = 100  # no runtime_env field nests deeper than a few levels
MAX_VALUES = 200_000  # values in one runtime_env, aliases expanded (a YAML alias bomb has millions)


def _check_depth(value: object, what: str) -> None:
    """Refuse absurd nesting and alias bombs up front: encoding them later would overflow
    Python's stack or build millions of values."""
    from rtenv_cli.core.errors import ConfigError

    stack = [(value, 1)]
    seen = 0
    while stack:
        current, depth = stack.pop()
        seen += 1
        if depth > MAX_DEPTH:
            raise ConfigError(f"the {what} nests deeper than {MAX_DEPTH} levels",
                              hint="no runtime_env field nests this deep: flatten it")
        if seen > MAX_VALUES:
            raise ConfigError(f"the {what} holds more than {MAX_VALUES:,} values (YAML aliases "
                              "expanded)", hint="write the values out; `rtenv validate` shows "
                              "the alias that expands too far")
        if isinstance(current, Mapping):
            stack.extend((v, depth + 1) for v in current.values())
        elif isinstance(current, (list, tuple)):
            stack.extend((v, depth + 1) for v in current)


def _validate(req: ExplainRequest, errors: list[str]) -> None:
    for level, rte in (("job", req.job_runtime_env), ("task", req.task_runtime_env)):
        ev = (rte or {}).get("env_vars")
        if isinstance(ev, Mapping):
            bad = [k for k in ev if not isinstance(k, str)]
            if bad:
                errors.append(f"{level} env_vars key {bad[0]!r} is not a string: Ray requires "
                              "Dict[str, str] (quote the key)")
    for fieldname in ("working_dir", "py_modules"):
        value = (req.task_runtime_env or {}).get(fieldname)
        values = value if isinstance(value, list) else [value] if value else []
        for v in values:
            if not _is_uri(v):
                errors.append(f"task-level {fieldname} {v!r} is not a valid URI: Ray only accepts "
                              "local directories at the job level (upload it and use the URI)")
    # Ray's _validate_resource_quantity: a nonzero fraction must be at least one 1/10000 unit
    if req.num_cpus is not None and req.num_cpus and int(req.num_cpus * 10000) == 0:
        errors.append(f"num_cpus={req.num_cpus:g}: the precision of a fractional quantity "
                      "cannot go beyond 0.0001")
    for r in req.resources:
        if r.amount and int(r.amount * 10000) == 0:
            errors.append(f"{r.resource}={r.amount:g}: the precision of a fractional quantity "
                          "cannot go beyond 0.0001")
        fam = acc.family_for(r.resource, req.gpu_vendor)
        if fam is not None:
            msg = acc.validate_quantity(fam, r.amount)
            if msg:
                errors.append(f"{r.resource}={r.amount:g}: {msg}")


def predict(req: ExplainRequest) -> EnvPreview:
    """The environment a worker gets for `req`, as Ray 2.60.0 builds it, stage by stage in
    Ray's order: the raylet's env, env_vars with the working_dir / py_modules PYTHONPATH and
    Ray's `${VAR}` expansion, the accelerator variables, OMP_NUM_THREADS."""
    errors: list[str] = []
    warnings: list[str] = []
    _check_depth(req.job_runtime_env, "job runtime_env")
    _check_depth(req.task_runtime_env, "task runtime_env")
    _validate(req, errors)
    merged, origin = merge_runtime_envs(req.job_runtime_env, req.task_runtime_env)
    node = {str(k): str(v) for k, v in req.node_env.items()}
    env: dict[str, str | None] = dict(node)
    sources = dict.fromkeys(node, SRC_NODE)
    notes: dict[str, list[str]] = {}

    # 2. env_vars (+ the PYTHONPATH the working_dir and py_modules plugins write into them)
    ctx = _env_vars(merged)
    _note_task_overrides(req, ctx, origin, notes)
    user_pp = ctx.get("PYTHONPATH")
    wd = merged.get("working_dir")
    pms = merged.get("py_modules") or []
    pms = pms if isinstance(pms, list) else [pms]
    excl = merged.get("excludes")
    plugin_dirs = _plugin_pythonpath(ctx, node, wd, pms, excl)
    for step in explain_expansion(ctx, node):
        env[step.key] = step.final
        sources[step.key] = SRC_PLUGIN if step.key == "PYTHONPATH" and plugin_dirs \
            else origin.get(step.key, SRC_TASK)
        if step.changed:
            notes.setdefault(step.key, []).append(
                f"expanded from {step.raw!r} (applied #{step.order + 1} in sorted key order)")
        notes.setdefault(step.key, []).extend(step.notes)
    if plugin_dirs and "PYTHONPATH" in node and wd and pms:
        warnings.append("the node PYTHONPATH appears twice in PYTHONPATH: working_dir and "
                        "py_modules each append it (Ray's set_pythonpath_in_context)")
    if user_pp is not None and not plugin_dirs and "PYTHONPATH" in node:
        notes.setdefault("PYTHONPATH", []).append(
            "env_vars PYTHONPATH replaces the node PYTHONPATH (use ${PYTHONPATH} to keep it)")

    python, python_source = _interpreter(merged, env, sources, notes, errors, node)

    # 3. accelerators and OMP_NUM_THREADS, written at task start over what the worker started with
    worker_start = {k: v for k, v in env.items() if v is not None}
    devices = _accelerators(req, worker_start, env, sources, notes, warnings, errors)
    _omp(req, env, sources, notes, warnings)
    for fam in acc.families(req.gpu_vendor):
        if fam.env_var and fam.env_var not in env:
            env[fam.env_var] = None  # JSON `null`: Ray leaves it unset for this allocation
            sources[fam.env_var] = "unset"
    _conflicts(env, ctx, warnings)
    if not req.node_env_known:
        warnings.append("node env not given (--node-env/--node-env-file/--node-env-from-"
                        "current): inherited variables and preset visible lists are unknown")
    _general_notes(req, notes, merged)
    notes[LIMITS_SECTION], limit_errors = limits_notes(merged)
    errors.extend(limit_errors)
    if wd:
        cwd = _pkg_dir(wd, "working_dir", excl)
    else:
        cwd = req.node_cwd or "<raylet cwd: the directory `ray start` ran in>"
    pp = env.get("PYTHONPATH")
    return EnvPreview(env=env, sources=sources, notes=notes, cwd=cwd,
                      pythonpath=pp.split(":") if pp else [], devices=devices,
                      warnings=warnings, errors=errors, runtime_env=merged, kind=req.kind,
                      python=python, python_source=python_source)


def _interpreter(  # noqa: PLR0917 - the preview's parts, filled in place
        merged: Mapping[str, object], env: dict[str, str | None], sources: dict[str, str],
        notes: dict[str, list[str]], errors: list[str], node: Mapping[str, str],
) -> tuple[str | None, str | None]:
    """Ray's pip/uv plugins, and rtenv's (the `rtenv` field), activate a venv in the worker's
    command prefix and make its python the worker's: (that python, its source), or Nones."""
    from rtenv_cli.core.explain import interpreter, rtenv_env

    if RTENV_FIELD not in merged:  # else rtenv's plugin decides (and refuses pip beside it)
        return interpreter.ray_venv(merged, env, sources=sources, notes=notes) or (None, None)
    python = rtenv_env.apply(merged, env, sources=sources, notes=notes, errors=errors,
                             node_env=node)
    return python, rtenv_env.SRC_RTENV if python else None


def _note_task_overrides(req: ExplainRequest, ctx: Mapping[str, str], origin: Mapping[str, str],
                         notes: dict[str, list[str]]) -> None:
    job_vars = _env_vars(req.job_runtime_env)
    for key in ctx:
        if key in origin and key in job_vars and origin[key] == SRC_TASK \
                and job_vars[key] != ctx[key]:
            notes.setdefault(key, []).append("task value overrides the job value")


def _plugin_pythonpath(ctx: dict[str, str], node: Mapping[str, str], wd: Any,
                       pms: list[Any], excl: Any) -> list[str]:
    """What the working_dir then py_modules plugins do to `ctx`'s PYTHONPATH (each prepends
    its directories, then appends the node's PYTHONPATH: Ray's set_pythonpath_in_context);
    returns every directory they added, in PYTHONPATH order."""
    plugin_dirs: list[str] = []
    for dirs in ([_pkg_dir(wd, "working_dir", excl)] if wd else [],
                 [_pkg_dir(m, "py_modules") for m in pms]):
        if not dirs:
            continue
        plugin_dirs = dirs + plugin_dirs
        path = ":".join(dirs)
        if "PYTHONPATH" in ctx:
            path += ":" + ctx["PYTHONPATH"]
        if "PYTHONPATH" in node:
            path += ":" + node["PYTHONPATH"]
        ctx["PYTHONPATH"] = path
    return plugin_dirs


def _general_notes(req: ExplainRequest, notes: dict[str, list[str]],
                   merged: Mapping[str, Any]) -> None:
    general = notes.setdefault("(general)", [])
    general.extend(explain_notes(merged))  # the fields this preview does not model
    general.append("the driver's own environment never reaches workers; only the raylet's does")
    general.append("code that runs before the first task (worker_process_setup_hook, imports at "
                   "worker start) sees the raylet env, not Ray's accelerator/OMP writes")
    for r in req.resources:
        if acc.family_for(r.resource, req.gpu_vendor) is None:
            general.append(f"{r.resource} is a custom resource: scheduling only, no variable")
    if req.accelerator_type:
        notes.setdefault("(scheduling)", []).append(
            f"accelerator_type {req.accelerator_type} only adds the resource "
            f"accelerator_type:{req.accelerator_type}=0.001; it sets no variable")


def _accelerators(  # noqa: PLR0917 - the preview's parts, filled in place
        req: ExplainRequest, start: dict[str, str], env: dict[str, str | None],
        sources: dict[str, str], notes: dict[str, list[str]], warnings: list[str],
        errors: list[str]) -> list[dict[str, object]]:
    """Ray's per-family loop at task start: each accelerator family's visible-devices variable
    set to the ids assigned (or left alone), in Ray's order of checks."""
    by_res = {r.resource: r for r in req.resources}
    override_zero = acc.env_bool(start, acc.OVERRIDE_ON_ZERO)
    devices: list[dict[str, object]] = []
    for fam in acc.families(req.gpu_vendor):
        r = by_res.get(fam.resource)
        slots = r.slots if r else ()
        info: dict[str, object] = {"resource": fam.resource, "family": fam.label,
                                   "env_var": fam.env_var, "slots": list(slots),
                                   "assumed": bool(r and r.assumed)}
        if fam.key == "amd" and "ROCR_VISIBLE_DEVICES" in start \
                and "HIP_VISIBLE_DEVICES" not in start:
            errors.append("ROCR_VISIBLE_DEVICES is set without HIP_VISIBLE_DEVICES: Ray 2.60 "
                          "raises 'Please use HIP_VISIBLE_DEVICES instead of "
                          "ROCR_VISIBLE_DEVICES' in the worker")
        if fam.env_var is None:
            if slots:
                info["action"] = "none: this family has no visible-devices variable"
                devices.append(info)
            continue
        var = fam.env_var
        ids = _assigned_ids(fam, var, slots, start, info, warnings)
        if r is not None and 0 < r.amount < 1:
            info["shared"] = ("a fractional request holds one whole id; other fractional "
                              "tasks may get the same id")
        if not ids and not override_zero:
            _left_alone(req, fam, var, slots, start, info, notes, warnings)
            if slots or var in start:
                devices.append(info)
            continue
        if acc.noset_active(fam, start):
            info["action"] = f"untouched: {fam.noset} is set"
            notes.setdefault(var, []).append(f"not written by Ray: {fam.noset} is on")
            devices.append(info)
            continue
        if fam.key == "tpu":
            _write_tpu(req, ids, start, env, sources, notes, info)
        else:
            value = ",".join(fam.prefix + i for i in ids)
            env[var] = value
            sources[var] = f"{SRC_ACCEL} ({fam.resource})"
            info["action"] = f"{var}={value}"
            if var in _user_keys(req) and ids:
                warnings.append(f"env_vars sets {var}: with {fam.resource} assigned, Ray treats "
                                f"it as the device list and writes {var}={value!r} at task start")
        _note_written(req, var, ids, override_zero, info, notes)
        devices.append(info)
    return devices


def _assigned_ids(fam: acc.Family, var: str, slots: Sequence[int],  # noqa: PLR0917 - one step of _accelerators
                  start: Mapping[str, str], info: dict[str, object],
                  warnings: list[str]) -> list[str]:
    """The device ids of `slots`: indexes into a preset visible list (the whole list when
    they do not all fit it, as Ray does), else the slots themselves."""
    original = acc.parse_visible(fam, start.get(var))
    if original is not None and slots and not all(i < len(original) for i in slots):
        ids = list(dict.fromkeys(original))
        warnings.append(f"{fam.resource}: slots {','.join(map(str, slots))} do not all fit "
                        f"the preset {var}={start.get(var)}: Ray gives the WHOLE list "
                        f"({len(ids)} device(s)) instead")
        info["collapsed"] = True
    elif original is not None:
        ids = [original[i] for i in slots]
    else:
        ids = [str(i) for i in slots]
    info["ids"] = ids
    info["order_guaranteed"] = original is None or len(ids) <= 1
    if original is not None:
        info["preset"] = start.get(var)
    return ids


def _left_alone(  # noqa: PLR0917 - one step of _accelerators
        req: ExplainRequest, fam: acc.Family, var: str, slots: Sequence[int],
        start: Mapping[str, str], info: dict[str, object], notes: dict[str, list[str]],
        warnings: list[str]) -> None:
    """No ids assigned and no override: Ray does not touch the variable."""
    info["action"] = "untouched: no ids assigned" + (
        f", inherits {var}={start[var]!r}" if var in start else "")
    if var in start and start[var] and fam.resource == "GPU" and not slots:
        warnings.append(f"this {req.kind} requested no GPU but inherits {var}="
                        f"{start[var]!r}: it sees ALL of those GPUs "
                        f"(set {acc.OVERRIDE_ON_ZERO}=1 in env_vars to blank it)")
    if var in start and slots:
        notes.setdefault(var, []).append("preset list is empty: no ids to assign")


def _note_written(req: ExplainRequest, var: str, ids: list[str],  # noqa: PLR0917 - one step of _accelerators
                  override_zero: bool, info: dict[str, object],
                  notes: dict[str, list[str]]) -> None:
    if not info["order_guaranteed"]:
        notes.setdefault(var, []).append(
            "order not guaranteed: Ray builds the list from a set (compare as a set)")
    if override_zero and not ids:
        notes.setdefault(var, []).append(f"blanked: {acc.OVERRIDE_ON_ZERO} is on")
    notes.setdefault(var, []).append(
        "written at task start, restored after the task (reused worker)" if req.kind == "task"
        else "written once at actor creation; persists for the actor's life")


def _user_keys(req: ExplainRequest) -> set[str]:
    return set(_env_vars(req.job_runtime_env)) | set(_env_vars(req.task_runtime_env))


def _write_tpu(  # noqa: PLR0917 - same state as _accelerators
        req: ExplainRequest, ids: list[str], start: dict[str, str],
               env: dict[str, str | None], sources: dict[str, str],
               notes: dict[str, list[str]], info: dict[str, object]) -> None:
    src = f"{SRC_ACCEL} (TPU)"
    try:
        per_chip = int(start.get(acc.TPU_RESOURCE_PER_CHIP, "1") or 1)
        chips = sorted({int(i) // per_chip for i in ids})
    except ValueError:
        info["action"] = "error: non-integer TPU ids"
        return
    cur = dict(start)
    bounds = acc.TPU_CHIPS_PER_HOST_BOUNDS
    host = acc.TPU_HOST_BOUNDS
    stale = len(chips) not in (1, 2) and cur.get(bounds) in (acc.TPU_BOUNDS_1_CHIP,
                                                              acc.TPU_BOUNDS_2_CHIP)

    def put(k: str, v: str | None) -> None:
        env[k] = v
        sources[k] = src

    if len(ids) == req.tpu_chips_on_node:
        put("TPU_VISIBLE_CHIPS", None)
        notes.setdefault("TPU_VISIBLE_CHIPS", []).append(
            "unset: the allocation is every chip the node autodetected (whole host)")
        if stale:
            put(bounds, None)
            put(host, None)
        info["action"] = "TPU_VISIBLE_CHIPS unset (whole host)"
        return
    value = ",".join(str(c) for c in chips)
    put("TPU_VISIBLE_CHIPS", value)
    if len(chips) in (1, 2):
        expected = acc.TPU_BOUNDS_1_CHIP if len(chips) == 1 else acc.TPU_BOUNDS_2_CHIP
        if cur.get(bounds) != expected:
            put(bounds, expected)
            if cur.get(host) != acc.TPU_SINGLE_HOST_BOUNDS:
                put(host, acc.TPU_SINGLE_HOST_BOUNDS)
        elif host not in cur:
            put(host, acc.TPU_SINGLE_HOST_BOUNDS)
    elif stale:
        put(bounds, None)
        put(host, None)
    info["action"] = f"TPU_VISIBLE_CHIPS={value}"


def _omp(req: ExplainRequest, env: dict[str, str | None], sources: dict[str, str],
         notes: dict[str, list[str]], warnings: list[str]) -> None:
    key = "OMP_NUM_THREADS"
    if env.get(key) is not None:
        notes.setdefault(key, []).append("already set before the task starts: Ray leaves it")
        return
    default = 1.0 if req.kind == "task" else 0.0  # an actor holds 0 CPU unless num_cpus is set
    cpus = default if req.num_cpus is None else req.num_cpus
    value = max(math.floor(cpus), 1) if cpus > 0 else 1
    env[key] = str(value)
    sources[key] = SRC_OMP
    why = f"max(floor({cpus:g}), 1)" if cpus > 0 else "no CPU held -> 1"
    notes.setdefault(key, []).append(
        why + ("; set once at actor creation" if req.kind == "actor"
               else "; recomputed per task, removed after it"))
    if 0 < cpus < 1 or (cpus > 1 and not float(cpus).is_integer()):
        warnings.append(f"num_cpus={cpus:g} gives OMP_NUM_THREADS={value} (Ray floors the CPU "
                        "share, minimum 1)")


def _conflicts(env: dict[str, str | None], ctx: dict[str, str], warnings: list[str]) -> None:
    cvd, hip = env.get("CUDA_VISIBLE_DEVICES"), env.get("HIP_VISIBLE_DEVICES")
    if cvd is not None and hip is not None and cvd != hip:
        warnings.append(f"CUDA_VISIBLE_DEVICES={cvd!r} and HIP_VISIBLE_DEVICES={hip!r} disagree: "
                        "ROCm honours both, so the device set is their intersection")
    if env.get("ROCR_VISIBLE_DEVICES") is not None and hip is None:
        warnings.append("ROCR_VISIBLE_DEVICES without HIP_VISIBLE_DEVICES: Ray 2.60 manages only "
                        "HIP_VISIBLE_DEVICES and refuses ROCR alone on AMD nodes")
    if "OMP_NUM_THREADS" in ctx:
        warnings.append(f"env_vars OMP_NUM_THREADS={env.get('OMP_NUM_THREADS')} wins over "
                        "Ray's num_cpus rule")
