"""Sizes and durations: units, bare numbers, and the floor of a memory limit."""

from __future__ import annotations

import pytest

from rtenv_cli.core.errors import UsageError
from rtenv_cli.core.units import human_duration, parse_duration, parse_memory, parse_size


@pytest.mark.parametrize(("text", "value"), [("20GB", 20 * 10**9), ("2GiB", 2 * 2**30),
                                             ("500mb", 500 * 10**6), ("1024", 1024),
                                             ("256M", 256 * 10**6), ("2G", 2 * 10**9),
                                             ("1Gi", 2**30), ("1.5g", 1_500_000_000)])
def test_parse_size(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize(("text", "value"), [("24h", 86400), ("7d", 604800), ("90m", 5400),
                                             ("30", 30)])
def test_parse_duration(text: str, value: float) -> None:
    assert parse_duration(text) == value


def test_bad_values_are_usage_errors() -> None:
    with pytest.raises(UsageError):
        parse_size("big")
    with pytest.raises(UsageError):
        parse_duration("soon")


def test_memory_takes_units() -> None:
    assert parse_memory("256M") == 256 * 10**6
    assert parse_memory("1GiB") == 2**30
    assert parse_memory("2097152") == 2 * 2**20  # a bare number of bytes above the floor


@pytest.mark.parametrize("text", ["256", "0", "1000000"])
def test_memory_refuses_a_small_bare_number_with_the_unit_it_likely_meant(text: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_memory(text)
    assert f"means {int(text)} bytes" in err.value.message
    assert f"--memory {text}M" in (err.value.hint or "")


def test_memory_refuses_a_tiny_limit_with_a_unit() -> None:
    with pytest.raises(UsageError, match="below the 1 MiB minimum"):
        parse_memory("64KB")


@pytest.mark.parametrize(("seconds", "exact", "text"), [
    (7 * 86400, True, "7d"), (36 * 3600, True, "36h"), (5400, True, "90m"), (45, True, "45s"),
    (90.5, True, "90.5s"), (0, True, "0s"), (3599, False, "59m"), (86399, False, "23h"),
    (59.9, False, "59s"), (8 * 86400 + 5, False, "8d")])
def test_human_duration(seconds: float, exact: bool, text: str) -> None:
    assert human_duration(seconds, exact=exact) == text
    if exact:
        assert parse_duration(text) == seconds  # what it writes, parse_duration reads back


def test_one_duration_formatter() -> None:
    """gc's reason, doctor's budget and the cache listing's ages all write durations through
    units.human_duration: no module keeps its own table of seconds per unit."""
    import re
    from pathlib import Path

    import rtenv_cli

    root = Path(rtenv_cli.__file__).parent
    own = [str(p.relative_to(root)) for p in root.rglob("*.py")
           if p.name != "units.py"
           and re.search(r"(//?|%)\s*(86400|3600)\b|\"d\", 86400", p.read_text())]
    assert own == []
