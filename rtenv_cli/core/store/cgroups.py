"""Per-process resource limits through a child cgroup (cgroupfs, as Ray's cgroup RFC designs it).

v2 (unified): one directory with `cpu.max` ("<quota> <period>") and `memory.max`, after enabling
the controllers in the parent's `cgroup.subtree_control`. v1: one directory per controller with
`cpu.cfs_quota_us`/`cpu.cfs_period_us` and `memory.limit_in_bytes`. The child cgroup is made under
the cgroup this process already lives in (`/proc/self/cgroup`), so a container or a systemd
slice keeps its own limits above ours. The process joins it before exec; the directory is removed
when the process ends (processes left behind are moved to the parent first).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rtenv_cli.core.errors import OperationError
from rtenv_cli.core.spec.limits import CPU_PERIOD_US, cpu_quota_us


class CgroupUnavailable(OperationError):
    kind = "cgroup-unavailable"


@dataclass(frozen=True)
class Limits:
    cpus: float | None = None
    memory_bytes: int | None = None

    def __bool__(self) -> bool:
        return self.cpus is not None or self.memory_bytes is not None


@dataclass
class Cgroup:
    """A created child cgroup: one dir (v2) or one per controller (v1)."""

    version: int
    dirs: list[Path] = field(default_factory=list)

    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in self.dirs]

    def join(self, pid: int | None = None) -> None:
        """Move `pid` (default: the calling process; use in preexec_fn) into the cgroup."""
        for procs in self.procs_files():
            procs.write_text(f"{pid or os.getpid()}\n")

    def read_limits(self) -> dict[str, str]:
        out = {}
        for d in self.dirs:
            for name in ("cpu.max", "memory.max", "cpu.cfs_quota_us", "cpu.cfs_period_us",
                         "memory.limit_in_bytes"):
                if (d / name).exists():
                    out[name] = (d / name).read_text().strip()
        return out

    def oom_killed(self) -> bool:
        for d in self.dirs:
            for name, key in (("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")):
                with contextlib.suppress(OSError):
                    for line in (d / name).read_text().splitlines():
                        parts = line.split()
                        if len(parts) == 2 and parts[0] == key and int(parts[1]) > 0:  # noqa: PLR2004 - "key value"
                            return True
        return False

    def remove(self) -> None:
        for d in self.dirs:
            with contextlib.suppress(OSError):
                leftovers = [p for p in (d / "cgroup.procs").read_text().split() if p]
                for pid in leftovers:
                    with contextlib.suppress(OSError):
                        (d.parent / "cgroup.procs").write_text(pid + "\n")
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno != errno.ENOENT and d.is_dir() and not any(
                        p.is_dir() for p in d.iterdir()):
                    # a fake cgroupfs (tests) holds regular files; the kernel's never does
                    import shutil

                    shutil.rmtree(d, ignore_errors=True)


def _own_paths(proc_cgroup: str) -> tuple[str | None, dict[str, str]]:
    """(v2 path, {v1 controller: path}) from /proc/<pid>/cgroup text."""
    v2, v1 = None, {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:  # noqa: PLR2004 - "id:controllers:path"
            continue
        _hid, controllers, path = parts
        if controllers == "":
            v2 = path
        for c in controllers.split(","):
            if c:
                v1[c] = path
    return v2, v1


def _alive(pid: int) -> bool:
    """Whether `pid` still runs (another user's process counts as running; a zombie does not:
    an orphaned watcher waits for a PID 1 that may never reap it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


class Cgroups:
    """Creates child cgroups under `root` (default /sys/fs/cgroup)."""

    def __init__(self, root: Path | str = "/sys/fs/cgroup", proc_cgroup: str | None = None) -> None:
        self.root = Path(root)
        if proc_cgroup is None:
            try:
                proc_cgroup = Path("/proc/self/cgroup").read_text()
            except OSError:
                proc_cgroup = ""
        self.v2_path, self.v1_paths = _own_paths(proc_cgroup)

    def version(self) -> int | None:
        if (self.root / "cgroup.controllers").exists():
            return 2
        if (self.root / "memory").is_dir() or (self.root / "cpu").is_dir():
            return 1
        return None

    def create(self, limits: Limits, name: str | None = None, *, sweep: bool = True) -> Cgroup:
        """A child cgroup with `limits`; `sweep` first removes those dead rtenv processes left
        (False: someone else sweeps, and reports what it finds)."""
        name = name or f"rtenv-{os.getpid()}-{secrets.token_hex(3)}"
        version = self.version()
        try:
            if version == 2:  # noqa: PLR2004 - cgroup v2
                return self._create_v2(limits, name, sweep)
            if version == 1:
                return self._create_v1(limits, name, sweep)
        except OSError as exc:
            raise CgroupUnavailable(f"cannot create a cgroup under {self.root}: {exc.strerror}",
                                    hint="run as root or with a delegated cgroup; the command "
                                    "runs without limits") from exc
        raise CgroupUnavailable(f"no cgroup filesystem at {self.root}")

    def parents(self) -> list[Path]:
        """Where `create` makes its children: the cgroup(s) this process lives in."""
        if self.version() == 2:  # noqa: PLR2004 - cgroup v2
            return [self.root / (self.v2_path or "/").lstrip("/")]
        return [self.root / c / self.v1_paths.get(c, "/").lstrip("/") for c in ("cpu", "memory")
                if (self.root / c).is_dir()]

    def sweep_all(self, report: Callable[[Path], None] | None = None) -> int:
        """`sweep` every parent of `parents()`."""
        return sum(self.sweep(parent, report) for parent in self.parents())

    @staticmethod
    def sweep(parent: Path, report: Callable[[Path], None] | None = None) -> int:
        """Remove child cgroups left by rtenv processes that died without cleaning up (SIGKILL):
        `rtenv-<pid>-<random>[-w<watcher pid>]` whose pids are gone and which hold no process
        (a watcher reads the OOM count once its worker exits: rayplugin/cgexec.py).
        `report(dir)` is called before each removal (e.g. to read its OOM counter)."""
        removed = 0
        if not parent.is_dir():
            return 0
        for child in parent.iterdir():
            parts = child.name.split("-")
            if len(parts) < 3 or parts[0] != "rtenv" or not parts[1].isdigit():  # noqa: PLR2004 - rtenv-pid-rand
                continue
            owners = [parts[1]] + [p[1:] for p in parts[3:4] if p[:1] == "w" and p[1:].isdigit()]
            if any(_alive(int(pid)) for pid in owners):
                continue
            with contextlib.suppress(OSError):
                if (child / "cgroup.procs").read_text().split():
                    continue
                if report is not None:
                    report(child)
                Cgroup(0, [child]).remove()
                removed += 1
        return removed

    def _create_v2(self, limits: Limits, name: str, sweep: bool) -> Cgroup:
        parent = self.root / (self.v2_path or "/").lstrip("/")
        if sweep:
            self.sweep(parent)
        available = set((self.root / "cgroup.controllers").read_text().split())
        wanted = {"cpu"} if limits.cpus is not None else set()
        wanted |= {"memory"} if limits.memory_bytes is not None else set()
        if not wanted <= available:
            missing = ", ".join(sorted(wanted - available))
            raise CgroupUnavailable(f"cgroup v2 controllers {missing} are not available at "
                                    f"{self.root}")
        control = parent / "cgroup.subtree_control"
        enabled = set(control.read_text().split()) if control.exists() else set()
        if not wanted <= enabled:
            control.write_text(" ".join(f"+{c}" for c in sorted(wanted - enabled)) + "\n")
        group = Cgroup(2, [parent / name])
        (parent / name).mkdir()
        try:
            if limits.cpus is not None:
                quota = cpu_quota_us(limits.cpus)
                (parent / name / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}\n")
            if limits.memory_bytes is not None:
                (parent / name / "memory.max").write_text(f"{limits.memory_bytes}\n")
        except OSError:
            group.remove()
            raise
        return group

    def _create_v1(self, limits: Limits, name: str, sweep: bool) -> Cgroup:
        group = Cgroup(1)
        plan = []
        if limits.cpus is not None:
            quota = cpu_quota_us(limits.cpus)
            plan.append(("cpu", [("cpu.cfs_period_us", CPU_PERIOD_US),
                                 ("cpu.cfs_quota_us", quota)]))
        if limits.memory_bytes is not None:
            plan.append(("memory", [("memory.limit_in_bytes", limits.memory_bytes)]))
        try:
            for controller, settings in plan:
                base = self.root / controller
                if not base.is_dir():
                    raise CgroupUnavailable(f"cgroup v1 controller {controller} is not mounted "
                                            f"at {base}")
                own = self.v1_paths.get(controller, "/")
                if sweep:
                    self.sweep(base / own.lstrip("/"))
                path = base / own.lstrip("/") / name
                path.mkdir()
                group.dirs.append(path)
                for fname, value in settings:
                    (path / fname).write_text(f"{value}\n")
        except BaseException:
            group.remove()
            raise
        return group
