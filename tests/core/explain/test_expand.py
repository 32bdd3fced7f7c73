from __future__ import annotations

import os
import posixpath

from hypothesis import given, settings
from hypothesis import strategies as st

from rtenv_cli.core.explain.expand import expand_env_vars, explain_expansion

NODE = {"NODE_FOO": "nodeval", "PYTHONPATH": "/n"}


def test_forms_measured_on_ray_2_60() -> None:
    got = expand_env_vars({"a": "${NODE_FOO}-x", "b": "$NODE_FOO", "c": "${UNSET}", "d": "$UNSET",
                           "e": "${lower_unset}", "f": "a:${PYTHONPATH}"}, NODE)
    assert got == {"a": "nodeval-x", "b": "nodeval", "c": "", "d": "$UNSET",
                   "e": "${lower_unset}", "f": "a:/n"}


def test_sorted_key_order() -> None:
    assert expand_env_vars({"Z1": "z", "A1": "${Z1}/a"}, {})["A1"] == "/a"
    got = expand_env_vars({"P1": "p1", "Q1": "${P1}/q", "Q2": "${P2}/q", "P2": "p2"}, {})
    assert got["Q1"] == "p1/q"
    assert got["Q2"] == "p2/q"
    assert [s.key for s in explain_expansion({"b": "1", "a": "2"}, {})] == ["a", "b"]


def test_notes_explain_each_form() -> None:
    (step,) = explain_expansion({"K": "$X${Y}${z}"}, {})
    assert step.final == "$X${z}"
    assert len(step.notes) == 3
    assert "literally" in step.notes[0]
    assert "''" in step.notes[1]


@settings(max_examples=200)
@given(st.text(alphabet="$}{ABab_1:/x", max_size=20))
def test_matches_posixpath_expandvars(value: str) -> None:
    env = {"A": "va", "AB": "vab", "a": "lower", "B_1": "b1"}
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(env)
        want = posixpath.expandvars(value)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    import re
    want = re.sub(r"\$\{[A-Z0-9_]+\}", "", want)
    assert expand_env_vars({"K": value}, env)["K"] == want
