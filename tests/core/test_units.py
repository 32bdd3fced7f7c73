"""Sizes and durations: units, bare numbers, and the floor of a memory limit."""

from __future__ import annotations

import pytest

from rtenv_cli.core.errors import UsageError
from rtenv_cli.core.units import parse_duration, parse_memory, parse_size


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
