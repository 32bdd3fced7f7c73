"""Long and odd inputs to `validate` take work linear in their size (issue 22, M4: a
140,000-character env var took 37 s, a 70,000-character working_dir 15 s, in regexes that
rescanned the rest of a value from every position).

Each shape of tests/security/long_inputs.py is validated at n and at 4n characters and the two
CPU times (this thread's, so other processes on a loaded box do not count) are compared: linear
work takes about 4 times as long, quadratic work 16 times. The bound, 8 times plus a quarter
second of slack, fails a quadratic rule by a wide margin at these sizes (seconds against
milliseconds) and does not fail a linear one on jitter; a shape over it is measured once more
before it fails."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtenv_cli.core.explain.expand import var_refs
from rtenv_cli.core.lint.context import ValidateOptions
from rtenv_cli.core.lint.engine import validate_bytes, validate_runtime_env
from rtenv_cli.core.lint.rules.uris import urls
from rtenv_cli.core.lint.template import _DELIMITED, _delimited
from tests.security.long_inputs import DOCS, TEXTS

RATIO, SLACK_S = 8.0, 0.25


def _cpu(run: Callable[[], Any]) -> float:
    start = time.thread_time()
    report = run()
    assert report is not None
    return time.thread_time() - start


def _assert_linear(name: str, at: Callable[[int], Callable[[], Any]], n: int) -> None:
    for attempt in range(2):
        small, large = _cpu(at(n)), _cpu(at(4 * n))
        if large <= RATIO * small + SLACK_S:
            return
        assert attempt == 0, (f"{name}: {n} chars took {small:.3f} s of CPU, {4 * n} took "
                              f"{large:.3f} s: more than linear")


def test_every_rule_is_linear_in_its_input(tmp_path: Path) -> None:
    for name, make in DOCS.items():
        _assert_linear(name, lambda n, make=make: lambda: validate_runtime_env(
            make(n), base_dir=tmp_path), 20_000)


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_a_long_or_odd_file_is_validated_in_linear_time(tmp_path: Path, name: str) -> None:
    options = ValidateOptions(base_dir=tmp_path)
    _assert_linear(name, lambda n: lambda: validate_bytes(TEXTS[name](n), "f.json", options),
                   50_000)


# the linear scanners find exactly what the regexes they replace found
_PIECES = st.lists(st.sampled_from(["a", "Z", "1", "+", ".", "-", ":", "/", "://", " ", "'",
                                    "<", "@", "é", "$", "{", "}", "${", "{{", "}}", "{%",
                                    "%}", "{#", "#}", "_", "\r"]), max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(_PIECES)
def test_urls_are_found_as_the_url_regex_finds_them(text: str) -> None:
    pattern = r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+"
    assert list(urls(text)) == [m.group(0) for m in re.finditer(pattern, text)]


@settings(max_examples=300, deadline=None)
@given(_PIECES)
def test_references_are_found_as_expandvars_finds_them(text: str) -> None:
    pattern = re.compile(r"\$(\w+|\{[^}]*\})", re.ASCII)
    assert [m.span() for m in var_refs(text)] == [m.span() for m in pattern.finditer(text)]


@settings(max_examples=300, deadline=None)
@given(_PIECES)
def test_template_delimiters_are_found_as_the_lazy_regexes_find_them(text: str) -> None:
    for pairs in _DELIMITED.values():
        pattern = "|".join(re.escape(o) + ".*?" + re.escape(c) for o, c in pairs)
        assert list(_delimited(text, pairs)) == [m.span() for m in re.finditer(pattern, text)]
