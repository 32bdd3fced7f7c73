"""`rtenv.limits` in Ray's agent: the worker's command prefix, the check that cgroups are
writable here, and the clean-up of the cgroups of workers that have exited.

Each worker of an environment with limits runs `cgexec` (its `command_prefix`) and is then
exec'd inside its own cgroup `rtenv-<worker pid>-<random>`. Nobody is left in the worker to remove
it, and Ray tells plugins nothing when a worker exits, so the agent does: while any worker with
limits may live, a thread sweeps every second the empty `rtenv-<pid>-*` cgroups whose pid is gone
(`Cgroups.sweep_all`); `delete_uri` and each setup sweep too.

An OOM kill is told by cgexec's watcher, in the worker's stderr log and the job's
runtime_env_setup log (rayplugin/cgexec.py): it knows the worker and its job. The sweep tells it
again in the agent's own log (`runtime_env_agent.err`) before the cgroup goes, for a worker
whose watcher could not be forked. It cannot use the setup's logger: Ray 2.60 gives each setup
a logger whose files are closed when the setup returns (`SetupLoggerFactory`), so a line
written later is lost. Ray itself reports the task as failed because its worker died
(`WorkerCrashedError`).
"""

from __future__ import annotations

import logging
import shlex
import sys
import threading
import time
from pathlib import Path

from rtenv_cli.core.errors import RtenvError
from rtenv_cli.core.spec.limits import LimitsField

CGEXEC = "rtenv_cli.core.rayplugin.cgexec"
SWEEP_INTERVAL_S = 1.0
IDLE_STOP_S = 300.0  # no rtenv cgroup for this long: the thread ends (the next setup restarts it)
log = logging.getLogger("rtenv.rayplugin")


def command_prefix(limits: LimitsField) -> list[str]:
    """Ray joins these words into `bash -c "... exec <worker>"`: `$$` is the worker's pid."""
    words = [shlex.quote(sys.executable), "-m", CGEXEC, "--pid", "$$"]
    if limits.memory_bytes is not None:
        words += ["--memory", str(limits.memory_bytes)]
    if limits.cpus is not None:
        words += ["--cpus", repr(limits.cpus)]
    return [*words, "&&"]


def describe(limits: LimitsField) -> str:
    parts = []
    if limits.memory_bytes is not None:
        parts.append(f"memory={limits.memory_bytes} bytes")
    if limits.cpus is not None:
        parts.append(f"cpus={limits.cpus:g}")
    return ", ".join(parts)


class Guard:
    """One per agent: checks limits can be applied on this node and sweeps after workers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._checked: set[tuple[bool, bool]] = set()

    def check(self, limits: LimitsField) -> None:
        """Make and remove a cgroup with these controllers (once per kind): a node where
        cgroups are not writable refuses the setup instead of starting unlimited workers."""
        from rtenv_cli.core.store.cgroups import Cgroups, CgroupUnavailable, Limits

        kind = (limits.memory_bytes is not None, limits.cpus is not None)
        if kind in self._checked:
            return
        try:
            group = Cgroups().create(Limits(cpus=limits.cpus, memory_bytes=limits.memory_bytes),
                                     sweep=False)
        except CgroupUnavailable as exc:
            raise CgroupUnavailable(
                f"rtenv.limits cannot be applied on this node: {exc.message}",
                hint="run `ray start` as root or in a delegated cgroup (v1 cpu/memory or v2), "
                "or drop `limits`") from exc
        group.remove()
        self._checked.add(kind)

    def watch(self) -> None:
        """Sweep (now, and every second from a thread) until no rtenv cgroup is left for a
        while."""
        self.sweep()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="rtenv-cgroup-sweeper",
                                                daemon=True)
                self._thread.start()

    def sweep(self) -> int:
        from rtenv_cli.core.store.cgroups import Cgroups

        try:
            return Cgroups().sweep_all(self._report)
        except Exception as exc:  # never let a clean-up take the agent down
            log.warning("rtenv: cgroup sweep failed: %s", exc)
            return 0

    def _run(self) -> None:
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < IDLE_STOP_S:
            time.sleep(SWEEP_INTERVAL_S)
            self.sweep()
            if _any_left():
                idle_since = time.monotonic()

    def _report(self, group: Path) -> None:
        from rtenv_cli.core.store.cgroups import Cgroup

        if not Cgroup(0, [group]).oom_killed():
            return
        limit = next((read for name in ("memory.max", "memory.limit_in_bytes")
                      if (read := _read(group / name))), "?")
        pid = group.name.split("-")[1]
        log.warning("rtenv: worker pid %s was OOM-killed: it went past its rtenv.limits memory "
                    "of %s bytes (cgroup %s)", pid, limit, group)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _any_left() -> bool:
    from rtenv_cli.core.store.cgroups import Cgroups

    try:
        return any(p.name.startswith("rtenv-") for parent in Cgroups().parents()
                   for p in parent.iterdir())
    except (OSError, RtenvError):
        return False
