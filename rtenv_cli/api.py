"""rtenv from Python: validate, push and explain runtime_envs, check a machine. The same code
the `rtenv` commands run (they call these functions), without the terminal: importing this module
imports neither typer nor rich, and every result is a typed, frozen object with `to_dict()`.

    from rtenv_cli import api

    report = api.validate({"pip": ["requests"], "env_var": {"A": "1"}})
    report.valid                          # True: Ray accepts it
    report.files[0].diagnostics[0].code   # "RTE101": `env_var` is no field (env_vars?)

    pushed = api.push("runtime_env.yaml", to="file:///shared/rtenv")
    pushed.runtime_env["working_dir"]    # "file:///shared/rtenv/_ray_pkg_<hash>.zip"

    worker = api.explain({"env_vars": {"A": "1"}}, num_gpus=2)
    worker.env["CUDA_VISIBLE_DEVICES"], worker.sources["CUDA_VISIBLE_DEVICES"]

Errors are `rtenv_cli.core.errors.RtenvError` subclasses (`UsageError`, `TransportError`, ...),
each with a message and a `hint`. docs/api.md has runnable examples.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # the types; imported lazily at run time (see __getattr__)
    from rtenv_cli.core.doctor.model import Check, DoctorReport, Status
    from rtenv_cli.core.errors import RtenvError
    from rtenv_cli.core.explain.service import ExplainResult
    from rtenv_cli.core.lint.diagnostic import Diagnostic, Severity
    from rtenv_cli.core.lint.engine import FileReport, ValidateReport
    from rtenv_cli.core.push import PackageOutcome, PushResult

__all__ = ["Check", "Diagnostic", "DoctorReport", "ExplainResult", "FileReport",
           "PackageOutcome", "PushResult", "RtenvError", "Severity", "Status", "ValidateReport",
           "doctor", "explain", "push", "validate"]

_TYPES = {
    "Check": "rtenv_cli.core.doctor.model", "DoctorReport": "rtenv_cli.core.doctor.model",
    "Status": "rtenv_cli.core.doctor.model", "RtenvError": "rtenv_cli.core.errors",
    "ExplainResult": "rtenv_cli.core.explain.service",
    "Diagnostic": "rtenv_cli.core.lint.diagnostic", "Severity": "rtenv_cli.core.lint.diagnostic",
    "FileReport": "rtenv_cli.core.lint.engine", "ValidateReport": "rtenv_cli.core.lint.engine",
    "PackageOutcome": "rtenv_cli.core.push", "PushResult": "rtenv_cli.core.push",
}

RuntimeEnvSource = str | os.PathLike[str] | Mapping[str, Any]
Progress = Callable[[str, int], Any]  # (label, total bytes) -> a context giving advance(n)


def __getattr__(name: str) -> Any:
    """The result types, imported when first named (`api.Diagnostic`)."""
    module = _TYPES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def validate(source: RuntimeEnvSource | Sequence[str | os.PathLike[str]], *,
             api: Literal["job-submit", "ray-init"] = "job-submit",
             base_dir: str | os.PathLike[str] | None = None, strict: bool = False,
             fail_on: Literal["error", "warning"] = "error", resolve: bool = False,
             globs: Sequence[str] | None = None, ray_version: str | None = None,
             stdin: bytes | None = None) -> ValidateReport:
    """Ray's verdict on runtime_envs plus rtenv's rules, as `rtenv validate` gives it.

    SOURCE is a runtime_env dict, a file (YAML/JSON runtime_env, Serve config or job spec), a
    directory (searched for *runtime_env*.{yaml,yml,json}, or GLOBS), or a list of those; `-`
    reads STDIN. Relative paths in a runtime_env resolve against BASE_DIR (default: the current
    directory, as in Ray). The report's `valid` is Ray's verdict, `exit_code` the command's;
    each `Diagnostic` has a rule code, a `Severity`, the message, the line and column in the file
    (None for a dict) and a hint.
    """
    from rtenv_cli.core.lint.engine import (
        DEFAULT_GLOBS,
        ValidateOptions,
        ValidateReport,
        validate_paths,
        validate_runtime_env,
    )

    base = Path(base_dir).resolve() if base_dir is not None else None
    options = ValidateOptions(api=api, base_dir=base, strict=strict, fail_on=fail_on,
                              resolve=resolve, globs=tuple(globs) if globs else DEFAULT_GLOBS,
                              ray_version=ray_version)
    if isinstance(source, Mapping):
        report = validate_runtime_env(dict(source), base_dir=base or Path.cwd(),
                                      options=options)
        return ValidateReport((report,), api, fail_on)
    paths = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    return validate_paths([os.fspath(p) for p in paths], options, stdin=stdin)


def push(source: str | os.PathLike[str] | None = None, *, to: str | None = None,
         address: str | None = None, token: str | None = None, stage_to: str | None = None,
         dry_run: bool = False, base_dir: str | os.PathLike[str] | None = None,
         outputs: Sequence[str | os.PathLike[str]] = (), progress: Progress | None = None,
         env: Mapping[str, str] | None = None, sizes: bool | None = None,
         rtenv_envs: bool = False, via: str = "auto") -> PushResult:
    """Package a runtime_env's local working_dir/py_modules exactly like Ray and upload what
    the target lacks, as `rtenv push` does.

    SOURCE is a runtime_env file or a directory (the working_dir); default ./runtime_env.yaml.
    A Serve config or KubeRay manifest is pushed whole: the result's `document` is that file
    with every local path replaced by its URI (comments kept); local requirements files are
    inlined.
    The target is TO (`http(s)://` dashboard or agent, `file:///dir`, `local`), else ADDRESS
    (a Ray GCS `host:6379`, a dashboard URL, `auto`, an rtenv agent), else RAY_ADDRESS, else the
    embedded local store; TOKEN overrides the target's own token variable. STAGE_TO takes what
    is over the target's upload limit. OUTPUTS are files the caller writes (never packaged).
    RTENV_ENVS moves `pip`/`uv` into the `rtenv` field (built by rtenv's Ray plugin). VIA: `auto`
    publishes content-addressed trees (the `rtenv` field) to a Ray cluster (its GCS, or the GCS
    its dashboard names) whose every node loads rtenv's plugin, else Ray's zips; `tree` insists
    on trees, `zip` on zips.
    The result's `runtime_env` has the URIs in place of local paths; each `PackageOutcome` says
    its URI, file count, bytes and whether it was `uploaded`.
    """
    from rtenv_cli.core.push_carrier import push_file as core_push
    from rtenv_cli.core.transport.resolve import resolve_target, target_for

    env = os.environ if env is None else env
    target = None if dry_run else resolve_target(to, address, env, token=token)
    stage = target_for(stage_to, env) if stage_to and not dry_run else None
    result = core_push(Path(source) if source is not None else None, target=target,
                       dry_run=dry_run, stage_to=stage, env=env, progress=progress,
                       base_dir=Path(base_dir) if base_dir is not None else None,
                       outputs=tuple(Path(o) for o in outputs), sizes=sizes,
                       rtenv_envs=rtenv_envs, trees=via)
    if any(p.uploaded and p.tree is None for p in result.packages):  # a zip was built: the
        from rtenv_cli.core.run import enforce_embedded_budget  # build cache grew

        enforce_embedded_budget()
    return result


def explain(runtime_env: RuntimeEnvSource | None = None, *,
            job_runtime_env: RuntimeEnvSource | None = None,
            kind: Literal["task", "actor"] = "task", num_cpus: float | None = None,
            gpus: str | None = None, num_gpus: float | None = None,
            resources: Sequence[str] = (), gpu_vendor: str = "nvidia",
            accelerator_type: str | None = None, node_env: Mapping[str, str] | None = None,
            app: str | None = None, compare: str | None = None, gpu_map: bool = True,
            show_secrets: bool = False) -> ExplainResult:
    """The environment a Ray 2.60 worker gets for an allocation, and where each variable comes
    from, as `rtenv explain` shows it.

    RUNTIME_ENV (a dict or a file) is the job's, or the task's when JOB_RUNTIME_ENV is given.
    GPUS are the ids Ray allocated (`"0,1"`), NUM_GPUS an amount (first-fit ids assumed),
    RESOURCES `NAME=AMOUNT` or `NAME=IDS` for the other accelerators; NODE_ENV the raylet's
    environment (e.g. a preset CUDA_VISIBLE_DEVICES). COMPARE (`"num_cpus=1 gpus=1"`) asks
    whether one worker could serve both allocations. The result's `env` and `sources` map each
    variable to its value and its origin; `errors` of its `preview` say what Ray would reject.
    """
    from rtenv_cli.core.explain import service
    from rtenv_cli.core.lint.secrets import is_secret

    def source(value: RuntimeEnvSource | None) -> Any:
        if value is None or isinstance(value, Mapping):
            return value
        return Path(value)

    req = service.build_request(
        runtime_env=source(runtime_env), job_runtime_env=source(job_runtime_env), kind=kind,
        num_cpus=num_cpus, gpus=gpus, num_gpus=num_gpus, resources=list(resources),
        gpu_vendor=gpu_vendor, accelerator_type=accelerator_type, node_env=node_env, app=app)
    return service.explain(req, compare=compare, gpu_map=gpu_map,
                           is_secret=None if show_secrets else is_secret)


def doctor(*, address: str | None = None, path: str | os.PathLike[str] | None = None
           ) -> DoctorReport:
    """What `rtenv doctor` checks: this machine (versions, uv, NVML, cgroups, inotify, the
    store) and, with ADDRESS, a cluster, an agent or a shared directory. Each `Check` has a
    `Status` (ok, warn, fail), a detail and a fix; `exit_code` is 1 when a check failed."""
    from rtenv_cli.core.doctor.service import run_doctor

    return run_doctor(address=address, path=Path(path) if path is not None else None)
