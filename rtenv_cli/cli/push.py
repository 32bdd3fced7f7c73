"""`rtenv push`: package working_dir/py_modules like Ray and publish them (see core/push.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rtenv_cli.cli.options import (
    AddressOpt,
    DryRunOpt,
    FormatOpt,
    TargetTokenOpt,
    TextJson,
    VerboseOpt,
)


def push(  # noqa: PLR0917 - typer maps each parameter to an option
    path: Annotated[Path | None, typer.Argument(
        help="runtime_env file (YAML/JSON) or a directory (taken as the working_dir). "
        "Default: runtime_env.yaml in the current directory.")] = None,
    to: Annotated[str | None, typer.Option(
        "--to", help="Target: http(s)://dashboard-or-agent, file:///shared/dir, or local "
        "(overrides --address).")] = None,
    address: AddressOpt = None,
    token: TargetTokenOpt = None,
    stage_to: Annotated[str | None, typer.Option(
        "--stage-to", metavar="TARGET", help="Where to publish packages over the target's "
        "upload limit (file:///shared/dir or an rtenv agent URL); the runtime_env then points "
        "Ray at a URI its nodes fetch themselves.")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Write the rewritten runtime_env here (.json -> JSON, else "
        "YAML) instead of stdout; with --watch, rewritten after every push. Never packaged, "
        "even inside the working_dir.")] = None,
    base_dir: Annotated[Path | None, typer.Option(
        "--base-dir", help="Resolve relative paths in the runtime_env against this directory. "
        "Default: the current directory, as `ray job submit` does.", show_default=False)] = None,
    dry_run: DryRunOpt = False,
    rtenv_envs: Annotated[bool, typer.Option(
        "--rtenv-envs", help="Move `pip:`/`uv:` into `rtenv:` so the nodes build it with "
        "rtenv's Ray plugin (`rtenv ray-env`); conda and the like are refused.")] = False,
    via: Annotated[str, typer.Option(
        "--via", metavar="auto|tree|zip", help="auto: content-addressed trees (a save sends "
        "the changed files) where every node of the Ray cluster (GCS address, or dashboard URL "
        "through the GCS it names) loads rtenv's plugin, else Ray's gcs:// zips, saying why; "
        "tree or zip: that path only.")] = "auto",
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Keep watching and re-push on "
                                        "every change until Ctrl-C.")] = False,
    once: Annotated[bool, typer.Option("--once", help="With the watch engine: push once and "
                                       "exit.")] = False,
    on_change: Annotated[str | None, typer.Option(
        "--on-change", metavar="CMD", help="With --watch/--once: run CMD (through the shell) "
        "after each push, in the background, one at a time: a newer push stops a CMD still "
        "running (SIGTERM to its process group) and runs it for the newest push. CMD gets "
        "RTENV_URI, RTENV_URIS (JSON), RTENV_RUNTIME_ENV (JSON), RTENV_PUSHED_FILE (that "
        "runtime_env as YAML) and RTENV_TRIGGER; its output goes to stderr; a failure is a "
        "warning and the watch goes on (--once waits for CMD and fails with it).")] = None,
    polling: Annotated[bool, typer.Option("--poll", envvar="RTENV_WATCH_POLLING",
                                          help="With --watch: poll instead of inotify.")] = False,
    # -- watch debounce (WATCH feature) --
    quiet_ms: Annotated[int, typer.Option("--quiet-ms", help="With --watch: quiet period for "
                                          "writes still open and bursts (a closed save is "
                                          "pushed at once).")] = 200,
    max_wait_ms: Annotated[int, typer.Option("--max-wait-ms", help="With --watch: push at the "
                                             "latest this long after the first event.")] = 2000,
    # -- end watch debounce --
    verbose: VerboseOpt = False,
    fmt: FormatOpt = TextJson.text,
) -> None:
    """Package a runtime_env's working_dir/py_modules exactly like Ray and upload what is missing.

    Validates first, computes Ray's own gcs://_ray_pkg_<hash>.zip URI per package, uploads only
    what the target lacks (deflate-compressed, size checked before sending), then prints the
    runtime_env with local paths replaced by URIs, ready for `ray job submit --runtime-env` or
    `ray.init(runtime_env=...)`. A Serve config or a KubeRay manifest is pushed whole: every
    application's and deployment's runtime_env, and the same file written back (comments
    kept) ready for `serve deploy` / `kubectl apply`. Local requirements files are inlined, so
    the output works from any directory. The summary (stderr) lists ignored directories
    holding .py files. Without --to/--address the embedded local store is used.

    Example:

        $ rtenv push runtime_env.yaml --address http://127.0.0.1:8265 -o pushed.yaml

        $ rtenv push runtime_env.yaml --address head:6379   # straight to the GCS, like ray.init

        $ rtenv push serve_config.yaml -o deploy.yaml   # then: serve deploy deploy.yaml

        $ rtenv push src/ --dry-run

        $ rtenv push runtime_env.yaml --address http://head:8265 --stage-to file:///nfs/rtenv

        $ rtenv push . --to file:///shared/pkgs --format json

        $ rtenv push runtime_env.yaml --rtenv-envs -o pushed.yaml   # rtenv builds pip/uv

        $ rtenv push --watch runtime_env.yaml --address http://127.0.0.1:8265
    """
    if via not in ("auto", "tree", "zip"):
        from rtenv_cli.core.errors import UsageError

        raise UsageError(f"--via {via!r}: use auto, tree or zip")
    if base_dir is not None and not base_dir.is_dir():
        from rtenv_cli.core.errors import UsageError

        raise UsageError(f"--base-dir {base_dir}: not a directory")
    if on_change and not (watch or once):
        from rtenv_cli.core.errors import UsageError

        raise UsageError("--on-change runs after the pushes of a watch",
                         hint="add --watch (or --once for one push)")
    if watch or once:
        from rtenv_cli.cli.push_watch import run_watch_cli

        if rtenv_envs:
            from rtenv_cli.core.errors import UsageError

            raise UsageError("--rtenv-envs is not supported with --watch/--once",
                             hint="push once with --rtenv-envs, or watch without it")

        if output is not None and path is not None and output.resolve() == path.resolve():
            from rtenv_cli.core.errors import UsageError

            raise UsageError(f"-o {output} is the runtime_env being watched",
                             hint="write the pushed runtime_env to another file, e.g. -o "
                             "pushed.yaml")

        code = run_watch_cli(path or Path("runtime_env.yaml"), address=address, to=to,
                             token=token, fmt=fmt.value, verbose=verbose, once=once and not watch,
                             on_change=on_change, quiet_ms=quiet_ms, max_wait_ms=max_wait_ms,
                             base_dir=base_dir, output=output, via=via,
                             polling=polling)  # --poll or RTENV_WATCH_POLLING: typer reads both
        if code:
            raise typer.Exit(code)
        return
    from rtenv_cli import api
    from rtenv_cli.core.push import dump_runtime_env, write_runtime_env
    from rtenv_cli.render.output import Output
    from rtenv_cli.render.push import summary

    out = Output(fmt.value)
    result = api.push(path, to=to, address=address, token=token, stage_to=stage_to,
                      dry_run=dry_run, progress=out.progress, sizes=dry_run or out.is_machine,
                      base_dir=base_dir, outputs=(output,) if output is not None else (),
                      rtenv_envs=rtenv_envs, via=via)
    if out.is_machine and output is None:  # the runtime_env is in the JSON: no YAML dump
        out.json(result.to_dict())
        return
    text = result.document if result.document is not None else dump_runtime_env(
        result.runtime_env, output)
    if output is not None and not dry_run:
        write_runtime_env(output, result.runtime_env, text)
    if out.is_machine:
        out.json(result.to_dict())
        return
    summary(out, result)
    if output is None or dry_run:
        out.line(text.rstrip("\n"))
    else:
        out.message(f"wrote {output}")


def register(app: typer.Typer) -> None:
    app.command(name="push")(push)
