"""Hostile input to `rtenv validate` and `rtenv explain`: bounded time and memory, a clear
message and exit 0/1/2, never an internal error or a traceback (red-team items 5, 14, 15, 18, 19).
"""

from __future__ import annotations

import errno
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from rtenv_cli.core.errors import FileSystemError, from_os_error
from tests.support.cli import CliResult, run_cli, run_process

LAUGHS = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['lol'] * 9)}]\n"
    for prev, name in zip([None, "a", "b", "c", "d", "e", "f"], "abcdefg", strict=True))


def _limited() -> None:
    # a regression must fail the test, not take the machine's memory (red-team 15 OOM-killed it)
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def user_env(*, buffered: bool = True) -> dict[str, str]:
    """This environment as a user's shell has it: stdout buffered (this machine exports
    PYTHONUNBUFFERED, which would let a failed write surface at once and hide a failure of the
    final flush at exit), no colour."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return {**env, "NO_COLOR": "1", **({} if buffered else {"PYTHONUNBUFFERED": "1"})}


def run_limited(args: list[str], *, stdin: int | None = subprocess.DEVNULL,
                stdout: int | None = subprocess.PIPE, timeout: float = 120,
                cwd: Path | None = None, pass_fds: tuple[int, ...] = (),
                buffered: bool = True) -> CliResult:
    proc = subprocess.run(
        [sys.executable, "-m", "rtenv_cli", *args], stdin=stdin, stdout=stdout,
        stderr=subprocess.PIPE, timeout=timeout, preexec_fn=_limited, check=False, cwd=cwd,
        env=user_env(buffered=buffered), pass_fds=pass_fds)
    out = proc.stdout.decode(errors="replace") if proc.stdout else ""
    return CliResult(proc.returncode, out, proc.stderr.decode(errors="replace"))


def assert_clean(result: CliResult, codes: tuple[int, ...] = (0, 1, 2)) -> None:
    assert result.exit_code in codes, result
    assert "internal error" not in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr


# -- red-team 14: the YAML alias bomb, and a huge file ----------------------------------------


def test_alias_bomb_is_refused_with_its_position(tmp_path: Path) -> None:
    bomb = tmp_path / "laughs.yaml"
    bomb.write_text(LAUGHS)
    assert len(LAUGHS) < 400
    result = run_limited(["validate", str(bomb)], timeout=60)
    assert_clean(result, (1,))
    assert f"{bomb}:6:8: RTE001 error" in result.stdout
    assert "too many aliases" in result.stdout


def test_explain_refuses_the_alias_bomb(tmp_path: Path) -> None:
    bomb = tmp_path / "laughs.yaml"
    bomb.write_text(LAUGHS)
    result = run_limited(["explain", str(bomb), "--no-gpu-map", "--format", "json"], timeout=60)
    assert_clean(result, (2,))
    assert ":6:8: cannot parse: LimitExceeded: too many aliases" in result.stderr
    assert result.json["error"]["code"] == "config"  # the one loader's error, in explain's format


def test_moderate_aliases_still_load(tmp_path: Path) -> None:
    path = tmp_path / "runtime_env.yaml"
    path.write_text("x-common: &vars {A: '1', B: '2'}\nenv_vars: *vars\n")
    result = run_cli(["validate", str(path), "--format", "json"])
    assert result.exit_code == 0, result
    assert result.json["files"][0]["normalized"]["env_vars"] == {"A": "1", "B": "2"}


def test_file_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "runtime_env.yaml"
    with path.open("wb") as fh:
        fh.write(b"env_vars:\n  A: '")
        fh.write(b"x" * (11 << 20))
        fh.write(b"'\n")
    result = run_cli(["validate", str(path)])
    assert result.exit_code == 1
    assert f"{path}:" in result.stdout
    assert "over rtenv's 10 MiB limit" in result.stdout


def test_standard_input_is_bounded() -> None:
    result = run_cli(["validate", "-"], input="#" * (11 << 20))
    assert result.exit_code == 1
    assert "10 MiB limit" in result.stdout


# -- red-team 15: devices and FIFOs ------------------------------------------------------------


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
@pytest.mark.parametrize("command", ["validate", "explain"])
def test_devices_are_refused(device: str, command: str) -> None:
    result = run_limited([command, device] + (["--no-gpu-map"] if command == "explain" else []),
                         timeout=60)
    assert_clean(result, (1, 2))
    assert "not a regular file" in result.stdout + result.stderr


@pytest.mark.parametrize("command", ["validate", "explain"])
def test_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path, command: str) -> None:
    fifo = tmp_path / "runtime_env.yaml"
    os.mkfifo(fifo)
    result = run_limited([command, str(fifo)], timeout=60)
    assert_clean(result, (1, 2))
    assert "FIFO" in result.stdout + result.stderr


# -- issue 22, M5: requirements files are read as runtime_env files are -------------------------
def _hostile_file(tmp_path: Path, kind: str) -> str:
    if kind == "device":
        return "/dev/zero"
    path = tmp_path / f"{kind}.txt"
    if kind == "fifo":
        os.mkfifo(path)  # no writer: a blocking read would wait forever
    else:
        with path.open("wb") as fh:  # sparse: 20 GiB to read, no disk used
            fh.truncate(20 << 30)
    return str(path)


@pytest.mark.parametrize("kind", ["device", "fifo", "sparse"])
def test_validate_reads_a_requirements_file_bounded(tmp_path: Path, kind: str) -> None:
    """`pip: /dev/zero` reached MemoryError after 3 GB (red team 2, M3)."""
    target = _hostile_file(tmp_path, kind)
    env = tmp_path / "runtime_env.yaml"
    env.write_text(f"pip: {target}\nuv: {target}\n")
    result = run_limited(["validate", str(env)], timeout=60)
    assert_clean(result, (1,))
    assert f"{target} is not a valid file" in result.stdout or \
        f"requirements file {target}: the file is 20480.0 MiB, over rtenv's 10 MiB" \
        in result.stdout, result.stdout


@pytest.mark.parametrize("kind", ["device", "fifo", "sparse"])
def test_run_reads_a_referenced_requirements_file_bounded(tmp_path: Path, kind: str) -> None:
    """`-r FILE` in a pip list is read for the venv's key: bounded as well."""
    target = _hostile_file(tmp_path, kind)
    env = tmp_path / "runtime_env.yaml"
    env.write_text(f"pip: ['-r {target}']\n")
    result = run_limited(["run", "-r", str(env), "--", sys.executable, "-c", "pass"],
                         timeout=60)
    assert_clean(result, (2,))
    what = {"device": "a character device, not a regular file",
            "fifo": "a FIFO (named pipe), not a regular file",
            "sparse": "the file is 20480.0 MiB, over rtenv's 10 MiB limit"}[kind]
    assert f"error: requirements file {target}: {what}" in result.stderr


# -- red-team 19: closed standard streams, an unwritable stdout ---------------------------------


def test_validate_with_standard_input_closed() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import os, runpy, sys; os.close(0); sys.argv = ['rtenv', "
         "'validate', '-']; runpy.run_module('rtenv_cli', run_name='__main__')"],
        capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc
    assert "standard input is closed" in proc.stderr
    assert "internal error" not in proc.stderr


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("fmt", ["text", "json", "sarif"])
def test_validate_with_standard_output_closed(tmp_path: Path, fmt: str, buffered: bool) -> None:
    path = tmp_path / "runtime_env.yaml"
    path.write_text("env_vars:\n  A: '1'\n")
    proc = subprocess.run(
        [sys.executable, "-c", "import os, runpy, sys; os.close(1); sys.argv = ['rtenv', "
         f"'validate', '--format', '{fmt}', {str(path)!r}]; "
         "runpy.run_module('rtenv_cli', run_name='__main__')"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=60, check=False,
        env=user_env(buffered=buffered))
    assert proc.returncode == 1, proc
    assert "cannot write to standard output" in proc.stderr
    assert "internal error" not in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args", [["validate", "{path}"], ["validate", "-f", "json", "{path}"],
                                  ["explain", "{path}", "--no-gpu-map", "-f", "json"]])
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_standard_output_on_dev_full(tmp_path: Path, args: list[str], buffered: bool) -> None:
    path = tmp_path / "runtime_env.yaml"
    path.write_text("env_vars:\n  A: '1'\n")
    with open("/dev/full", "wb") as full:
        result = run_limited([a.format(path=path) for a in args], stdout=full.fileno(),
                             buffered=buffered)
    assert result.exit_code == 1, result
    assert "cannot write to standard output: No space left on device" in result.stderr
    assert_clean(result)


# -- red-team 18: explain's inputs -------------------------------------------------------------


def test_explain_non_utf8_runtime_env_names_file_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "runtime_env.yaml"
    path.write_bytes(b"env_vars:\n  A: \"\xff\"\n")
    for args in (["explain", str(path)], ["explain", "--job-runtime-env", str(path)]):
        result = run_cli([*args, "--no-gpu-map"])
        assert_clean(result, (2,))
        assert f"{path}:2:7:" in result.stderr
        assert "byte 0xff in position 16" in result.stderr


def test_explain_non_utf8_node_env_file(tmp_path: Path) -> None:
    path = tmp_path / "node.env"
    path.write_bytes(b"A=\xff\n")
    result = run_cli(["explain", "--node-env-file", str(path), "--no-gpu-map"])
    assert_clean(result, (2,))
    assert f"--node-env-file {path}:1:3:" in result.stderr
    assert "position 2" in result.stderr


@pytest.mark.parametrize(("option", "value"), [("--num-gpus", "1e309"), ("--num-gpus", "inf"),
                                               ("--num-gpus", "nan"), ("--num-cpus", "inf"),
                                               ("--num-cpus", "nan")])
def test_explain_non_finite_amounts_are_usage_errors(option: str, value: str) -> None:
    result = run_cli(["explain", f"{option}={value}", "--no-gpu-map"])
    assert_clean(result, (2,))
    assert f"{option} must be a finite number" in result.stderr


def test_explain_null_env_vars_key(tmp_path: Path) -> None:
    path = tmp_path / "runtime_env.yaml"
    path.write_text("env_vars:\n  ? \n  : x\n")
    result = run_cli(["explain", str(path), "--no-gpu-map"])
    assert_clean(result, (1,))
    assert "env_vars key None is not a string" in result.stdout + result.stderr


@pytest.mark.parametrize("field", ["working_dir", "py_modules"])
def test_explain_path_over_the_name_limit(tmp_path: Path, field: str) -> None:
    path = tmp_path / "runtime_env.yaml"
    value = "a" * 300 if field == "working_dir" else ["b" * 300]
    path.write_text(f"{field}: {value}\n".replace("'", ""))
    result = run_cli(["explain", str(path), "--no-gpu-map", "--format", "json"])
    assert_clean(result, (0,))
    assert "File name too long" in result.json["cwd"] + str(result.json["pythonpath"])


def test_explain_deep_nesting_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "runtime_env.yaml"
    path.write_text("env_vars: " + "[" * 3000 + "]" * 3000 + "\n")
    result = run_cli(["explain", str(path), "--no-gpu-map", "--format", "json"])
    assert_clean(result, (2,))
    assert "cannot parse: RecursionError: the document nests too deeply" in result.stderr


def _cpu_bound() -> None:
    _limited()
    # a CPU budget, not a clock: ~20x what linear work needs, a third of the quadratic's
    resource.setrlimit(resource.RLIMIT_CPU, (30, 30))


def test_explain_many_env_vars(tmp_path: Path) -> None:
    path = tmp_path / "runtime_env.yaml"
    lines = [f"  K{i}: ${{K{i + 1}}}/v{i}" for i in range(20_000)]
    path.write_text("env_vars:\n" + "\n".join(lines) + "\n")
    proc = subprocess.run(
        [sys.executable, "-m", "rtenv_cli", "explain", str(path), "--no-gpu-map", "--format",
         "json"], capture_output=True, text=True, timeout=600, preexec_fn=_cpu_bound,
        check=False)
    assert proc.returncode == 0, proc.stderr[-500:]
    env = json.loads(proc.stdout)["env"]
    assert env["K1"] == "/v1"  # K2 is applied after K1: ${K2} is blanked
    assert env["K19999"] == "/v19999"  # ${K20000} is unset: blanked


# -- red-team 19: validate's internal errors ---------------------------------------------------


def test_validate_working_dir_with_a_non_utf8_file_name(tmp_path: Path) -> None:
    tree = tmp_path / "d"
    tree.mkdir()
    (tree / "ok.py").write_text("x = 1\n")
    with open(os.fsencode(tree) + b"/\xff", "wb"):  # a name that is not UTF-8
        pass
    path = tmp_path / "runtime_env.yaml"
    path.write_text(f"working_dir: {tree}\n")
    result = run_cli(["validate", str(path)])
    assert_clean(result, (1,))
    assert f"{path}:1:14: RTE003 error: file name is not valid UTF-8" in result.stdout
    assert "rename it" in result.stdout


@pytest.mark.parametrize("field", ["working_dir", "py_modules"])
def test_validate_path_over_the_system_limit(tmp_path: Path, field: str) -> None:
    long = "/" + "/".join(["a" * 200] * 25)  # 5 KB: over PATH_MAX
    path = tmp_path / "runtime_env.yaml"
    path.write_text(f"{field}: {long}\n" if field == "working_dir" else f"{field}: [{long}]\n")
    result = run_cli(["validate", str(path), "--format", "json"])
    assert_clean(result, (1,))
    [diag] = result.json["files"][0]["diagnostics"]
    assert diag["code"] == "RTE003"
    assert "File name too long" in diag["message"]


def test_validate_argument_over_the_system_limit(tmp_path: Path) -> None:
    result = run_cli(["validate", str(tmp_path / ("a" * 5000))])
    assert_clean(result, (2,))
    assert "File name too long" in result.stderr


def test_validate_does_not_hash_a_package_over_the_upload_limit(tmp_path: Path) -> None:
    tree = tmp_path / "data"
    tree.mkdir()
    with (tree / "big.bin").open("wb") as fh:  # sparse: costs no disk, 101 MiB to read
        fh.truncate(101 << 20)
    path = tmp_path / "runtime_env.yaml"
    path.write_text(f"working_dir: {tree}\n")
    result = run_cli(["validate", str(path), "--format", "json"])
    report = result.json["files"][0]
    assert any("is over Ray's 100 MiB limit: its gcs:// URI is not computed" in note
               for note in report["notes"]), report["notes"]
    assert "working_dir" not in (report["normalized"] or {})
    # the upload fails (HTTP 413): Ray's verdict for `ray job submit`; ray.init would take it
    assert [d["code"] for d in report["diagnostics"]] == ["RTE009", "RTE150"]
    assert report["valid"] is False


# -- red-team 5: secrets in validate's output --------------------------------------------------

SECRETS = ("AKIAABCDEFGHIJKLMNOP", "hunter2-secret", "sk-abcdefghijklmnopqrstu")


@pytest.mark.parametrize("fmt", ["text", "json", "github", "sarif"])
def test_validate_never_prints_secret_values(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "runtime_env.yaml"
    path.write_text("env_vars:\n  DB_PASSWORD: [\"AKIAABCDEFGHIJKLMNOP\"]\n"
                    "  API_TOKEN: hunter2-secret\n  K: [sk-abcdefghijklmnopqrstu]\n")
    result = run_cli(["validate", str(path), "--format", fmt])
    assert result.exit_code == 1
    for secret in SECRETS:
        assert secret not in result.stdout + result.stderr
    assert "AKI****" in result.stdout
    if fmt == "text":  # the excerpt under the message is redacted like the message
        assert " 2 |   DB_PASSWORD: [\"AKI****\"]" in result.stdout
        assert " 3 |   API_TOKEN: hun****" in result.stdout


def test_validate_valid_secret_excerpt_is_redacted(tmp_path: Path) -> None:
    path = tmp_path / "runtime_env.yaml"
    path.write_text("env_vars:\n  DB_PASSWORD: hunter2-secret\n")
    result = run_cli(["validate", str(path)])
    assert result.exit_code == 0
    assert "DB_PASSWORD=hun****" in result.stdout
    assert " 2 |   DB_PASSWORD: hun****" in result.stdout
    assert "hunter2-secret" not in result.stdout


@pytest.mark.parametrize("args", [["--num-gpus", "230077732"], ["--resource", "TPU=1e9"],
                                  ["--gpus", "0,99999999"]])
def test_explain_amounts_beyond_any_node_are_usage_errors(args: list[str]) -> None:
    # found by the fuzz test: a 230M-slot list ran out of memory
    result = run_cli(["explain", *args, "--no-gpu-map"])
    assert_clean(result, (2,))
    assert "4096" in result.stderr


# -- issue 22, M8: paths the file system refuses, a config file that is not UTF-8 ---------------
def test_a_requirement_name_over_the_name_limit(tmp_path: Path) -> None:
    """`pip: xxx...` (300 characters, read as a file's path) was `internal error: OSError`."""
    env = tmp_path / "runtime_env.yaml"
    env.write_text(f"pip: {'x' * 300}\n")
    result = run_cli(["validate", str(env), "--format", "json"])
    assert_clean(result, (1,))
    [diag] = result.json["files"][0]["diagnostics"]
    assert "File name too long" in diag["message"]
    assert "x" * 300 in diag["message"]
    ran = run_cli(["run", "-r", str(env), "--", sys.executable, "-c", "pass"])
    assert_clean(ran, (2,))
    assert "File name too long" in ran.stderr


def test_a_config_file_that_is_not_utf8(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_bytes(b'[validate]\nformat = "\xff\xfe"\n')
    result = run_process(["validate", "--help"], env={"RTENV_CONFIG": str(config)})
    assert_clean(result, (2,))
    assert f"error: {config}: byte 21 is not UTF-8" in result.stderr
    assert "hint: save the file as UTF-8" in result.stderr


@pytest.mark.parametrize("command", [["cache", "ls"], ["run", "-r", "env.yaml", "--", "true"]])
def test_rtenv_home_that_is_a_file(tmp_path: Path, command: list[str]) -> None:
    home = tmp_path / "home"
    home.write_text("")
    (tmp_path / "proj").mkdir()
    (tmp_path / "env.yaml").write_text(f"working_dir: {tmp_path / 'proj'}\n")
    command = [str(tmp_path / a) if a == "env.yaml" else a for a in command]
    result = run_process(command, env={"RTENV_HOME": str(home)})
    assert_clean(result, (1, 2))  # the home's own check (2), or the OS's ENOTDIR mapped (1)
    assert result.stderr.startswith("error: ")
    assert "not a directory" in result.stderr
    assert "\nhint: " in result.stderr
    assert "bug" not in result.stderr


def test_rtenv_home_with_a_name_over_the_limit(tmp_path: Path) -> None:
    home = tmp_path / ("h" * 300)
    result = run_process(["cache", "ls"], env={"RTENV_HOME": str(home)})
    assert_clean(result, (1, 2))  # the home's own check (2), or the OS's error mapped (1)
    assert result.stderr.startswith("error: ")
    assert "name too long" in result.stderr.lower()
    assert "\nhint: " in result.stderr


@pytest.mark.parametrize(("code", "meaning"), [
    (errno.ENOTDIR, "a component of the path is a file, not a directory"),
    (errno.EACCES, "permission denied"), (errno.EPERM, "operation not permitted"),
    (errno.EROFS, "read-only file system"), (errno.ENAMETOOLONG, "file name too long")])
def test_the_os_errors_a_user_can_fix_name_the_path(code: int, meaning: str) -> None:
    """EACCES and EROFS cannot be made here as root without a mount: the one table is checked
    for them, the CLI above for the rest."""
    mapped = from_os_error(OSError(code, os.strerror(code), "/some/where"))
    assert isinstance(mapped, FileSystemError)
    assert mapped.message == f"/some/where: {meaning}"
    assert mapped.hint
    assert mapped.exit_code == 1
    assert from_os_error(OSError(code, os.strerror(code))) is None  # no path: nothing to name
