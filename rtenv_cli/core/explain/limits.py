"""What `rtenv.limits` does to a worker, for `rtenv explain`: the cgroup limits it runs under
(rayplugin/limits.py applies them; core/spec/limits.py reads the field)."""

from __future__ import annotations

from collections.abc import Mapping

from rtenv_cli.core.errors import RtenvError
from rtenv_cli.core.spec.model import RTENV_FIELD

SECTION = "(limits)"


def limits_notes(runtime_env: Mapping[str, object]) -> tuple[list[str], list[str]]:
    """(notes, errors) for the merged runtime_env's `rtenv.limits` (both empty without it)."""
    field = runtime_env.get(RTENV_FIELD)
    raw = field.get("limits") if isinstance(field, Mapping) else None
    if raw is None:
        return [], []
    from rtenv_cli.core.spec.limits import CPU_PERIOD_US, cpu_quota_us, parse_limits

    try:
        limits = parse_limits(raw)
    except RtenvError:  # the field's one error is rtenv_env's (the plugin's whole-field parse)
        return [], []
    written = raw if isinstance(raw, Mapping) else {}
    notes = ["rtenv.limits: the worker runs in its own cgroup rtenv-<worker pid>-<random> "
             "(v2, else v1), removed by the node's agent after the worker exits"]
    if limits.memory_bytes is not None:
        notes.append(f"memory {written.get('memory')} = {limits.memory_bytes} bytes "
                     "(memory.max / memory.limit_in_bytes, rounded down to pages): past it the "
                     "kernel OOM-kills the worker and Ray reports WorkerCrashedError")
    if limits.cpus is not None:
        notes.append(f"cpus {limits.cpus:g}: CPU quota {cpu_quota_us(limits.cpus)} us per "
                     f"{CPU_PERIOD_US} us period "
                     "(cpu.max / cpu.cfs_quota_us); Ray's num_cpus stays a scheduling count")
    return notes, []
