"""`rtenv agent`: run the node agent (package store, environments, cache) over HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rtenv_cli.render.output import Output


def agent(
    *,
    host: Annotated[str, typer.Option("--host", help="Address to bind. Anything but loopback "
                                      "needs a token.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535,
                                      help="Port to listen on (0: any free port).")] = 8790,
    root: Annotated[Path | None, typer.Option(
        "--root", help="Store directory. Default: the embedded store under the user cache dir "
        "(RTENV_HOME).", show_default=False)] = None,
    token: Annotated[str | None, typer.Option(
        "--token", envvar="RTENV_AGENT_TOKEN", show_envvar=True,
        help="Require `Authorization: Bearer <token>` on every request. Prefer the "
        "environment variable: other users can read a command line in `ps`. Default: this "
        "user's token, kept in RTENV_HOME/agent-token (0600), which rtenv's clients of the "
        "same user read by themselves.", show_default=False)] = None,
    no_token: Annotated[bool, typer.Option(
        "--no-token", help="Serve loopback without any token: every local user can then use "
        "the agent as this user (build code, read what it can read). Only on a machine nobody "
        "else logs in to.")] = False,
    allow_file_root: Annotated[list[Path] | None, typer.Option(
        "--allow-file-root", help="A directory whose archives a create may name as file:// "
        "URIs (e.g. a shared filesystem); repeatable. Otherwise clients name only what they "
        "uploaded or what is on the network.", show_default=False)] = None,
    max_size: Annotated[str | None, typer.Option(
        "--max-size", help="After each create, drop least recently used unreferenced entries "
        "until the store is at most this big (e.g. 20GB).")] = None,
    max_age: Annotated[str | None, typer.Option(
        "--max-age", help="After each create, drop unreferenced entries unused for this long "
        "(e.g. 7d).")] = None,
    workers: Annotated[int, typer.Option(
        "--workers", min=1, help="Server processes sharing the port and the store (cache hits "
        "are answered in parallel; builds still happen once).")] = 1,
    read_timeout: Annotated[float, typer.Option(
        "--read-timeout", min=0.1, help="Seconds a client may take to send a request's headers, "
        "and to advance its body by 64 KiB; slower connections are closed.")] = 10.0,
    max_connections: Annotated[int, typer.Option(
        "--max-connections", min=1, help="Open connections at most (also kept under the "
        "process's file descriptor limit); past it, the longest-stalled one is closed.")] = 1024,
    max_body: Annotated[str, typer.Option(
        "--max-body", help="Largest JSON request body (HTTP 413 above it).")] = "1MiB",
    max_upload: Annotated[str, typer.Option(
        "--max-upload", help="Largest package upload (Ray's GCS stores at most 512 MiB).")
    ] = "512MiB",
    ready_file: Annotated[Path | None, typer.Option(
        "--ready-file", help="Once the agent serves, write its URL (and a newline) to this "
        "file, atomically; the file is removed when the agent stops. A batch script waits for "
        "it instead of polling the port.", show_default=False)] = None,
) -> None:
    """Run the rtenv node agent: a Ray-compatible package store, delta uploads, environments.

    Environments (uv venvs for pip/uv, unpacked working_dir/py_modules) are built once, shared,
    reference-counted and kept in a crash-safe store; `rtenv run --address` and
    `rtenv push --to` talk to it. Every request needs a bearer token: by default this user's
    own, kept in RTENV_HOME/agent-token (0600), which rtenv's clients of the same user read by
    themselves, so other local users cannot use the agent. A create may not name files on
    this machine (`-r /path`, a local sdist, file:// outside --allow-file-root): clients upload
    what they need. It binds 127.0.0.1 by default; any other bind needs a token, best given as
    RTENV_AGENT_TOKEN (a --token on the command line shows in `ps`). The API is described at
    /openapi.json. Request bodies are size-limited and slow clients are cut off
    (--read-timeout), so stalled connections cannot use up the agent's file descriptors.

    Under systemd (one per node), as an unprivileged user of its own, never root,
    /etc/systemd/system/rtenv-agent.service:

    \b
        [Service]
        User=rtenv
        Group=rtenv
        CacheDirectory=rtenv
        Environment=RTENV_HOME=/var/cache/rtenv
        EnvironmentFile=/etc/rtenv/agent.env
        ExecStart=/opt/venv/bin/rtenv agent --host 0.0.0.0 --max-size 50GB
        NoNewPrivileges=yes
        ProtectSystem=strict
        ProtectHome=read-only
        PrivateTmp=yes
        Restart=on-failure

    with RTENV_AGENT_TOKEN=<a long random string> in /etc/rtenv/agent.env (mode 0600).

    On each node of a Slurm allocation (one task per node, in the background; it runs as the
    job's user, and that user's jobs read the token file by themselves; mktemp -d makes the
    store a fresh directory of this user's alone, 0700, that nobody could have made first;
    each node's ready file on the shared filesystem tells the batch script it serves):

    \b
        srun --nodes=$SLURM_NNODES --ntasks-per-node=1 --overlap \\
             bash -c 'root=$(mktemp -d "${TMPDIR:-/tmp}/rtenv-$SLURM_JOB_ID.XXXXXX") &&
                      rtenv agent --root "$root" --ready-file "$0/$SLURMD_NODENAME"' \\
             "$SHARED/ready" &

    Example:

        $ rtenv agent --port 8790

        $ RTENV_AGENT_TOKEN="$TOKEN" rtenv agent --host 0.0.0.0 --max-size 20GB
    """
    from rtenv_cli.core.agent.server import AgentConfig, is_loopback
    from rtenv_cli.core.agent.serving import serve
    from rtenv_cli.core.transport.agent_protocol import Limits
    from rtenv_cli.core.units import parse_duration, parse_size

    out = Output("text")
    limits = Limits(json_bytes=parse_size(max_body), package_bytes=parse_size(max_upload))
    if not token and not no_token and is_loopback(host):
        # this user's own token (agent_token); beyond loopback the token must be given, for
        # the clients on other machines cannot read the file
        from rtenv_cli.core.transport.agent_token import user_token

        token = user_token()
    config = AgentConfig(root=root, host=host, port=port, token=token or None,
                         max_bytes=parse_size(max_size) if max_size else None,
                         max_age_s=parse_duration(max_age) if max_age else None,
                         workers=workers, limits=limits, read_timeout_s=read_timeout,
                         max_connections=max_connections,
                         file_roots=tuple(allow_file_root or ()))

    def listening(url: str) -> None:
        if no_token and not token:
            guard = "no token: every local user can use it"
        else:
            guard = "token required"
        out.message(f"rtenv agent listening on {url} ({guard})")

    serve(config, on_listening=listening, ready_file=ready_file)


def register(app: typer.Typer) -> None:
    app.command(name="agent")(agent)
