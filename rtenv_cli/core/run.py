"""`rtenv run`: validate a runtime_env, push what is local, get or create the environment (on an
rtenv agent or the embedded store) and run a command inside it, as a Ray worker would be.

The child gets: cwd = the unpacked working_dir, PYTHONPATH = py_modules then working_dir (Ray's
order), the venv first on PATH, env_vars with Ray's `${VAR}` expansion, and the accelerator
variables of the allocation. Its exit code passes through (128+N after a signal, like a shell);
SIGTERM, SIGHUP, SIGQUIT and SIGUSR1/2 are forwarded. The reference is released when it ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import ConfigError, UsageError

FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


@dataclass(frozen=True)
class RunRequest:
    command: list[str]
    runtime_env: Path | None = None
    address: str | None = None
    token: str | None = None
    gpus: str | None = None
    num_cpus: float | None = None
    memory_bytes: int | None = None
    cgroup_root: Path = Path("/sys/fs/cgroup")
    extra_env: Mapping[str, str] = field(default_factory=dict)
    base_dir: Path | None = None  # relative paths in the runtime_env; default: the CWD, like Ray


def load_runtime_env(path: Path, warnings: list[tuple[str, str | None]] | None = None,
                     base_dir: Path | None = None) -> tuple[dict[str, Any], Path]:
    """The runtime_env in `path` (bare, or under a job spec's `runtime_env:`), validated;
    validation warnings are appended to `warnings` as (message, hint).

    Relative paths resolve against `base_dir`, by default the current directory: that is what
    `ray job submit --runtime-env FILE` does, so a file means the same to rtenv and to Ray.
    """
    from rtenv_cli.core.lint.engine import validate_runtime_env
    from rtenv_cli.core.spec.runtime_env_file import load_runtime_env_file

    data = load_runtime_env_file(path).runtime_env
    base_dir = (base_dir or Path.cwd()).resolve()
    report = validate_runtime_env(data, base_dir=base_dir, source=str(path))
    # Ray's upload limits (RTE150) are its transports': rtenv run packages into its own store
    refused = [d for d in report.diagnostics if d.ray_error and d.code != "RTE150"]
    if refused:
        first = "; ".join(d.message for d in refused[:3])
        raise ConfigError(f"{path}: invalid runtime_env: {first}", path=str(path),
                          hint=f"rtenv validate {path}")
    if warnings is not None:
        for diag in report.diagnostics:
            if getattr(diag, "severity", None) == "info":  # infos are `rtenv validate -v`'s
                continue
            warnings.append((f"{path}: {getattr(diag, 'code', '')} {diag.message}".strip(),
                             getattr(diag, "hint", None)))
    return data, base_dir


def publish_local(runtime_env: dict[str, Any], base_dir: Path, target: Any) -> dict[str, Any]:
    """`runtime_env` with local working_dir/py_modules replaced by package URIs uploaded to
    `target` (push's discovery and packaging), and pip/uv requirements files read here."""
    from rtenv_cli.core.push import publish

    out = dict(runtime_env)
    for field_name in ("pip", "uv"):
        if isinstance(out.get(field_name), str):  # a requirements file: read it here, not remotely
            from rtenv_cli.core.spec.normalize import requirement_lines

            lines = requirement_lines(base_dir / out[field_name], (field_name,))
            out[field_name] = [ln.strip() for ln in lines
                               if ln.strip() and not ln.strip().startswith("#")]
    return publish(out, base_dir, target=target).runtime_env


def expand(env_vars: Mapping[str, str], base: Mapping[str, str]) -> dict[str, str]:
    """Ray's `${VAR}` expansion of env_vars against the environment `base`."""
    from rtenv_cli.core.explain.expand import expand_env_vars

    return dict(expand_env_vars(env_vars, base))


def accelerator_env(req: RunRequest, base: Mapping[str, str],
                    env_vars: Mapping[str, str]) -> dict[str, str | None]:
    """The variables Ray sets for this allocation (None: Ray removes the variable), as explain
    predicts them (every accelerator family, a node's preset visible list, OMP_NUM_THREADS)."""
    from rtenv_cli.core.explain.allocation import ResourceRequest
    from rtenv_cli.core.explain.worker_env import SRC_ACCEL, SRC_OMP, ExplainRequest, predict

    if req.gpus is None and req.num_cpus is None:
        return {}
    ids = tuple(int(x) for x in (req.gpus or "").split(",") if x.strip())
    resources = (ResourceRequest("GPU", float(len(ids)), ids, False),) if req.gpus is not None \
        else ()
    preview = predict(ExplainRequest(kind="task", num_cpus=req.num_cpus, resources=resources,
                                     task_runtime_env={"env_vars": dict(env_vars)},
                                     node_env=dict(base), node_env_known=True))
    return {k: v for k, v in preview.env.items()
            if (preview.sources.get(k) or "").startswith(SRC_ACCEL)
            or preview.sources.get(k) == SRC_OMP}


def child_environment(handle: Any, req: RunRequest,
                      base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update(req.extra_env)
    for key, value in accelerator_env(req, env, handle.env_vars).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    env.update(expand(handle.env_vars, env))
    paths = [*handle.py_modules, *([handle.working_dir] if handle.working_dir else [])]
    if paths:
        env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [env.get("PYTHONPATH")])])
    if handle.venv:
        env["VIRTUAL_ENV"] = handle.venv
        env["PATH"] = os.pathsep.join([f"{handle.venv}/bin", env.get("PATH", "")])
        env.pop("PYTHONHOME", None)
    return env


class _Session:
    """Get-or-create and release, against the embedded store or an agent URL."""

    def __init__(self, req: RunRequest) -> None:
        self.req = req
        self.holder = f"run:{os.getpid()}"
        if req.address:
            from rtenv_cli.core.transport.agent_http import AgentClient, AgentTarget

            self.client: Any = AgentClient(req.address, token=req.token)
            self.target: Any = AgentTarget(req.address, token=req.token)
        else:
            from rtenv_cli.core.store.envs import Environments
            from rtenv_cli.core.transport.http import fetch_archive
            from rtenv_cli.core.transport.local_store import LocalStoreTarget

            self.target = LocalStoreTarget()
            self.client = Environments(self.target.store, fetch=fetch_archive)

    def create(self, runtime_env: dict[str, Any], base_dir: Path) -> Any:
        handle = self.client.get_or_create(runtime_env, holder=self.holder, pid=os.getpid(),
                                           base_dir=base_dir)
        if handle.built and not self.req.address:
            # what `rtenv agent` does after each create, in-process
            enforce_embedded_budget(self.target.store)
        return handle

    def release(self, handle: Any) -> None:
        self.client.release(handle.key, self.holder)


BUDGET_ENV = ("RTENV_MAX_SIZE", "RTENV_MAX_AGE")  # as on a node with rtenv's Ray plugin


def embedded_budget() -> Any:
    """The embedded store's size/age budget: RTENV_MAX_SIZE / RTENV_MAX_AGE (the variables of
    rtenv's Ray plugin's store), else the `[agent]` table of the config files (`max-size =
    "20GB"`, `max-age = "7d"`), the same limits `rtenv agent` takes as flags."""
    from rtenv_cli.core.cache.gc import Budget
    from rtenv_cli.core.config import load_default_map
    from rtenv_cli.core.units import parse_duration, parse_size

    table = load_default_map().get("agent") or {}
    size = os.environ.get(BUDGET_ENV[0]) or table.get("max_size")
    age = os.environ.get(BUDGET_ENV[1]) or table.get("max_age")
    if size is None and age is None:
        return None
    try:
        return Budget(max_bytes=parse_size(str(size)) if size is not None else None,
                      max_age_s=parse_duration(str(age)) if age is not None else None)
    except (UsageError, ValueError) as exc:
        raise ConfigError(f"{' / '.join(BUDGET_ENV)} or [agent] max-size / max-age in the "
                          f"config: {exc}", hint="write sizes like 20GB and ages like 7d"
                          ) from None


def enforce_embedded_budget(store: Any = None) -> None:
    """The embedded budget over this machine's store (`store`, default the local one) and its
    build cache (the last zip of each pushed source): after each create (`run`) and each push
    (api.push), so neither grows past what the user allowed."""
    budget = embedded_budget()
    if budget is None:
        return
    from rtenv_cli.core.packaging.zipreuse import wait_remembered

    wait_remembered()  # a zip being filed gets its sidecar before it may go
    if store is None:
        from rtenv_cli.core.transport.local_store import LocalStoreTarget

        store = LocalStoreTarget().store
    budget.enforce(store, with_build_cache=True)


def _empty_handle() -> Any:
    from rtenv_cli.core.store.handle import EnvHandle

    return EnvHandle(key="", holder="", working_dir=None, py_modules=(), venv=None)


def _no_status(_label: str) -> AbstractContextManager[None]:
    return contextlib.nullcontext()


def run_command(req: RunRequest, *, notify: Callable[[str, str | None], None],
                on_ready: Callable[[Any, float], None] | None = None,
                status: Callable[[str], AbstractContextManager[None]] | None = None) -> int:
    """Run the command; return its exit status. `notify(message, hint)` reports warnings;
    `on_ready(handle, seconds)` is told when the environment is ready; `status(label)` is a
    context the environment is prepared in (the CLI's spinner; the command runs after it)."""
    if not req.command:
        raise UsageError("no command given", hint="rtenv run -r runtime_env.yaml -- python x.py")
    session: _Session | None = None
    handle = _empty_handle()
    if req.runtime_env is not None:
        session = _Session(req)  # opens the store or the agent only when there is an env
        found: list[tuple[str, str | None]] = []
        runtime_env, base_dir = load_runtime_env(req.runtime_env, found, req.base_dir)
        for message, hint in found:
            notify(message, hint)
        import time

        start = time.perf_counter()
        with (status or _no_status)("preparing the environment (packages, venv)"):
            runtime_env = publish_local(runtime_env, base_dir, session.target)
            handle = session.create(runtime_env, base_dir)
        if on_ready is not None:
            on_ready(handle, time.perf_counter() - start)
    try:
        env = child_environment(handle, req)
        group = _cgroup(req, notify)
        try:
            return _spawn(req.command, env, handle.working_dir, group, notify)
        finally:
            if group is not None:
                group.remove()
    finally:
        if handle.key and session is not None:
            session.release(handle)


def _cgroup(req: RunRequest, notify: Callable[[str, str | None], None]) -> Any:
    from rtenv_cli.core.store.cgroups import Cgroups, CgroupUnavailable, Limits

    limits = Limits(cpus=req.num_cpus, memory_bytes=req.memory_bytes)
    if not limits:
        return None
    try:
        return Cgroups(req.cgroup_root).create(limits)
    except CgroupUnavailable as exc:
        notify(f"{exc.message}; running without resource limits", exc.hint)
        return None


def _spawn(command: list[str], env: dict[str, str], cwd: str | None, group: Any,
           notify: Callable[[str, str | None], None]) -> int:
    # The handlers go in BEFORE the child exists, so a signal sent between Popen returning and
    # the handlers being installed cannot kill us while the child runs on; until the child
    # exists a signal waits in `early`. exec() resets caught signals to the default, so the
    # child starts with default dispositions, except those ignored when we were started
    # (`nohup`, `cmd &`): we leave those ignored, for us and for the child, as a shell does.
    child: list[subprocess.Popen[bytes]] = []
    early: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if not child:
            early.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            child[0].send_signal(signum)

    def swallow(_signum: int, _frame: object) -> None:
        """Ctrl-C and Ctrl-\\ at a terminal reach the child directly (same foreground process
        group): we wait for it to exit instead of dying first, and do not send a second one.
        A handler, not SIG_IGN, which the child would inherit."""

    # forward the keyboard's signals only when there is no terminal (someone `kill -INT`s us)
    tty = sys.stdin is not None and sys.stdin.isatty()
    keyboard = (signal.SIGINT, signal.SIGQUIT)
    previous = {}
    for sig in (*FORWARDED, signal.SIGINT):
        if signal.getsignal(sig) != signal.SIG_IGN:
            previous[sig] = signal.signal(sig, swallow if sig in keyboard and tty else forward)
    try:
        started = _popen(command, env, cwd, group, notify)
        if isinstance(started, int):  # nothing started; a signal meanwhile still ends us
            return 128 + early[0] if early else started
        proc, group = started
        child.append(proc)
        for signum in early:
            forward(signum, None)
        code = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if group is not None and group.oom_killed():
        notify("the command was killed by its memory limit (--memory)", None)
    return 128 - code if code < 0 else code


def _popen(command: list[str], env: dict[str, str], cwd: str | None, group: Any,
           notify: Callable[[str, str | None], None]
           ) -> tuple[subprocess.Popen[bytes], Any] | int:
    """The started child and the cgroup it is in (None when it could not join one), or the
    exit status a shell gives when a command cannot start (127/126)."""
    try:
        return subprocess.Popen(command, env=env, cwd=cwd,
                                preexec_fn=group.join if group is not None else None), group  # noqa: PLW1509 - only writes our pid to cgroup.procs
    except FileNotFoundError:
        notify(f"command not found: {command[0]}", None)
        return 127
    except PermissionError:
        notify(f"permission denied: {command[0]}", None)
        return 126
    except OSError as exc:  # not an executable format, a path through a file, ...: as a shell
        notify(f"cannot execute {command[0]}: {exc.strerror}", None)
        return 126
    except subprocess.SubprocessError as exc:  # joining the cgroup failed in the child
        if group is None:
            raise
        notify(f"cannot put the command in its cgroup ({exc}); running without resource "
               "limits", None)
        group.remove()
        return _popen(command, env, cwd, None, notify)
