"""Byte counts for people: IEC units (KiB, MiB, ...), as `du -h` and uv print them."""

from __future__ import annotations

_KIB = 1024
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_bytes(n: float | None) -> str:
    """`512 B`, `1.5 KiB`, `20.0 GiB`; "-" for an unknown size."""
    if n is None:
        return "-"
    size = float(n)
    for unit in _UNITS:
        if abs(size) < _KIB or unit == _UNITS[-1]:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= _KIB
    raise AssertionError("unreachable: the last unit takes any size")
