"""Sizes and durations written by people, `500MB`, `2GiB`, `256M`, `90m`, `7d`, and for people.

Decimal units (k, M, G, T with or without B) are powers of 1000, binary ones (Ki, Mi, Gi, Ti with
or without B) powers of 1024, as in `docker --memory`'s documentation and Kubernetes quantities;
a bare number is bytes (sizes) or seconds (durations).
"""

from __future__ import annotations

import math
import re

from rtenv_cli.core.errors import UsageError

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "ki": 2**10, "m": 10**6,
          "mb": 10**6, "mib": 2**20, "mi": 2**20, "g": 10**9, "gb": 10**9, "gib": 2**30,
          "gi": 2**30, "t": 10**12, "tb": 10**12, "tib": 2**40, "ti": 2**40}
_DUR_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*$", re.IGNORECASE)
_DUR = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MEMORY_FLOOR = 2**20  # below this no Python process starts: the value was surely meant in units


def parse_size(text: str) -> int:
    """Bytes in `text` (`20GB`, `2GiB`, `256M`, `1024`)."""
    match = _SIZE_RE.match(text)
    unit = (match.group(2) or "").lower() if match else ""
    if not match or unit not in _UNITS:
        raise UsageError(f"cannot read size {text!r}", hint="write e.g. 500MB, 20GB or 2GiB")
    value = float(match.group(1)) * _UNITS[unit]
    if not math.isfinite(value):
        raise UsageError(f"size {text!r} is too large", hint="write e.g. 500MB, 20GB or 2GiB")
    return int(value)


def parse_memory(text: str, *, option: str = "--memory") -> int:
    """A memory limit: a size of at least MEMORY_FLOOR. `256` is 256 bytes, which nobody means,
    so a small bare number is refused with the likely intent as a hint."""
    size = parse_size(text)
    if size >= MEMORY_FLOOR:
        return size
    match = _SIZE_RE.match(text)
    number = text.strip()
    if match is not None and not match.group(2):
        raise UsageError(f"{option} {number} means {size} bytes, below the 1 MiB minimum",
                         hint=f"give a unit: {option} {number}M (megabytes) or "
                         f"{option} {number}Mi (mebibytes); 2G and 1GiB work too")
    raise UsageError(f"{option} {number} is below the 1 MiB minimum",
                     hint=f"a memory limit this small kills any command; e.g. {option} 512M")


def parse_duration(text: str) -> float:
    """Seconds in `text` (`90m`, `24h`, `7d`, `30`)."""
    match = _DUR_RE.match(text)
    if not match:
        raise UsageError(f"cannot read duration {text!r}", hint="write e.g. 90m, 24h or 7d")
    return float(match.group(1)) * _DUR[(match.group(2) or "s").lower()]


def human_duration(seconds: float, *, exact: bool = True) -> str:
    """`7d`, `36h`, `90m`, `45s`: with `exact`, the largest unit that divides `seconds` whole
    (what parse_duration reads back), else seconds; without, the largest unit not above it,
    rounded down (`59m` for an hour less a second: an age in a listing)."""
    for unit in ("d", "h", "m"):
        size = _DUR[unit]
        if seconds >= size and (not exact or seconds % size == 0):
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s" if exact else f"{int(seconds)}s"


_KIB = 1024
_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_bytes(n: float | None) -> str:
    """`512 B`, `1.5 KiB`, `20.0 GiB` (IEC units, as `du -h` and uv print them); "-" for an
    unknown size."""
    if n is None:
        return "-"
    size = float(n)
    for unit in _BYTE_UNITS:
        if abs(size) < _KIB or unit == _BYTE_UNITS[-1]:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= _KIB
    raise AssertionError("unreachable: the last unit takes any size")
