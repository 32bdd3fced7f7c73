"""The resident rtenv (`rtenv daemon`): a per-user fork server that runs commands with their
imports already done.

A whole `rtenv push` process spends more time starting (the interpreter, typer, the push path's
modules: some 0.12 s here) than pushing a one-file edit (benchmarks/results/trees.json: "floor
of a whole process"). `rtenv daemon start` starts one server per user and RTENV_HOME that has
imported all of that once; `rtenv push` then only connects to it, hands over its command line,
working directory, environment, umask and standard streams (the descriptors themselves,
SCM_RIGHTS), and the server forks a child that becomes that command: its output goes to the
caller's terminal or pipe, its exit code is the caller's, a Ctrl-C is forwarded. The same
click command runs in both cases; only the process that runs it differs.

Trust: the socket is in RTENV_HOME/run (a private directory, `paths.private_dir`), made 0600;
each side checks the other's uid (SO_PEERCRED) before anything is sent, since the request
carries the caller's environment (tokens). A server whose code or interpreter differs from the
caller's (an upgrade, an edit, another venv or PYTHONPATH) answers `stale`: the caller runs the
command itself and the stale server exits. Anything that fails before the child has started
the command (no server, a refused connection, a full server) falls back the same way, quietly:
the daemon is a speed-up, never a requirement.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing's import would cost every `rtenv` process some ms
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

# The commands the daemon runs: short ones whose start-up is most of their time. `push --watch`
# and `--once` stay in the caller's process (see `wanted`).
RESIDENT_COMMANDS = frozenset({"push"})
DAEMON_ENV = "RTENV_DAEMON"  # 0: never use a running daemon
SOCKET_NAME = "daemon.sock"
LOCK_NAME = "daemon.lock"  # held by the serving daemon, which writes its pid in it
# AF_UNIX paths are at most 107 bytes on Linux (sun_path is 108, with the NUL)
MAX_SOCKET_PATH = 107


def wanted(argv: list[str]) -> bool:
    """Whether ARGV is a command the daemon may run (a push that is not a watch)."""
    if os.environ.get(DAEMON_ENV) == "0" or not argv or argv[0] not in RESIDENT_COMMANDS:
        return False
    return not any(arg in ("--watch", "--once") or (arg[:1] == "-" and arg[:2] != "--"
                                                     and "w" in arg)  # -w, -vw
                   for arg in argv[1:])


def run_dir() -> Path:
    """RTENV_HOME/run: where the socket, its lock and the server's log live (private)."""
    from rtenv_cli.core.paths import private_dir, rtenv_home

    return private_dir(rtenv_home() / "run", "rtenv's run directory")


def socket_path() -> Path:
    return run_dir() / SOCKET_NAME


def bindable_socket() -> Path:
    """`socket_path`, or a UsageError when it is too long for AF_UNIX."""
    path = socket_path()
    if len(str(path).encode()) > MAX_SOCKET_PATH:
        from rtenv_cli.core.errors import UsageError

        raise UsageError(f"the daemon's socket path {path} is longer than {MAX_SOCKET_PATH} "
                         "bytes (AF_UNIX's limit)", path=str(path),
                         hint="set RTENV_HOME to a shorter directory")
    return path


def existing_socket() -> str | None:
    """The daemon's socket when there is one (nothing made: no daemon, no new directory). Not
    checked with `private_dir` (which needs pathlib, before the CLI would import it): what the
    client trusts is the peer, whose uid it checks on the connection (SO_PEERCRED), wherever
    the socket is."""
    from rtenv_cli.core.paths import home_location

    path = os.path.join(home_location()[0], "run", SOCKET_NAME)
    return path if served(path) else None


def served(path: str) -> bool:
    """Whether a client may try the socket PATH: it exists and AF_UNIX can name it."""
    return len(path.encode()) <= MAX_SOCKET_PATH and os.path.exists(path)


def fingerprint() -> str:
    """What makes a server's loaded code and standing the caller's: the interpreter, the
    import path (less its first entry, the caller's script or cwd), each rtenv_cli source
    file's size and mtime, the mtime of each site-packages directory on it (an install or an
    upgrade changes it; other directories, a checkout's root, change with every save), and
    the process's groups, namespaces and cgroup (a command runs with the daemon's: only where
    they are the caller's)."""
    import rtenv_cli

    parts: list[Any] = [sys.executable, sys.version, rtenv_cli.__version__, sys.path[1:],
                        os.getegid(), sorted(os.getgroups())]
    for entry in sys.path[1:]:
        if os.path.basename(entry) in ("site-packages", "dist-packages"):
            try:
                parts.append(os.stat(entry).st_mtime_ns)
            except OSError:
                parts.append(None)
    for ns in ("mnt", "net", "pid", "user", "ipc", "uts"):
        try:
            parts.append(os.stat(f"/proc/self/ns/{ns}").st_ino)
        except OSError:
            parts.append(None)
    try:
        with open("/proc/self/cgroup", "rb") as fh:
            parts.append(fh.read(4096))
    except OSError:
        parts.append(None)
    root = os.path.dirname(rtenv_cli.__file__)
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                st = os.stat(os.path.join(top, name))
                parts.append((os.path.relpath(os.path.join(top, name), root), st.st_size,
                              st.st_mtime_ns))
    return repr(parts)  # compared whole: a hash would cost hashlib's import in every process
