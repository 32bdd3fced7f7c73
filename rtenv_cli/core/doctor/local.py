"""Checks of this machine: versions, uv, NVML, cgroups, inotify and the embedded store."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from rtenv_cli.core.doctor.model import Check, fail, ok, warn
from rtenv_cli.core.units import human_bytes, human_duration

MIN_PYTHON = (3, 10)  # pyproject's requires-python
RAY_PIN = "pip install 'ray[default]==2.60.0'"
LOW_DISK_BYTES = 2 * 2**30  # below this a venv build or a package upload may not fit


def ray_series(version: str) -> str:
    """`2.60` of `2.60.0`: Ray's behaviour rtenv reproduces is a minor version's."""
    return ".".join(version.split(".")[:2])


def installed_ray() -> str | None:
    """The version of the `ray` package this Python would import (without importing it)."""
    from importlib import metadata

    try:
        return metadata.version("ray")
    except metadata.PackageNotFoundError:
        return None


def check_rtenv() -> Check:
    from rtenv_cli import __version__
    from rtenv_cli.core.spec.model import RAY_VERSION

    where = Path(__file__).resolve().parents[2]
    return ok("rtenv", f"rtenv {__version__} at {where}, reproduces Ray {RAY_VERSION}")


def check_python() -> Check:
    version = ".".join(map(str, sys.version_info[:3]))
    detail = f"Python {version} ({sys.executable})"
    if sys.version_info[:2] < MIN_PYTHON:
        need = ".".join(map(str, MIN_PYTHON))
        return fail("python", f"{detail}: rtenv needs Python {need} or newer",
                    f"install rtenv into a Python {need}+ environment")
    return ok("python", detail)


def check_ray(address_given: bool) -> Check:
    from rtenv_cli.core.spec.model import RAY_VERSION

    version = installed_ray()
    if version is None:
        detail = ("not installed here (optional: `cache --address` of a Ray cluster, `explain "
                  "--verify` and the per-node checks of `doctor --address` run through it)")
        if address_given:
            return warn("ray", detail, RAY_PIN)
        return ok("ray", detail)
    if ray_series(version) != ray_series(RAY_VERSION):
        return warn("ray", f"Ray {version} here; rtenv reproduces Ray {RAY_VERSION}, whose "
                    "runtime_env behaviour may differ from this version's", RAY_PIN)
    return ok("ray", f"Ray {version}")


def check_uv() -> Check:
    fix = "pip install uv (in rtenv's environment)"
    try:
        from rtenv_cli.core.store.builders import uv_bin

        binary = uv_bin()
    except Exception as exc:  # AgentError, or find_uv_bin's FileNotFoundError
        return fail("uv", f"uv not found ({exc}): `rtenv run` and `rtenv agent` build "
                    "environments with it", fix)
    try:
        proc = subprocess.run([binary, "--version"], capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return fail("uv", f"{binary} does not run: {exc}", fix)
    if proc.returncode != 0:
        return fail("uv", f"{binary} --version failed: {proc.stderr.strip()[:200]}", fix)
    return ok("uv", f"{proc.stdout.strip()} ({binary})")


def check_gpus(pynvml: object = None) -> list[Check]:
    """NVML and its GPUs (index, UUID, MIG instances), through the one NVML module."""
    from rtenv_cli.core.explain.nvml import read_gpus

    report = read_gpus(pynvml)
    if not report.available:
        reason = report.reason or "NVML unavailable"
        if reason.startswith("no NVIDIA driver"):
            return [ok("nvml", f"{reason}: no GPU map in `rtenv explain`")]
        fix = ("pip install nvidia-ml-py" if "not installed" in reason
               else "check the NVIDIA driver (`nvidia-smi`)")
        return [warn("nvml", f"{reason}: `rtenv explain` shows no GPU map", fix)]
    checks = [ok("nvml", f"NVIDIA driver {report.driver}, {len(report.gpus)} GPU(s)")]
    for gpu in report.gpus:
        if gpu.mig_enabled:
            mig = f"MIG on, {len(gpu.mig)} instance(s)" + (
                ": " + ", ".join(m.uuid for m in gpu.mig) if gpu.mig else "")
        else:
            mig = "MIG n/a" if gpu.mig_enabled is None else "MIG off"
        checks.append(ok(f"gpu {gpu.nvml_index}", f"{gpu.name} {gpu.uuid} ({gpu.pci_bus_id}), "
                         f"{mig}"))
    return checks


def _mounts(mountinfo: str) -> list[tuple[str, str]]:
    """(mount point, filesystem type) of each line of /proc/self/mountinfo."""
    out = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if sep and len(fields) > 4 and right.split():  # noqa: PLR2004 - mountinfo's 5th field
            out.append((fields[4].replace("\\040", " "), right.split()[0]))
    return out


def cgroup_roots(mountinfo: str | None = None) -> dict[int, Path | None]:
    """Where each cgroup version is mounted: v1's controllers' parent, v2's mount point."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            mountinfo = ""
    v1 = [Path(point) for point, fs in _mounts(mountinfo) if fs == "cgroup"]
    v2 = [Path(point) for point, fs in _mounts(mountinfo) if fs == "cgroup2"]
    v1_root = next((p.parent for p in v1 if p.name in ("cpu", "memory") or
                    "memory" in p.name.split(",")), v1[0].parent if v1 else None)
    return {1: v1_root, 2: v2[0] if v2 else None}


def _probe_cgroup(root: Path) -> str | None:
    """None when a child cgroup with a cpu and a memory limit can be made (and removed) under
    ROOT, as `rtenv run --num-cpus --memory` makes one; else why not."""
    from rtenv_cli.core.errors import RtenvError
    from rtenv_cli.core.store.cgroups import Cgroups, Limits

    try:
        group = Cgroups(root).create(Limits(cpus=1.0, memory_bytes=2**40))
    except RtenvError as exc:
        return exc.message
    except OSError as exc:  # a controller file refused the write
        return f"cannot write under {root}: {exc.strerror or exc}"
    group.remove()
    return None


def check_cgroups(default_root: Path = Path("/sys/fs/cgroup"),
                  roots: Mapping[int, Path | None] | None = None) -> list[Check]:
    """cgroup v1 and v2: mounted, and writable (a child with cpu and memory limits)."""
    from rtenv_cli.core.store.cgroups import Cgroups

    roots = cgroup_roots() if roots is None else roots
    used = Cgroups(default_root).version()  # the hierarchy `rtenv run` uses
    fix = ("run as root, or in a cgroup delegated to you (e.g. `systemd-run --user --scope -p "
           "Delegate=yes rtenv run ...`)")
    checks = []
    for version in (1, 2):
        name = f"cgroup v{version}"
        root = roots.get(version)
        if root is None:
            checks.append(ok(name, "not mounted" + (f" (rtenv uses v{used} here)" if used
                                                    and used != version else "")))
            continue
        why = _probe_cgroup(root)
        if why is None:
            checks.append(ok(name, f"writable at {root}: `rtenv run --num-cpus/--memory` "
                             "applies limits" if used == version else f"writable at {root}"))
        elif used == version:
            checks.append(warn(name, f"not writable ({why}): `rtenv run --num-cpus/--memory` "
                               "runs without limits", fix))
        else:
            checks.append(ok(name, f"mounted at {root}, not writable ({why}); rtenv uses "
                             f"v{used} here" if used else f"mounted at {root}, not writable "
                             f"({why})"))
    return checks


def _inotify_in_use(uid: int) -> int:
    """inotify watches held by this user's processes (those whose fds we can read)."""
    used = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:inotify":
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii", errors="replace") as fh:
                    used += sum(1 for line in fh if line.startswith("inotify wd:"))
            except OSError:
                continue
    return used


def count_dirs(roots: Sequence[Path]) -> int:
    """Directories a recursive inotify watch of ROOTS takes (one watch each, ignored ones
    included: watchdog watches the whole tree; a file source is watched by its directory)."""
    total = 0
    for root in roots:
        if not root.is_dir():
            total += 1
            continue
        for _dir, dirs, _files in os.walk(root):
            total += 1
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(_dir, d))]
    return total


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def check_inotify(sources: Sequence[Path] | None, label: str | None = None) -> Check:
    """inotify's per-user watch limit against what `push --watch` of SOURCES needs."""
    from rtenv_cli.core.watch.events import WATCHES_SYSCTL

    limit = _read_int("/proc/sys/fs/inotify/max_user_watches")
    instances = _read_int("/proc/sys/fs/inotify/max_user_instances")
    if limit is None:
        return ok("inotify", "no inotify here: `push --watch` uses the platform's file events")
    in_use = _inotify_in_use(os.getuid())
    left = max(0, limit - in_use)
    shown = f"{left:,} of {limit:,} watches free ({in_use:,} in use by your processes), " \
            f"{instances} instances"
    if not sources:
        return ok("inotify", f"{shown}; give a runtime_env to compare with its working_dir")
    need = count_dirs(sources)
    what = f"`push --watch {label}` needs {need:,} (one per directory)" if label else \
        f"`push --watch` needs {need:,} (one per directory)"
    if need > left:
        return warn("inotify", f"{shown}: {what}; it would fall back to polling",
                    f"sudo sysctl {WATCHES_SYSCTL}={max(524288, 2 * (need + in_use))} (persist "
                    "it in /etc/sysctl.d/)")
    return ok("inotify", f"{shown}; {what}")


def watched_sources(path: Path | None, cwd: Path | None = None) -> tuple[list[Path], str | None]:
    """The sources `push --watch PATH` watches: PATH's working_dir and py_modules (a directory
    is the working_dir); without PATH, those of ./runtime_env.yaml when there is one."""
    from rtenv_cli.core.push import load_input, package_runtime_env
    from rtenv_cli.core.spec.locate import default_file

    cwd = Path.cwd() if cwd is None else cwd
    if path is None:
        path = default_file(cwd)
        if path is None:
            return [], None
    data, base, label = load_input(path, cwd)
    return [plan.source for plan in package_runtime_env(data, base)], label


def _budget_text(budget: object) -> str:
    max_bytes = getattr(budget, "max_bytes", None)
    max_age = getattr(budget, "max_age_s", None)
    parts = []
    if max_bytes is not None:
        parts.append(f"max-size {human_bytes(max_bytes)}")
    if max_age is not None:
        parts.append(f"max-age {human_duration(max_age)}")
    return ", ".join(parts)


def check_store() -> list[Check]:
    """The embedded store: where, how big, its budget (`[agent]` in the config), free disk."""
    from rtenv_cli.core.errors import RtenvError
    from rtenv_cli.core.paths import store_root

    try:
        root = store_root()  # the home is made (0700) and checked: this user's alone
        from rtenv_cli.core.run import embedded_budget

        budget = embedded_budget()
    except RtenvError as exc:
        return [fail("store", f"{exc.message}", exc.hint)]
    budget_text = (f"budget {_budget_text(budget)}" if budget is not None else
                   "no budget (set max-size under [agent] in rtenv.toml to bound it)")
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        return [fail("store", f"{root} is not writable: `rtenv run` and `rtenv push` (no "
                     "address) keep packages and environments there",
                     "set RTENV_HOME to a writable directory")]
    checks = []
    if not root.exists():
        checks.append(ok("store", f"not created yet ({root}); {budget_text}"))
    else:
        from rtenv_cli.core.cache.backends import LocalBackend

        totals = LocalBackend().listing().totals
        size = int(totals["size_bytes"]) + int(totals.get("uv_cache_bytes") or 0)
        detail = (f"{human_bytes(size)} in {totals['count']} entries (uv cache included) at "
                  f"{root}; {budget_text}")
        max_bytes = getattr(budget, "max_bytes", None)
        if max_bytes is not None and totals["size_bytes"] > max_bytes:
            checks.append(warn("store", f"{detail}: over its max-size",
                               "rtenv cache gc --keep-storage "
                               + human_bytes(max_bytes).replace(" ", "")))
        else:
            checks.append(ok("store", detail))
    free = shutil.disk_usage(probe).free
    if free < LOW_DISK_BYTES:
        checks.append(warn("disk", f"{human_bytes(free)} free on the store's filesystem "
                           f"({probe})", "rtenv cache gc, or set RTENV_HOME on a larger disk"))
    else:
        checks.append(ok("disk", f"{human_bytes(free)} free on the store's filesystem"))
    return checks
