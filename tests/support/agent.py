"""A real `rtenv agent` process on a free loopback port, stopped by its process group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.ports import free_port, wait_for_port
from tests.support.procs import stop_group


@dataclass
class AgentProc:
    url: str
    root: Path
    proc: subprocess.Popen[bytes]
    token: str | None = None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the agent's whole process group (the agent and its uv children)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=20)


@contextmanager
def agent_process(root: Path, *extra: str, token: str | None = None,
                  host: str = "127.0.0.1", user_token: bool = False,
                  port: int | None = None) -> Iterator[AgentProc]:
    """The agent on `root`. Without `token`, it serves with `--no-token` (the tests' raw
    requests send none), unless `user_token`: then it runs as `rtenv agent` does by default,
    with this user's token file (RTENV_HOME/agent-token), whose token AgentProc.token holds.
    `port`: the one to listen on (a restarted agent's), else a free one."""
    port = port or free_port()
    env = dict(os.environ)
    env.pop("RTENV_AGENT_TOKEN", None)
    args = [sys.executable, "-m", "rtenv_cli", "agent", "--host", host, "--port", str(port),
            "--root", str(root), *extra]
    if token:
        args += ["--token", token]
    elif not user_token:
        args.append("--no-token")
    proc = subprocess.Popen(args, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    agent = AgentProc(f"http://127.0.0.1:{port}", root, proc, token)
    try:
        wait_for_port(port, timeout=30)
        if user_token:
            from rtenv_cli.core.transport.agent_token import read_token

            agent.token = read_token()
        yield agent
    finally:
        stop_group(proc)
