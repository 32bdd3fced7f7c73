"""`rtenv explain [RUNTIME_ENV]`: the environment a Ray worker gets for an allocation, offline."""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from rtenv_cli.cli.options import address_option

AddressOpt = Annotated[str | None, address_option(
    "With --verify: the Ray cluster to run the probe on, as its GCS address (host:6379), "
    "its dashboard URL (http://host:8265) or auto (the cluster `ray start` started here).")]


class ExplainFormat(str, Enum):
    text = "text"
    json = "json"
    dotenv = "dotenv"
    shell = "shell"


class Kind(str, Enum):
    task = "task"
    actor = "actor"


class Vendor(str, Enum):
    nvidia = "nvidia"
    amd = "amd"
    intel = "intel"
    metax = "metax"
    apple = "apple"


def explain(  # noqa: PLR0917 - one parameter per CLI option is Typer's model
    runtime_env: Annotated[Path | None, typer.Argument(
        help="runtime_env YAML/JSON (the task's when --job-runtime-env is given, else the job's). "
        "Default: runtime_env.yaml in the current directory, if there is one.",
        show_default=False)] = None,
    kind: Annotated[Kind, typer.Option("--kind", help="task or actor.")] = Kind.task,
    num_cpus: Annotated[float | None, typer.Option("--num-cpus", help="CPUs requested.")] = None,
    gpus: Annotated[str | None, typer.Option(
        "--gpus", help="GPU ids Ray allocated (raylet slots), e.g. 0,1.")] = None,
    num_gpus: Annotated[float | None, typer.Option(
        "--num-gpus", help="GPUs requested (fractions allowed; first-fit ids assumed).")] = None,
    resource: Annotated[list[str] | None, typer.Option(
        "--resource", metavar="NAME=AMOUNT|IDS", help="NAME=AMOUNT or NAME=IDS (neuron_cores, "
        "TPU, HPU, NPU, RBLN, TTNPU, FURIOSA, MBLT); a comma or [..] makes it ids. "
        "Repeatable.")] = None,
    gpu_vendor: Annotated[Vendor, typer.Option(
        "--gpu-vendor", help="Vendor behind the GPU resource.")] = Vendor.nvidia,
    accelerator_type: Annotated[str | None, typer.Option(
        "--accelerator-type", help="The accelerator_type requested (e.g. A100): Ray only adds "
        "the resource accelerator_type:<type>; no variable changes.")] = None,
    job_runtime_env: Annotated[Path | None, typer.Option(
        "--job-runtime-env", help="Job-level runtime_env merged under RUNTIME_ENV.")] = None,
    app: Annotated[str | None, typer.Option(
        "--app", help="With a Serve config as RUNTIME_ENV: the application whose runtime_env "
        "to explain (needed when there are several).")] = None,
    node_env: Annotated[list[str] | None, typer.Option(
        "--node-env", metavar="K=V", help="A variable of the raylet's environment. "
        "Repeatable.")] = None,
    node_env_file: Annotated[Path | None, typer.Option(
        "--node-env-file", help="dotenv file with the raylet's environment.")] = None,
    node_env_from_current: Annotated[bool, typer.Option(
        "--node-env-from-current", help="Use this shell's environment as the raylet's.")] = False,
    compare: Annotated[str | None, typer.Option(
        "--compare", help="A second allocation, e.g. 'num_cpus=1 gpus=1 TPU=4': could one "
        "worker serve both?")] = None,
    show_secrets: Annotated[bool, typer.Option(
        "--show-secrets", help="Show secret values (credential formats like hf_..., and values "
        "of TOKEN/PASSWORD/KEY variables that look like one) instead of redacting them; "
        "--format dotenv/shell refuse to write a redacted value without it.")] = False,
    gpu_map: Annotated[bool, typer.Option("--gpu-map/--no-gpu-map",
                                          help="Query NVML for the GPU map.")] = True,
    verify: Annotated[bool, typer.Option(
        "--verify", help="Run a probe with this request on --address and diff.")] = False,
    address: AddressOpt = None,
    fmt: Annotated[ExplainFormat, typer.Option("--format", "-f", case_sensitive=False,
                                               help="Output format.")] = ExplainFormat.text,
) -> None:
    """Show the exact environment a Ray 2.60 worker gets, and where each variable comes from.

    Example:

        $ rtenv explain runtime_env.yaml --num-gpus 2 --node-env CUDA_VISIBLE_DEVICES=3,5,6,7

        $ rtenv explain --kind actor --num-cpus 0.5 --resource TPU=4 --format json

        $ rtenv explain task_env.yaml --job-runtime-env job_env.yaml --format shell

        $ rtenv explain serve_config.yaml --app llm --num-gpus 1
    """
    from rtenv_cli.core.errors import UsageError
    from rtenv_cli.core.explain import service
    from rtenv_cli.render import explain as render
    from rtenv_cli.render.output import Output

    node = service.node_env_from(node_env or [], node_env_file,
                                 dict(os.environ) if node_env_from_current else None)
    request: dict[str, Any] = {
        "job_runtime_env": job_runtime_env, "kind": kind.value, "num_cpus": num_cpus,
        "gpus": gpus, "num_gpus": num_gpus, "resources": resource or [],
        "gpu_vendor": gpu_vendor.value, "accelerator_type": accelerator_type,
        "node_env": node, "app": app}
    out = Output("json" if fmt is ExplainFormat.json else "text")
    if runtime_env is None and job_runtime_env is None:
        from rtenv_cli.core.spec.locate import default_file

        runtime_env = default_file()
        if runtime_env is not None:
            out.message(f"using {runtime_env} (no runtime_env file given)")
    if verify:
        if not address:
            raise UsageError("--verify needs --address", hint="pass the head's GCS address "
                             "(--address 127.0.0.1:6379), its dashboard URL, or set RAY_ADDRESS")
        from rtenv_cli.core.explain.verify import verify_on_cluster
        report = verify_on_cluster(service.build_request(runtime_env=runtime_env, **request),
                                   address)
        if fmt is ExplainFormat.json:
            out.json(report.to_dict())
        else:
            render.render_verify(out, report)
        raise typer.Exit(0 if report.ok else 1)
    from rtenv_cli import api

    result = api.explain(runtime_env, **request, compare=compare, gpu_map=gpu_map,
                         show_secrets=show_secrets)
    _render(out, fmt, result)


def _render(out: Any, fmt: ExplainFormat, result: Any) -> None:
    """Print `result` in `fmt`; what a shell would source must hold every real value."""
    from rtenv_cli.core.errors import OperationError, UsageError
    from rtenv_cli.render import explain as render

    if result.preview.hidden and fmt in (ExplainFormat.dotenv, ExplainFormat.shell):
        # a sourced file must never set a placeholder in place of the value
        names = ", ".join(result.preview.hidden)
        raise UsageError(f"--format {fmt.value} would write <redacted> in place of the secret "
                         f"value of {names}", hint="pass --show-secrets to write the values, "
                         "or use --format text or json to see the rest")
    if result.preview.errors and fmt in (ExplainFormat.dotenv, ExplainFormat.shell):
        # values Ray would never produce must not reach a shell that sources them
        raise OperationError("Ray rejects this request: " + "; ".join(result.preview.errors),
                             hint="fix the request (rtenv explain -f text shows the details)")
    if fmt is ExplainFormat.json:
        out.json(result.to_dict())
    elif fmt is ExplainFormat.dotenv:
        render.render_dotenv(out, result.preview, export=False)
    elif fmt is ExplainFormat.shell:
        render.render_dotenv(out, result.preview, export=True)
    else:
        render.render_text(out, result)
    if result.preview.errors:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command(name="explain")(explain)
