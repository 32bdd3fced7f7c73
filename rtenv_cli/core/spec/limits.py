"""`rtenv.limits` in a runtime_env: per-worker resource limits, `{"memory": "4GB", "cpus": 2}`.

`memory` is read as `rtenv run --memory` reads it (core/units.parse_memory: `4GB`, `512Mi`, a
number of bytes of at least 1 MiB); `cpus` is a number of CPUs of at least MIN_CPUS (a CFS quota,
`2` is two CPUs' worth of time per period). The rayplugin applies them with a cgroup per worker;
`rtenv explain` shows them. Both read the field through `parse_limits`; `rtenv run --num-cpus`
keeps to the same floor.

The floor, 0.1 CPU: the kernel takes a quota down to 1 ms per 100 ms period (0.01 CPU), but a Ray
worker spends a second or two of CPU importing Ray before it runs anything: at 0.01 CPU that is
minutes, and the task looks hung (red team 2: `cpus: 1e-9` never started in 120 s). At 0.1 it
starts in well under a minute.

Limits contain mistakes, not attackers: the worker runs as the raylet's user and can move itself
out of its cgroup (see SECURITY.md).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass

from rtenv_cli.core.errors import RtenvError, ValidationError
from rtenv_cli.core.units import parse_memory

KEYS = ("memory", "cpus")
CPU_PERIOD_US = 100_000
MIN_CPUS = 0.1  # see the module doc
CPUS_FLOOR_HINT = (f"give at least {MIN_CPUS} CPU: a worker needs a second or two of CPU to "
                   "start, which a smaller quota stretches into minutes")
WHERE = "runtime_env['rtenv']['limits']"


@dataclass(frozen=True)
class LimitsField:
    memory_bytes: int | None = None
    cpus: float | None = None


def cpu_quota_us(cpus: float) -> int:
    """The CFS quota per CPU_PERIOD_US for `cpus` CPUs (cgroup v2 `cpu.max`, v1
    `cpu.cfs_quota_us`); 1 ms at least, the kernel's minimum."""
    return max(1000, int(cpus * CPU_PERIOD_US))


def _fail(message: str, key: str | None, hint: str) -> ValidationError:
    where = WHERE + (f"[{key!r}]" if key else "")
    return ValidationError(f"{where}: {message}", hint=hint,
                           path="rtenv.limits" + (f".{key}" if key else ""))


def parse_limits(value: object) -> LimitsField:
    """The checked `limits` mapping (at least one of `memory` and `cpus`)."""
    if not isinstance(value, Mapping) or not value:
        raise _fail("must be a mapping with `memory` and/or `cpus`", None,
                    'write e.g. {"limits": {"memory": "4GB", "cpus": 2}}')
    for key in value:
        if key not in KEYS:
            close = difflib.get_close_matches(str(key), KEYS, n=1)
            raise _fail(f"unknown key {key!r}", str(key),
                        f"did you mean {close[0]!r}?" if close else "the keys are memory, cpus")
    memory, cpus = value.get("memory"), value.get("cpus")
    memory_bytes = None
    if memory is not None:
        if isinstance(memory, bool) or not isinstance(memory, (str, int)):
            raise _fail(f"{memory!r} is not a size", "memory", 'write e.g. "4GB" or "512Mi"')
        try:
            memory_bytes = parse_memory(str(memory), option="memory")
        except RtenvError as exc:
            raise _fail(exc.message, "memory", exc.hint or 'write e.g. "4GB"') from None
    number = None
    if cpus is not None:
        try:
            number = float(cpus) if not isinstance(cpus, bool) else None
        except (TypeError, ValueError):
            number = None
        if number is None or not number > 0 or number == float("inf"):
            raise _fail(f"{cpus!r} is not a positive number of CPUs", "cpus",
                        "write e.g. 2 or 0.5")
        if number < MIN_CPUS:
            raise _fail(f"{cpus!r} CPUs is under rtenv's floor of {MIN_CPUS} CPU", "cpus",
                        CPUS_FLOOR_HINT)
    if memory_bytes is None and number is None:
        raise _fail("sets neither `memory` nor `cpus`", None, "set one of them, or drop `limits`")
    return LimitsField(memory_bytes=memory_bytes, cpus=number)
