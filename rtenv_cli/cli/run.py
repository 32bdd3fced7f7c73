"""`rtenv run`: run a command inside a runtime_env's environment."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from rtenv_cli.cli.options import VerboseOpt
from rtenv_cli.render.output import Output

AGENT_ENV = "RTENV_AGENT_URL"


def run(
    *,
    command: Annotated[list[str], typer.Argument(help="The command and its arguments (after --).",
                                                  metavar="CMD...", show_default=False)],
    runtime_env: Annotated[Path | None, typer.Option(
        "--runtime-env", "-r", help="runtime_env YAML/JSON (a bare runtime_env or a job spec). "
        "Default: runtime_env.yaml in the current directory, if there is one.",
        show_default=False)] = None,
    base_dir: Annotated[Path | None, typer.Option(
        "--base-dir", help="Resolve relative paths in the runtime_env against this directory. "
        "Default: the current directory, as `ray job submit` does.", show_default=False)] = None,
    address: Annotated[str | None, typer.Option(
        "--address", envvar=AGENT_ENV, show_envvar=True,
        help="URL of this node's rtenv agent. Default: the embedded store (no server).")] = None,
    token: Annotated[str | None, typer.Option(
        "--token", envvar="RTENV_AGENT_TOKEN", show_envvar=True,
        help="Bearer token for the agent.")] = None,
    gpus: Annotated[str | None, typer.Option(
        "--gpus", help="GPU ids of the allocation, e.g. 0,1 (sets CUDA_VISIBLE_DEVICES).")] = None,
    num_cpus: Annotated[float | None, typer.Option(
        "--num-cpus", help="CPU limit (cgroup cpu quota; also OMP_NUM_THREADS as Ray sets it), "
        "at least 0.1.")] = None,
    memory: Annotated[str | None, typer.Option(
        "--memory", help="Memory limit with a unit, e.g. 512M, 2G or 1GiB (cgroup; the command "
        "is killed above it). A bare number is bytes; below 1 MiB it is refused.")] = None,
    verbose: VerboseOpt = False,
    cgroup_root: Annotated[Path, typer.Option(
        "--cgroup-root", help="cgroup filesystem mount.", hidden=True)] = Path("/sys/fs/cgroup"),
) -> None:
    """Run CMD in the environment of a runtime_env, as a Ray worker would get it.

    Validates the runtime_env, pushes local working_dir/py_modules, gets or creates the
    environment (uv venv for pip/uv, unpacked packages) on the agent or the embedded store, then
    runs CMD with cwd = working_dir, PYTHONPATH = py_modules then working_dir, the venv on PATH
    and env_vars expanded like Ray. The exit code passes through (128+N after signal N); SIGTERM
    and friends are forwarded. --num-cpus/--memory apply cgroup limits when cgroups are writable.

    Example:

        $ rtenv run -r runtime_env.yaml -- python main.py

        $ rtenv run -r runtime_env.yaml --num-cpus 1 --memory 2GB -- python train.py
    """
    from rtenv_cli.core.errors import UsageError
    from rtenv_cli.core.run import RunRequest, run_command
    from rtenv_cli.core.spec.limits import CPUS_FLOOR_HINT, MIN_CPUS
    from rtenv_cli.core.units import parse_memory

    out = Output("text")
    if num_cpus is not None and not math.isfinite(num_cpus):
        raise UsageError(f"--num-cpus {num_cpus} is not a number of CPUs",
                         hint="give a finite amount, e.g. --num-cpus 2 or --num-cpus 0.5")
    if num_cpus is not None and not num_cpus >= MIN_CPUS:  # the one floor (spec/limits.py)
        raise UsageError(f"--num-cpus {num_cpus:g} is under rtenv's floor of {MIN_CPUS} CPU "
                         "for a CPU limit", hint=CPUS_FLOOR_HINT)
    if address and not address.startswith(("http://", "https://")):
        # the one resolver: `local`, an agent's host:port; a file:// or Ray address is refused
        from rtenv_cli.core.transport.resolve import AddressKind, resolve_address

        where = resolve_address(address).require(AddressKind.LOCAL, AddressKind.AGENT,
                                                 command="rtenv run")
        address = None if where.kind is AddressKind.LOCAL else where.value
    if runtime_env is None:
        from rtenv_cli.core.spec.locate import default_file

        runtime_env = default_file()
        if runtime_env is not None:
            out.message(f"using {runtime_env} (no --runtime-env given)")
    req = RunRequest(command=list(command), runtime_env=runtime_env, address=address,
                     token=token, gpus=gpus, num_cpus=num_cpus,
                     memory_bytes=parse_memory(memory) if memory else None,
                     cgroup_root=cgroup_root, base_dir=base_dir)
    def ready(handle: object, seconds: float) -> None:
        from rtenv_cli.render.cache import render_run_ready

        render_run_ready(out, handle, seconds)

    code = run_command(req, notify=out.warning, on_ready=ready if verbose else None,
                       status=out.status)
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command(
        name="run",
        context_settings={"allow_interspersed_args": False},
    )(run)
