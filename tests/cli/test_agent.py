"""`rtenv agent` as a real process, and the commands that talk to it (run, cache --agent)."""

from __future__ import annotations

from pathlib import Path

from tests.core.agent.conftest import agent_process
from tests.support.cli import run_cli, run_process


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
