"""The worker's side of `rtenv.limits`: `python -m rtenv_cli.core.rayplugin.cgexec --pid PID
[--memory BYTES] [--cpus N]` makes the cgroup `rtenv-<PID>-<random>` (core/store/cgroups.py, v2 or
v1) under the cgroup it lives in, sets the limits and moves PID into it, then exits.

The plugin puts it in the worker's `command_prefix` with `--pid $$`: Ray runs the prefix and the
worker in one `bash -c`, which then `exec`s the worker, so the worker keeps PID and the cgroup. A
failure exits 1 with its reason on stderr (the worker's log); the `&&` after it keeps the worker
from starting without its limits. Nothing here stays behind to remove the cgroup: the agent sweeps
empty `rtenv-<pid>-*` cgroups whose pid is gone (rayplugin/limits.py).
"""

from __future__ import annotations

import argparse
import secrets
import sys


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
    return 0


if __name__ == "__main__":
    sys.exit(main())
