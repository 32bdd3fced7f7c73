"""The worker's side of `rtenv.limits`: `python -m rtenv_cli.core.rayplugin.cgexec --pid PID
[--memory BYTES] [--cpus N]` makes the cgroup `rtenv-<PID>-<random>` (core/store/cgroups.py, v2 or
v1) under the cgroup it lives in, sets the limits and moves PID into it, then exits.

The plugin puts it in the worker's `command_prefix` with `--pid $$`: Ray runs the prefix and the
worker in one `bash -c`, which then `exec`s the worker, so the worker keeps PID and the cgroup. A
failure exits 1 with its reason on stderr (the worker's log); the `&&` after it keeps the worker
from starting without its limits. Nothing here stays behind to remove the cgroup: the agent sweeps
empty `rtenv-<pid>-*` cgroups whose pid is gone (rayplugin/limits.py).

With a memory limit, a watcher stays behind instead: cgexec forked before it made the cgroup
(so in the parent cgroup), in its own session. Its pid ends the cgroup's name, `rtenv-<worker
pid>-<random>-w<watcher pid>`, and a sweep leaves a cgroup alone while that pid lives: the OOM
count cannot be swept away before it is read. When the worker exits the watcher reads it and, if
the kernel killed anything for the limit, says so in the worker's stderr log,
`<temp-dir>/<session-name>/logs/worker-<worker-id>-[<job id>-]<pid>.err` (Ray's names; the core
worker points its stderr there after the exec, so the watcher finds it from the worker's own
arguments: `bash -c` holds them). Ray's log monitor streams that file to the driver: the user
sees why the worker died where Ray says only "The worker died unexpectedly". The same line goes
to the job's `runtime_env_setup-<job id>.log` beside it (the job id is in the stderr log's name),
where the dashboard shows a job's setup, in Ray's log format. Without such a file (not a Ray
worker) the line goes to the inherited stderr. The watcher is this process forked (no new
interpreter) and waits on a pidfd.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path

from rtenv_cli.core.errors import RtenvError
from rtenv_cli.core.store.cgroups import Cgroup, Cgroups, Limits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rtenv-cgexec")
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--memory", type=int)
    parser.add_argument("--cpus", type=float)
    args = parser.parse_args(argv)
    # with a memory limit, the watcher is forked first: its pid is in the cgroup's name, which
    # keeps every sweep off the cgroup until the watcher has read its OOM count
    watcher, go = _fork_watcher(args.pid, args.memory) if args.memory is not None else (0, -1)
    held = f"-w{watcher}" if watcher else ""
    try:
        group = Cgroups().create(Limits(cpus=args.cpus, memory_bytes=args.memory),
                                 name=f"rtenv-{args.pid}-{secrets.token_hex(3)}{held}",
                                 sweep=False)  # the agent sweeps, and reports OOM kills
    except RtenvError as exc:
        print(f"rtenv: cannot limit worker {args.pid}: {exc.message}", file=sys.stderr)
        return 1  # closing `go` unsent ends the watcher
    try:
        group.join(args.pid)
    except OSError as exc:
        group.remove()
        print(f"rtenv: cannot move worker {args.pid} into {group.dirs}: {exc}", file=sys.stderr)
        return 1
    if go >= 0:
        os.write(go, "\0".join(str(d) for d in group.dirs).encode())
        os.close(go)
    return 0


def oom_message(memory_bytes: int, group: str) -> str:
    """What the worker's log says when its memory limit killed it."""
    return (f"rtenv: this worker was OOM-killed: it went past its rtenv.limits memory of "
            f"{memory_bytes / 2**20:g} MiB ({memory_bytes} bytes, cgroup {group}); raise "
            "`rtenv.limits.memory` in the runtime_env, or use less memory")


def _fork_watcher(pid: int, memory_bytes: int) -> tuple[int, int]:
    """Fork the watcher (see the module doc): (its pid, the pipe to send it the cgroup's
    directories on), or (0, -1) when it cannot be forked (the agent's sweep still logs)."""
    try:
        ready, go = os.pipe()
        watcher = os.fork()
    except OSError:
        return 0, -1
    if watcher != 0:
        os.close(ready)
        return watcher, go
    os.close(go)
    code = 0
    try:
        os.setsid()  # not in the worker's process group: a signal to it is not one to us
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        with os.fdopen(ready, "rb") as fh:
            dirs = [Path(d) for d in fh.read().decode().split("\0") if d]
        if dirs:  # else cgexec failed: no worker to watch
            _watch(pid, Cgroup(0, dirs), memory_bytes)
    except BaseException:  # a forked child must never return into main
        code = 1
    finally:
        os._exit(code)


def _watch(pid: int, group: Cgroup, memory_bytes: int) -> None:
    where = _ray_worker_args(pid)
    _wait_for_exit(pid)
    if not group.oom_killed():
        return
    line = oom_message(memory_bytes, str(group.dirs[-1]))
    log = _stderr_log(where, pid)
    if log is None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        return
    with log.open("a", encoding="utf-8") as fh:
        fh.write(line + "\n")
    setup = _setup_log(log)
    if setup is not None:
        import logging

        when = logging.Formatter().formatTime(logging.makeLogRecord({}))  # `%(asctime)s`
        with setup.open("a", encoding="utf-8") as fh:  # Ray's LOGGER_FORMAT
            fh.write(f"{when}\tWARNING cgexec.py -- {line}\n")


def _ray_worker_args(pid: int) -> dict[str, str]:
    """`--temp-dir`, `--session-name`, `--worker-id` of the Ray worker `pid` will exec (read
    from `bash -c`'s command line while it lives)."""
    import shlex

    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        words = [w for arg in argv for w in shlex.split(arg)]
    except (OSError, ValueError):
        return {}
    return {k: v for k, _, v in (w.partition("=") for w in words)
            if k in ("--temp-dir", "--session-name", "--worker-id") and v}


def _stderr_log(args: dict[str, str], pid: int) -> Path | None:
    if "--temp-dir" not in args or "--session-name" not in args:
        return None
    logs = Path(args["--temp-dir"]) / args["--session-name"] / "logs"
    found = sorted(logs.glob(f"worker-{args.get('--worker-id', '*')}-*{pid}.err"))
    return next((p for p in found if p.name.endswith(f"-{pid}.err")), None)


def _setup_log(stderr_log: Path) -> Path | None:
    """`runtime_env_setup-<job id>.log` beside `worker-<worker id>-<job id>-<pid>.err` (a
    worker started before it had a job has no job id in its name: None)."""
    parts = stderr_log.name.removesuffix(".err").split("-")
    if len(parts) != 4:  # noqa: PLR2004 - worker, worker id, job id, pid
        return None
    return stderr_log.with_name(f"runtime_env_setup-{parts[2]}.log")


def _wait_for_exit(pid: int) -> None:
    """Until `pid` (not our child) has exited: a pidfd turns readable then (Linux 5.3); where
    there is none, poll."""
    import select
    import time

    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            except PermissionError:
                pass
            time.sleep(0.2)
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


if __name__ == "__main__":
    sys.exit(main())
