"""`rtenv doctor`: one line per check, the fix on a problem's line, exit 1 when something is
missing, the JSON shape of the issue."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import run_cli


def test_text_is_one_line_per_check_and_exit_0_here() -> None:
    result = run_cli(["doctor"])
    assert result.exit_code == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[1] for line in lines[:4]] == ["rtenv", "python", "ray", "uv"]
    assert all(line.split()[0] in ("ok", "warn", "fail") for line in lines)
    assert "0 failed" in result.stderr


def test_json_is_a_list_of_checks() -> None:
    result = run_cli(["doctor", "--format", "json"])
    assert result.exit_code == 0
    checks = result.json["checks"]
    assert {tuple(sorted(c)) for c in checks} == {("detail", "fix", "name", "status")}
    assert {c["status"] for c in checks} <= {"ok", "warn", "fail"}


def test_a_missing_requirement_is_one_line_with_its_fix_and_exit_1(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    result = run_cli(["doctor", "--address", f"file://{missing}"])
    assert result.exit_code == 1
    (line,) = [ln for ln in result.stdout.splitlines() if ln.startswith("fail")]
    assert f"{missing} does not exist" in line
    assert line.endswith(f"; fix: mkdir -p {missing} (on the shared filesystem every node "
                         "mounts)")


def test_runtime_env_argument_is_compared_with_the_watch_limit(tmp_path: Path) -> None:
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    env = tmp_path / "runtime_env.yaml"
    env.write_text(f"working_dir: {tmp_path / 'src'}\n")
    result = run_cli(["doctor", str(env), "--format", "json"])
    (inotify,) = [c for c in result.json["checks"] if c["name"] == "inotify"]
    assert f"`push --watch {env}` needs 2 (one per directory)" in inotify["detail"]


def test_a_usage_error_in_the_address_exits_1_with_the_hint() -> None:
    result = run_cli(["doctor", "--address", "ray://head:10001"])
    assert result.exit_code == 1
    (line,) = [ln for ln in result.stdout.splitlines() if ln.startswith("fail")]
    assert "Ray Client address" in line
    assert "fix: give the head's GCS address" in line
