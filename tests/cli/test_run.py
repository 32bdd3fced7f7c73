"""`rtenv run` as a real process: the quickstart, exit codes, signals, cgroup limits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import default_signals, run_cli, run_process

REPO = Path(__file__).resolve().parents[2]


def _rtenv(args: list[str], **kw: object) -> subprocess.Popen[str]:
    kw.setdefault("preexec_fn", default_signals)
    return subprocess.Popen([sys.executable, "-m", "rtenv_cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)  # type: ignore[call-overload]


def _exit_code(proc: subprocess.Popen[str], timeout: float = 20) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"rtenv run did not exit in {timeout} s; stderr: {err!r}") from None


def test_quickstart_runs_on_the_embedded_default() -> None:
    res = run_process(["run", "-r", "examples/quickstart/runtime_env.yaml", "--",
                       "python", "main.py"], cwd=str(REPO))
    assert res.exit_code == 0, res.stderr
    assert "six 1.17.0 from " in res.stdout
    assert "/store/entries/" in res.stdout  # imported from the rtenv venv, not the base env
    assert "data.txt: read from the working_dir" in res.stdout
    assert "GREETING=hello from quickstart" in res.stdout
    listing = run_cli(["cache", "ls", "--format", "json"]).json
    # the package, its unpacked entry, the venv, and push's last build of the working_dir
    assert {e["kind"] for e in listing["entries"]} == {"package", "working_dir", "pip",
                                                       "build-cache"}
    assert all(not e["refs"] for e in listing["entries"])


@pytest.mark.parametrize(("code", "expected"), [
    ("raise SystemExit(3)", 3),
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 137),
    ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", 143),
])
def test_exit_codes_pass_through(code: str, expected: int) -> None:
    assert run_process(["run", "--", sys.executable, "-c", code]).exit_code == expected


_WAITER = ("import signal, sys, time\n"
           "signal.signal(signal.SIGTERM, lambda *a: sys.exit(42))\n"
           "print('ready', flush=True)\n"
           "time.sleep(30)\n")


def test_sigterm_is_forwarded() -> None:
    proc = _rtenv(["run", "--", sys.executable, "-c", _WAITER])
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        assert _exit_code(proc) == 42
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sigint_is_forwarded_without_a_terminal() -> None:
    code = "import time\nprint('ready', flush=True)\ntime.sleep(30)\n"
    proc = _rtenv(["run", "--", sys.executable, "-c", code], stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        assert _exit_code(proc) == 130  # KeyboardInterrupt dies by SIGINT: 128 + 2
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_file_that_cannot_be_executed_exits_126_like_a_shell(tmp_path: Path) -> None:
    garbage = tmp_path / "not-a-program"
    garbage.write_bytes(b"\x00\x01\x02 not an executable format\n")
    garbage.chmod(0o755)
    res = run_process(["run", "--", str(garbage)])
    assert res.exit_code == 126
    assert f"cannot execute {garbage}" in res.stderr
    assert "Traceback" not in res.stderr


def test_a_signal_ignored_at_start_stays_ignored_like_nohup() -> None:
    code = ("import signal\n"
            "print(signal.getsignal(signal.SIGHUP) == signal.SIG_IGN,"
            " signal.getsignal(signal.SIGTERM) == signal.SIG_IGN)\n")

    def nohup() -> None:
        default_signals()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    proc = _rtenv(["run", "--", sys.executable, "-c", code], preexec_fn=nohup)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    # SIGHUP stays ignored in the command (nohup's promise); SIGTERM, which rtenv forwards,
    # reaches the command at its default
    assert out.split() == ["True", "False"]


def _v1_writable() -> bool:
    return os.access("/sys/fs/cgroup/memory", os.W_OK)


@pytest.mark.cgroups
@pytest.mark.skipif(not _v1_writable(), reason="needs writable cgroup v1 (root)")
def test_memory_limit_kills_a_hog() -> None:
    hog = "b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096])"
    res = run_process(["run", "--memory", "64MB", "--num-cpus", "1", "--", sys.executable,
                       "-c", hog])
    assert res.exit_code == 137
    assert "killed by its memory limit" in res.stderr
    ok = run_process(["run", "--memory", "64MB", "--", sys.executable, "-c", "print('small')"])
    assert ok.exit_code == 0
    assert ok.stdout.strip() == "small"


def test_without_cgroups_it_says_so_and_runs(tmp_path: Path) -> None:
    res = run_process(["run", "--memory", "1GB", "--cgroup-root", str(tmp_path), "--",
                       sys.executable, "-c", "print('ran')"])
    assert res.exit_code == 0
    assert res.stdout.strip() == "ran"
    assert "running without resource limits" in res.stderr


def test_unsupported_field_is_a_clear_error(tmp_path: Path) -> None:
    env = tmp_path / "env.yaml"
    env.write_text("conda:\n  dependencies: [python=3.11]\n")
    res = run_process(["run", "-r", str(env), "--", "true"])
    assert res.exit_code == 1
    assert "not supported by the rtenv agent" in res.stderr
    assert "Traceback" not in res.stderr


def test_relative_paths_resolve_against_the_cwd_like_ray(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "m.txt").write_text("cwd-relative")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "env.yaml").write_text("working_dir: code\n")
    res = run_process(["run", "-r", "conf/env.yaml", "--", "python", "-c",
                       "print(open('m.txt').read())"], cwd=str(tmp_path))
    assert res.exit_code == 0, res.stderr
    assert res.stdout.strip() == "cwd-relative"


def test_verbose_reports_build_then_cache_hit(tmp_path: Path) -> None:
    (tmp_path / "env.yaml").write_text("env_vars:\n  A: b\n")
    args = ["run", "-v", "-r", "env.yaml", "--", "python", "-c", "pass"]
    assert "ready in" in run_process(args, cwd=str(tmp_path)).stderr
    (tmp_path / "env2.yaml").write_text("pip: [six==1.16.0]\n")
    first = run_process([*args[:3], "env2.yaml", *args[4:]], cwd=str(tmp_path))
    assert "(built pip:" in first.stderr
    second = run_process([*args[:3], "env2.yaml", *args[4:]], cwd=str(tmp_path))
    assert "(cache hit)" in second.stderr


def test_help_has_example() -> None:
    res = run_cli(["run", "--help"])
    assert res.exit_code == 0
    assert "$ rtenv run -r runtime_env.yaml -- python main.py" in res.stdout


def test_memory_without_a_unit_is_refused_with_a_hint() -> None:
    res = run_cli(["run", "--memory", "256", "--", "true"])
    assert res.exit_code == 2
    assert "256 bytes" in res.stderr
    assert "--memory 256M" in res.stderr


def test_infinite_cpus_is_a_usage_error() -> None:
    res = run_cli(["run", "--num-cpus", "inf", "--", "true"])
    assert res.exit_code == 2
    assert "--num-cpus inf" in res.stderr
    assert "internal error" not in res.stderr


def test_address_goes_through_the_one_resolver(tmp_path: Path) -> None:
    (tmp_path / "env.yaml").write_text("env_vars:\n  A: b\n")
    env = str(tmp_path / "env.yaml")
    shared = run_cli(["run", "-r", env, "--address", "file:///shared/dir", "--", "true"])
    assert shared.exit_code == 2
    assert "rtenv run cannot use file:///shared/dir, a shared directory" in shared.stderr
    assert "http://file:" not in shared.stderr
    local = run_process(["run", "-r", env, "--address", "local", "--", "python", "-c",
                         "import os; print(os.environ['A'])"])
    assert local.exit_code == 0, local.stderr
    assert local.stdout.strip() == "b"


@pytest.mark.parametrize("ignore", [".gitignore:/data/", "excludes:tests/", "excludes:*.bin"])
def test_a_folder_whose_files_are_all_ignored_runs(tmp_path: Path, ignore: str) -> None:
    """Ray hashes such a folder's name but its zip has no entry for it; the embedded store
    refused the package ("content of _ray_pkg_… does not match its name")."""
    m = tmp_path / "m"
    (m / "data").mkdir(parents=True)
    (m / "tests").mkdir()
    (m / "main.py").write_text("import os; print(sorted(os.listdir('.')))\n")
    (m / "data" / "x.bin").write_text("x\n")
    (m / "tests" / "t.bin").write_text("t\n")
    how, rule = ignore.split(":")
    spec = "working_dir: .\n"
    if how == ".gitignore":
        (m / ".gitignore").write_text(rule + "\n")
    else:
        spec += f"excludes: ['{rule}']\n"
    (m / "re.yaml").write_text(spec)
    res = run_process(["run", "-r", "re.yaml", "--", "python", "main.py"], cwd=str(m))
    assert res.exit_code == 0, res.stderr
    assert "does not match" not in res.stderr
    assert "main.py" in res.stdout
