"""`rtenv agent` as a real process, and the commands that talk to it (run, cache --agent)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import requests  # noqa: TID253 - tests are not on the CLI's startup path

from tests.support.agent import agent_process
from tests.support.cli import run_cli, run_process
from tests.support.procs import stop_group
from tests.support.wait import until


def test_help_shows_systemd_and_slurm() -> None:
    res = run_cli(["agent", "--help"])
    assert res.exit_code == 0
    assert "ExecStart=" in res.stdout
    assert "srun --nodes" in res.stdout
    assert "$ rtenv agent --port 8790" in res.stdout


def test_non_loopback_without_token_is_a_usage_error(tmp_path: Path) -> None:
    res = run_cli(["agent", "--host", "0.0.0.0", "--root", str(tmp_path)])
    assert res.exit_code == 2
    assert "without a token" in res.stderr
    assert "RTENV_AGENT_TOKEN" in res.stderr


def test_run_and_cache_against_a_real_agent(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "data.txt").write_text("from the agent")
    env_file = tmp_path / "runtime_env.yaml"
    env_file.write_text("working_dir: proj\nuv:\n  - six==1.16.0\nenv_vars:\n  K: v\n")
    with agent_process(tmp_path / "agent-store", token="t0ken") as agent:  # noqa: S106 - test
        code = ("import os, six; print(open('data.txt').read(), six.__version__, "
                "os.environ['K'])")
        res = run_process(["run", "--address", agent.url, "--token", "t0ken", "-r",
                           str(env_file), "--base-dir", str(tmp_path), "--", "python", "-c", code])
        assert res.exit_code == 0, res.stderr
        assert res.stdout.strip() == "from the agent 1.16.0 v"
        assert str(agent.root) in run_process(
            ["run", "--address", agent.url, "--token", "t0ken", "-r", str(env_file),
             "--base-dir", str(tmp_path), "--",
             "python", "-c", "import sys; print(sys.executable)"]).stdout
        listing = run_cli(["cache", "ls", "--agent", agent.url, "--token", "t0ken",
                           "--format", "json"]).json
        assert {e["kind"] for e in listing["entries"]} == {"package", "working_dir", "uv"}
        assert all(e["refs"] == 0 for e in listing["entries"])
        bad = run_cli(["cache", "ls", "--agent", agent.url, "--token", "wrong"])
        assert bad.exit_code == 1
        assert "refused the token" in bad.stderr
        purge = run_cli(["cache", "purge", "--agent", agent.url, "--token", "t0ken", "--yes"])
        assert purge.exit_code == 0
        assert "Removed 2 entries" in purge.stdout
        left = run_cli(["cache", "ls", "--agent", agent.url, "--token", "t0ken",
                        "--format", "json"]).json["entries"]
        # the package just pushed stays pinned for its grace period, as Ray's GCS keeps it
        assert [(e["kind"], e["pinned"]) for e in left] == [("package", True)]


def test_push_to_the_agent_is_verified_and_listed(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "a.py").write_text("print(1)\n")
    (tmp_path / "env.yaml").write_text("working_dir: proj\n")
    with agent_process(tmp_path / "agent-store") as agent:
        res = run_process(["push", "env.yaml", "--to", agent.url], cwd=str(tmp_path))
        assert res.exit_code == 0, res.stderr
        uri = res.stdout.split("working_dir: ", 1)[1].split()[0]
        listing = run_cli(["cache", "ls", "--agent", agent.url, "--format", "json"]).json
        assert [e["uri"] for e in listing["entries"]] == [uri]


# -- start-up (red-team 21) and the token's travels ---------------------------------------------
def _start(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    full = {k: v for k, v in os.environ.items() if k != "RTENV_AGENT_TOKEN"}
    full.update(env or {})
    return subprocess.Popen([sys.executable, "-m", "rtenv_cli", "agent", *args], env=full,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _stop(proc: subprocess.Popen[str]) -> None:
    stop_group(proc, timeout=20)


def _listening_url(proc: subprocess.Popen[str]) -> str:
    assert proc.stderr is not None
    line = proc.stderr.readline()  # bounded: the agent prints it or exits
    match = re.search(r"listening on (http://\S+)", line)
    assert match, line
    return match.group(1)


def test_listening_is_reported_once_the_socket_is_bound(tmp_path: Path) -> None:
    proc = _start(["--port", "0", "--root", str(tmp_path / "s")])
    try:
        url = _listening_url(proc)
        host, port = url.removeprefix("http://").rsplit(":", 1)
        assert int(port) > 0  # the port picked, not the 0 asked for
        with socket.create_connection((host, int(port)), timeout=10):
            pass  # no retry: it listens when it says so
    finally:
        _stop(proc)


def _wait_for_file(path: Path, proc: subprocess.Popen[str]) -> str:
    def written() -> bool:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else proc.returncode
        return path.exists()

    until(written, what=f"the ready file {path}")
    return path.read_text()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_the_ready_file_names_the_serving_agent_and_goes_with_it(tmp_path: Path,
                                                                 workers: str) -> None:
    ready = tmp_path / "ready" / "node0"
    (tmp_path / "ready").mkdir()
    proc = _start(["--port", "0", "--root", str(tmp_path / "s"), "--no-token",
                   "--workers", workers, "--ready-file", str(ready)])
    try:
        text = _wait_for_file(ready, proc)
        assert text.endswith("\n")
        url = text.strip()
        assert url == _listening_url(proc)
        # no retry: it serves when the file says so (with workers, the backlog holds the
        # request until one has started)
        assert requests.get(f"{url}/openapi.json", timeout=60).ok
        assert [p.name for p in ready.parent.iterdir()] == ["node0"]  # no temp file left
    finally:
        _stop(proc)
    assert not ready.exists()


def test_an_unwritable_ready_file_is_a_clear_error(tmp_path: Path) -> None:
    res = run_cli(["agent", "--port", "0", "--no-token", "--root", str(tmp_path / "s"),
                   "--ready-file", str(tmp_path / "missing" / "ready")])
    assert res.exit_code == 2, res.output
    assert "no directory" in res.stderr
    assert "hint:" in res.stderr
    assert not (tmp_path / "missing").exists()


def test_a_port_in_use_is_one_clear_usage_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = run_process(["agent", "--port", str(port), "--root", str(tmp_path / "s")],
                          timeout=60)
    assert res.exit_code == 2
    assert f"port {port} on 127.0.0.1 is in use" in res.stderr
    assert "listening" not in res.stderr
    assert "internal error" not in res.stderr


def test_a_port_out_of_range_is_a_usage_error(tmp_path: Path) -> None:
    res = run_process(["agent", "--port", "70000", "--root", str(tmp_path / "s")], timeout=60)
    assert res.exit_code == 2
    assert "listening" not in res.stderr


def test_an_unusable_root_is_a_clear_error(tmp_path: Path) -> None:
    res = run_process(["agent", "--port", "0", "--root", "/proc/rtenv-no-such/x"], timeout=60)
    assert res.exit_code == 2
    assert "cannot use" in res.stderr
    assert "internal error" not in res.stderr
    assert "listening" not in res.stderr


def test_the_token_reaches_workers_without_the_environment(tmp_path: Path) -> None:
    secret = "tok-" + "x" * 20
    proc = _start(["--port", "0", "--root", str(tmp_path / "s"), "--workers", "2"],
                  env={"RTENV_AGENT_TOKEN": secret})
    try:
        url = _listening_url(proc)
        until(lambda: requests.get(f"{url}/api/agent", timeout=5,
                                   headers={"Authorization": f"Bearer {secret}"}).ok,
              what="the workers to answer", retry_on=(requests.RequestException,))
        assert requests.get(f"{url}/api/agent", timeout=10).status_code == 401
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                  text=True, check=False).stdout.split()
        assert children
        for pid in children:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            assert secret.encode() not in environ
            assert b"RTENV_AGENT_CONFIG" not in environ
    finally:
        _stop(proc)


def test_help_prefers_the_token_variable() -> None:
    res = run_cli(["agent", "--help"])
    assert "RTENV_AGENT_TOKEN" in res.stdout
    assert "ps" in res.stdout
