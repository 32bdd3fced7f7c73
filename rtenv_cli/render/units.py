"""Byte counts and durations for people: the one formatter of each lives in core/units.py (core
messages need them too); renderers import them from here."""

from __future__ import annotations

from rtenv_cli.core.units import human_bytes, human_duration

__all__ = ["human_bytes", "human_duration"]
