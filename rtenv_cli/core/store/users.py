"""Which of rtenv's directories live processes on this machine use: the one answer behind the
Ray plugin's leases (rayplugin/engine.py renews its store reference, and keeps a tree's `r:`
key, only while a process uses them) and behind a Ray node's gc (cache/ray_store.py pins what
is in use).

Ray's worker titles itself (`ray::IDLE`, `ray::Actor`), so its command line says nothing, and
a venv's `bin/python` is a link to the base interpreter, so neither does `/proc/<pid>/exe`. What
is left is what the plugin's `modify_context` gave the worker and the kernel keeps: its
environment (`VIRTUAL_ENV` from the venv's `activate`, `PYTHONPATH` with the trees) and its
working directory (the `cd` into a working_dir's tree). Processes of other users cannot be read
and are not this node's Ray workers.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable

ENV_NAMES = (b"VIRTUAL_ENV", b"PYTHONPATH")


def _process_paths(pid: str, proc: str) -> list[str]:
    """The directories process `pid` uses: its cwd, VIRTUAL_ENV and PYTHONPATH entries."""
    out: list[str] = []
    with contextlib.suppress(OSError):  # gone meanwhile, or another user's
        out.append(os.readlink(f"{proc}/{pid}/cwd"))
    try:
        with open(f"{proc}/{pid}/environ", "rb") as fh:
            environ = fh.read(1 << 20)  # bounded: an environment is far smaller
    except OSError:
        return out
    for item in environ.split(b"\0"):
        name, _, value = item.partition(b"=")
        if name in ENV_NAMES and value:
            out += [p for p in os.fsdecode(value).split(os.pathsep) if p]
    return out


def in_use(paths: Iterable[str], proc: str = "/proc") -> set[str]:
    """The directories of `paths` that a live process has as its cwd, VIRTUAL_ENV or a
    PYTHONPATH entry (the directory itself or beneath it)."""
    wanted = {os.path.normpath(p) for p in paths}
    if not wanted:
        return set()
    used: set[str] = set()
    me = str(os.getpid())
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit() and p != me]
    except OSError:
        return used
    for pid in pids:
        for seen in _process_paths(pid, proc):
            path = os.path.normpath(seen)
            while True:  # the path and each of its parents
                if path in wanted:
                    used.add(path)
                parent = os.path.dirname(path)
                if parent == path:
                    break
                path = parent
        if used == wanted:
            break
    return used
