"""`rtenv push --watch/--once` as a real process: JSON event lines, Ctrl-C, --on-change."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tests.core.watch.helpers import wait_for
from tests.support.cli import default_signals, run_cli, run_process
from tests.support.wait import until

KEYS = {"uri", "added", "modified", "removed", "bytes_sent", "elapsed_ms", "trigger"}


def _read_json_line(proc: subprocess.Popen[str]) -> dict[str, object]:
    assert proc.stdout is not None
    stdout = proc.stdout

    def line() -> str:
        text = stdout.readline()
        if not text and proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode}: {proc.stderr.read()}")  # type: ignore[union-attr]
        return text

    return dict(json.loads(until(line, what="a JSON line from the watch")))


def _interrupt(proc: subprocess.Popen[str]) -> None:
    """Ctrl-C the watch (SIGKILL its group if it has not ended within 20 s)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def test_help_has_example() -> None:
    result = run_cli(["push", "--help"])
    assert result.exit_code == 0
    assert "--watch" in result.stdout
    assert "$ rtenv push --watch" in result.stdout


def test_once_json(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text("a\n")
    result = run_cli(["push", "--once", str(src), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    event = json.loads(result.stdout)
    assert set(event) == KEYS
    assert event["trigger"] == "initial"
    assert event["added"] == 1


def test_missing_path_is_a_config_error(tmp_path: Path) -> None:
    result = run_cli(["push", "--once", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "does not exist" in result.stderr


def test_watch_json_lines_on_change_and_ctrl_c(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "main.py").write_text("v1\n")
    marker = tmp_path / "on_change.log"
    env = dict(os.environ, RTENV_HOME=str(tmp_path / "home"))
    cmd = f'echo "$RTENV_URI" >> {marker}; echo noise-on-stdout'
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtenv_cli", "push", "--watch", str(src), "--format", "json",
         "--quiet-ms", "100", "--on-change", cmd],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True, preexec_fn=default_signals)  # noqa: PLW1509 - only signal() calls
    try:
        first = _read_json_line(proc)
        assert first["trigger"] == "initial"
        assert set(first) == KEYS
        # the edit after the first command has run (an edit while it runs would stop it)
        wait_for(lambda: marker.exists() and len(marker.read_text().split()) == 1)
        (src / "main.py").write_text("v2\n")
        second = _read_json_line(proc)
        assert second["modified"] == 1
        assert second["uri"] != first["uri"]
        wait_for(lambda: marker.exists() and len(marker.read_text().split()) == 2)
        assert marker.read_text().split() == [first["uri"], second["uri"]]
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    assert proc.returncode in (0, 130)
    assert "Traceback" not in err
    for line in out.splitlines():  # nothing but JSON objects on stdout
        assert set(json.loads(line)) == KEYS


def test_watch_rewrites_the_output_after_each_push_and_never_packages_it(
        tmp_path: Path) -> None:
    """`push --watch . -o pushed.yaml` inside the working_dir: the file always holds the last
    push's runtime_env, and writing it neither changes the URI nor triggers a push."""
    import yaml
    from ray._private.runtime_env.packaging import get_uri_for_directory

    src = tmp_path / "src"
    src.mkdir()
    (src / "main.py").write_text("v1\n")
    out_file = src / "pushed.yaml"
    env = dict(os.environ, RTENV_HOME=str(tmp_path / "home"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtenv_cli", "push", "--watch", ".", "-o", "pushed.yaml",
         "--format", "json", "--quiet-ms", "100"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=src,
        start_new_session=True, preexec_fn=default_signals)  # noqa: PLW1509 - only signal() calls
    try:
        first = _read_json_line(proc)
        uri = get_uri_for_directory(str(src), include_gitignore=True,
                                    excludes=[".git", ".venv", "venv", "__pycache__",
                                              "pushed.yaml"])
        assert first["uri"] == uri
        assert yaml.safe_load(out_file.read_text()) == {"working_dir": first["uri"]}
        (src / "main.py").write_text("v2\n")
        second = _read_json_line(proc)
        assert second["trigger"] == "change"
        assert (second["added"], second["modified"]) == (0, 1)  # main.py, not pushed.yaml
        wait_for(lambda: yaml.safe_load(out_file.read_text()) == {"working_dir": second["uri"]})
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    assert proc.returncode in (0, 130), err
    assert out == ""  # no push beyond the two above: rewriting pushed.yaml triggers none


def test_output_over_the_watched_file_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    spec = tmp_path / "runtime_env.yaml"
    spec.write_text(f"working_dir: {tmp_path / 'src'}\n")
    result = run_cli(["push", "--watch", str(spec), "-o", str(spec)])
    assert result.exit_code == 2
    assert "is the runtime_env being watched" in result.stderr
    assert spec.read_text() == f"working_dir: {tmp_path / 'src'}\n"


def test_watch_publishes_a_closed_save_without_waiting_for_the_quiet_period(
        tmp_path: Path) -> None:
    """A save the kernel reports complete (close after write, rename into place) is pushed at
    once: with a 60 s quiet period, both saves below are pushed long before it could end."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "main.py").write_text("v1\n")
    env = dict(os.environ, RTENV_HOME=str(tmp_path / "home"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtenv_cli", "push", "--watch", str(src), "--format", "json",
         "--quiet-ms", "60000", "--max-wait-ms", "120000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True, preexec_fn=default_signals)  # noqa: PLW1509 - only signal() calls
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True)
    reader.start()  # a blocking readline would hide how long a push took: wait on a queue

    def event() -> dict[str, object]:
        return dict(json.loads(lines.get(timeout=30)))  # well inside the 60 s quiet period

    try:
        first = event()
        (src / "main.py").write_text("v2\n")
        second = event()
        assert (second["trigger"], second["modified"]) == ("change", 1)
        (src / "new.py~").write_text("v3\n")  # an editor's temp file, renamed into place
        os.replace(src / "new.py~", src / "new.py")
        third = event()
        assert (third["added"], third["modified"]) == (1, 0)
        assert len({first["uri"], second["uri"], third["uri"]}) == 3
    finally:
        _interrupt(proc)


def test_watch_polling_variable_has_one_reader() -> None:
    """RTENV_WATCH_POLLING is `--poll`'s variable (flag > variable > config file, as typer reads
    every option's); nothing else in rtenv reads it, so no second reading can disagree."""
    import rtenv_cli

    root = Path(rtenv_cli.__file__).parent
    readers = [str(p.relative_to(root)) for p in root.rglob("*.py")
               if "RTENV_WATCH_POLLING" in p.read_text()]
    assert readers == ["cli/push.py"]
    assert run_cli(["push", "--help"]).stdout.count("RTENV_WATCH_POLLING") == 1


# A command that holds its run until `release` exists, logging to `log`: its start (with what
# RTENV_PUSHED_FILE holds), a stop (SIGTERM, trapped), its end; `lock` catches two at once.
HELD_COMMAND = """
log={log}; lock={lock}
mkdir "$lock" 2>/dev/null || echo "overlap $RTENV_URI" >> "$log"
trap 'echo "stopped $RTENV_URI" >> "$log"; rmdir "$lock"; exit 143' TERM
grep -q "working_dir: $RTENV_URI" "$RTENV_PUSHED_FILE" && echo "start $RTENV_URI" >> "$log"
echo "output of $RTENV_URI"
while [ ! -e {release} ]; do sleep 0.05; done
rmdir "$lock"; echo "done $RTENV_URI" >> "$log"; exit 3
"""


def test_on_change_runs_one_at_a_time_newest_first_and_a_failure_keeps_the_watch(
        tmp_path: Path) -> None:
    """A real watch and a real command: an edit while the command runs stops it and runs it on
    the new push; its output streams to stderr; its failure is a warning and the watch goes on."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "main.py").write_text("v1\n")
    log, release = tmp_path / "log", tmp_path / "release"
    cmd = HELD_COMMAND.format(log=log, lock=tmp_path / "lock", release=release)
    env = dict(os.environ, RTENV_HOME=str(tmp_path / "home"))
    err_path = tmp_path / "stderr"
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rtenv_cli", "push", "--watch", str(src), "--format", "json",
             "--quiet-ms", "100", "--on-change", cmd],
            stdout=subprocess.PIPE, stderr=err, text=True, env=env,
            start_new_session=True, preexec_fn=default_signals)  # noqa: PLW1509 - only signal() calls

    def logged() -> list[str]:
        return log.read_text().splitlines() if log.exists() else []

    try:
        first = _read_json_line(proc)["uri"]
        wait_for(lambda: logged() == [f"start {first}"])
        (src / "main.py").write_text("v2\n")  # while the first command runs
        second = _read_json_line(proc)["uri"]
        wait_for(lambda: logged() == [f"start {first}", f"stopped {first}",
                                      f"start {second}"])
        release.touch()
        wait_for(lambda: logged()[-1] == f"done {second}")
        wait_for(lambda: f"for {second} exited with 3; still watching" in err_path.read_text())
        (src / "main.py").write_text("v3\n")  # the watch goes on after the failure
        third = _read_json_line(proc)["uri"]
        wait_for(lambda: logged()[-2:] == [f"start {third}", f"done {third}"])
    finally:
        _interrupt(proc)
    err_text = err_path.read_text()
    assert f"--on-change command for {first} stopped: a newer push came" in err_text
    assert f"output of {first}" in err_text  # its output, on stderr as it came
    assert not [line for line in logged() if line.startswith("overlap")]
    assert "Traceback" not in err_text


def test_on_change_with_once_waits_for_the_command_and_fails_with_it(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "main.py").write_text("v1\n")
    env = {"RTENV_HOME": str(tmp_path / "home")}
    ok = run_process(["push", "--once", str(src), "--on-change", 'echo "ran $RTENV_TRIGGER"'],
                     env=env)
    assert ok.exit_code == 0, ok.stderr
    assert "ran initial" in ok.stderr
    failed = run_process(["push", "--once", str(src), "--on-change", "exit 4"], env=env)
    assert failed.exit_code == 1
    assert "exited with 4" in failed.stderr


def test_on_change_without_a_watch_is_a_usage_error(tmp_path: Path) -> None:
    res = run_cli(["push", str(tmp_path), "--on-change", "true"])
    assert res.exit_code == 2
    assert "hint: add --watch" in res.stderr
