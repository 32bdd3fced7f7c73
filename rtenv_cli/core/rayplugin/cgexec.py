"""The worker's side of `rtenv.limits`: `python -m rtenv_cli.core.rayplugin.cgexec --pid PID
[--memory BYTES] [--cpus N]` makes the cgroup `rtenv-<PID>-<random>` (core/store/cgroups.py, v2 or
v1) under the cgroup it lives in, sets the limits and moves PID into it, then exits.

The plugin puts it in the worker's `command_prefix` with `--pid $$`: Ray runs the prefix and the
worker in one `bash -c`, which then `exec`s the worker, so the worker keeps PID and the cgroup. A
failure exits 1 with its reason on stderr (the worker's log); the `&&` after it keeps the worker
from starting without its limits. Nothing here stays behind to remove the cgroup: the agent sweeps
empty `rtenv-<pid>-*` cgroups whose pid is gone (rayplugin/limits.py).

With a memory limit, a watcher stays behind instead (forked, in the parent cgroup, its own
session): when the worker exits it reads the cgroup's OOM-kill count and, if the kernel killed
anything for the limit, says so in the worker's stderr log, `<temp-dir>/<session-name>/logs/
worker-<worker-id>-[<job id>-]<pid>.err` (Ray's names; the core worker points its stderr there
after the exec, so the watcher finds it from the worker's own arguments: `bash -c` holds them).
Ray's log monitor streams that file to the driver: the user sees why the worker died where Ray
says only "The worker died unexpectedly" (the agent's sweep logs it too, but on whichever node's
agent sweeps first). Without such a file (not a Ray worker) the line goes to the inherited
stderr. The watcher is this process forked (no new interpreter) and waits on a pidfd.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rtenv-cgexec")
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--memory", type=int)
    parser.add_argument("--cpus", type=float)
    args = parser.parse_args(argv)
    from rtenv_cli.core.errors import RtenvError
    from rtenv_cli.core.store.cgroups import Cgroups, Limits

    try:
        group = Cgroups().create(Limits(cpus=args.cpus, memory_bytes=args.memory),
                                 name=f"rtenv-{args.pid}-{secrets.token_hex(3)}",
                                 sweep=False)  # the agent sweeps, and reports OOM kills
    except RtenvError as exc:
        print(f"rtenv: cannot limit worker {args.pid}: {exc.message}", file=sys.stderr)
        return 1
    try:
        group.join(args.pid)
    except OSError as exc:
        group.remove()
        print(f"rtenv: cannot move worker {args.pid} into {group.dirs}: {exc}", file=sys.stderr)
        return 1
    if args.memory is not None:
        _watch(args.pid, group, args.memory)
    return 0


def oom_message(memory_bytes: int, group: str) -> str:
    """What the worker's log says when its memory limit killed it."""
    return (f"rtenv: this worker was OOM-killed: it went past its rtenv.limits memory of "
            f"{memory_bytes / 2**20:g} MiB ({memory_bytes} bytes, cgroup {group}); raise "
            "`rtenv.limits.memory` in the runtime_env, or use less memory")


def _watch(pid: int, group: Any, memory_bytes: int) -> None:
    """Fork the watcher (see the module doc); the caller returns at once either way."""
    try:
        if os.fork() != 0:
            return
    except OSError:
        return  # no watcher: the agent's sweep still logs the OOM kill
    code = 0
    try:
        os.setsid()  # not in the worker's process group: a signal to it is not one to us
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        where = _ray_worker_args(pid)
        _wait_for_exit(pid)
        if group.oom_killed():
            line = oom_message(memory_bytes, str(group.dirs[-1])) + "\n"
            log = _stderr_log(where, pid)
            if log is None:
                sys.stderr.write(line)
                sys.stderr.flush()
            else:
                with log.open("a", encoding="utf-8") as fh:
                    fh.write(line)
    except BaseException:  # a forked child must never return into main
        code = 1
    finally:
        os._exit(code)


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
