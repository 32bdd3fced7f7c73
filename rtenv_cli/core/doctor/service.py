"""`run_doctor`: every check, in the order `rtenv doctor` lists them."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rtenv_cli.core.doctor import local
from rtenv_cli.core.doctor.model import Check, DoctorReport, fail


def run_doctor(*, address: str | None = None, path: Path | None = None,
               env: Mapping[str, str] | None = None, cwd: Path | None = None,
               scan: Callable[[str], Any] | None = None) -> DoctorReport:
    """This machine's checks; with ADDRESS, the cluster's, agent's or directory's too; with
    PATH (a runtime_env or a directory; default ./runtime_env.yaml when there is one), the inotify
    limit against the directories `push --watch` of it would watch. SCAN lists Ray nodes (see
    cluster.check_address)."""
    from rtenv_cli.core.errors import RtenvError

    env = os.environ if env is None else env
    checks: list[Check] = [local.check_rtenv(), local.check_python(),
                           local.check_ray(address_given=bool(address)), local.check_uv()]
    checks += local.check_gpus()
    checks += local.check_cgroups()
    try:
        sources, label = local.watched_sources(path, cwd)
        checks.append(local.check_inotify(sources, label))
    except RtenvError as exc:
        checks.append(fail("inotify", f"cannot read {path or 'runtime_env.yaml'}: {exc.message}",
                           exc.hint))
    checks += local.check_store()
    if address:
        from rtenv_cli.core.doctor.cluster import check_address

        checks += check_address(address, env, scan)
    return DoctorReport(tuple(checks))
