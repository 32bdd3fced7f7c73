"""`rtenv push --watch --on-change CMD`: the user's command after each push.

- CMD runs through the shell after every push that reached the target, with what it pushed:
  `RTENV_URI` (the working_dir's URI, else the first source's), `RTENV_URIS` (JSON: each source's
  field label to its URI), `RTENV_RUNTIME_ENV` (JSON) and `RTENV_PUSHED_FILE` (that runtime_env
  as a YAML file, written just before CMD starts: `ray job submit --runtime-env
  "$RTENV_PUSHED_FILE"`), and `RTENV_TRIGGER` (initial, change, env, reconcile, retry).
- Never two at once. CMD runs in the background, so the watch keeps pushing while it runs; a
  newer push stops a CMD still running (SIGTERM to its process group, SIGKILL after
  `grace_s`), then CMD runs for the newest push only: pushes that came while the old one
  stopped are folded into it. The code under test is always the newest, as with a dev server's
  reload; a command that must clean up on a stop (e.g. `ray job stop` the job it submitted)
  traps SIGTERM.
- Its standard output goes to the watch's standard error, as it comes (stdout carries only the
  watch's own lines or JSON events); its standard input is /dev/null.
- A failure (a non-zero exit that was not a stop) is a warning that names the push; the watch
  goes on. When the watch ends, a running CMD is stopped the same way (`--once` waits for it
  instead, and fails when it failed).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol


class PushEvent(Protocol):
    """What the command learns of a push (session.PushEvent: the session imports this module)."""

    @property
    def uri(self) -> str: ...
    @property
    def uris(self) -> Mapping[str, str]: ...
    @property
    def runtime_env(self) -> Mapping[str, Any]: ...
    @property
    def trigger(self) -> str: ...


GRACE_S = 10.0  # from SIGTERM to SIGKILL (as docker stop, watchexec)


class ChangeCommand:
    """Runs `command` after each push (see the module's docstring). `on_notice(kind, message,
    hint)` reports a stop or a failure, as the watch session reports its own notices."""

    def __init__(self, command: str, on_notice: Callable[[str, str, str | None], None], *,
                 grace_s: float = GRACE_S) -> None:
        self.command = command
        self.on_notice = on_notice
        self.grace_s = grace_s
        self._dir = Path(tempfile.mkdtemp(prefix="rtenv-on-change-"))
        self._cond = threading.Condition()
        self._pending: PushEvent | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stopping = False  # the running command was told to stop
        self._closed = False
        self.last_status: int | None = None  # the last command's exit status that was not a stop
        self._thread = threading.Thread(target=self._run, name="rtenv-on-change", daemon=True)
        self._thread.start()

    # -- the watch's side ----------------------------------------------------------------------
    def submit(self, event: PushEvent) -> None:
        """Run the command for `event` once the one running (if any) has stopped."""
        with self._cond:
            self._pending = event
            if self._proc is not None and self._proc.poll() is None:
                self._stop_locked()
            self._cond.notify_all()

    def wait(self) -> int | None:
        """Block until no command runs or waits; the last one's exit status."""
        with self._cond:
            self._cond.wait_for(lambda: self._pending is None and self._proc is None)
            return self.last_status

    def close(self, *, wait: bool = False) -> None:
        """Stop (or, with `wait`, wait for) the command, and end the runner."""
        if wait:
            self.wait()
        with self._cond:
            self._closed = True
            self._pending = None
            if self._proc is not None and self._proc.poll() is None:
                self._stop_locked()
            self._cond.notify_all()
        self._thread.join()
        shutil.rmtree(self._dir, ignore_errors=True)

    # -- the runner ----------------------------------------------------------------------------
    def _stop_locked(self) -> None:
        proc = self._proc
        assert proc is not None  # noqa: S101 - the caller checked, under the lock
        self._stopping = True
        _signal_group(proc, signal.SIGTERM)
        timer = threading.Timer(self.grace_s, _signal_group, (proc, signal.SIGKILL))
        timer.daemon = True
        timer.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None or self._closed)
                if self._closed:
                    return
                event, self._pending = self._pending, None
                assert event is not None  # noqa: S101 - the wait's condition
                self._stopping = False
                try:
                    self._proc = self._start(event)
                except OSError as exc:
                    self.on_notice("warning", f"--on-change command did not start: {exc}",
                                   "check the command; the next push runs it again")
                    self._cond.notify_all()
                    continue
                proc = self._proc
            status = proc.wait()
            with self._cond:
                stopped = self._stopping
                self._proc = None
                if not stopped:
                    self.last_status = status
                self._cond.notify_all()
            self._report(event, status, stopped)

    def _start(self, event: PushEvent) -> subprocess.Popen[bytes]:
        from rtenv_cli.core.push import write_runtime_env

        pushed = self._dir / "runtime_env.yaml"
        write_runtime_env(pushed, dict(event.runtime_env))
        env = dict(os.environ, RTENV_URI=event.uri, RTENV_URIS=json.dumps(dict(event.uris)),
                   RTENV_RUNTIME_ENV=json.dumps(event.runtime_env),
                   RTENV_PUSHED_FILE=str(pushed), RTENV_TRIGGER=event.trigger)
        # its own process group: a stop reaches what it started (a shell's children)
        return subprocess.Popen(self.command, shell=True, env=env,  # noqa: S602 - the user's command
                                stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno(),
                                start_new_session=True)

    def _report(self, event: PushEvent, status: int, stopped: bool) -> None:
        if stopped:
            self.on_notice("note", f"--on-change command for {event.uri} stopped: a newer push "
                           "came" if not self._closed else
                           f"--on-change command for {event.uri} stopped: the watch ended",
                           None)
        elif status:
            why = f"exited with {status}" if status > 0 else f"killed by signal {-status}"
            self.on_notice("warning", f"--on-change command for {event.uri} {why}; "
                           "still watching", "the next push runs it again")


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):  # it has just exited
            os.killpg(proc.pid, sig)
