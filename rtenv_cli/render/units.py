"""Byte counts for people: the one formatter lives in core/units.py (core messages need it too);
renderers import it from here."""

from __future__ import annotations

from rtenv_cli.core.units import human_bytes

__all__ = ["human_bytes"]
