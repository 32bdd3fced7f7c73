"""A corpus of long and odd runtime_envs for `validate` (issue 22, M4): each entry makes a
document of about `n` characters of one shape (a long value in every field a rule reads, runs of
the characters the rules' patterns look for, unicode, NULs, lone surrogates, deep nesting).

Every rule must do work linear in its input: test_fuzz_linear.py validates each shape at n and
4n and compares the CPU time taken. DOCS are runtime_envs as data (the rules' own work), TEXTS
whole files (the parser and the scans of a file's text as well)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

Doc = Callable[[int], bytes]


def _json(make: Callable[[int], Any]) -> Doc:
    """A JSON file of the document `make` builds."""
    return lambda n: json.dumps(make(n)).encode()


def _text(make: Callable[[int], str]) -> Doc:
    return lambda n: make(n).encode("utf-8", "surrogatepass")


def _runs(unit: str, n: int) -> str:
    return unit * max(1, n // len(unit))


# characters and runs the rules' patterns look for: scheme-like words, separators, references
_ODD = {
    "x": "x", "scheme": "a:", "slashes": "://", "at": "a@", "colon_at": "u:p@", "dollar": "$",
    "ref_open": "${", "brace": "{", "percent": "%", "query": "?a=b&", "bracket": "[",
    "backslash": "\\", "dots": "..", "star": "*", "dash": "-", "newline": "a\n", "space": "a ",
    "eq": "a==", "digits": "9", "upper": "Aa", "path_ref": "$PATH", "jinja": "{{{%{#",
    "e_notation": "1e", "unicode": "é\U0001f600",
    "nul": "\x00", "lone_surrogate": "\ud800",
}
# fields that carry one string (or a list of strings) the rules read
_FIELDS: dict[str, Callable[[str], Any]] = {
    "env_value": lambda s: {"env_vars": {"A": s}},
    "env_secret_value": lambda s: {"env_vars": {"HF_TOKEN": s}},
    "env_key": lambda s: {"env_vars": {s: "1"}},
    "working_dir": lambda s: {"working_dir": s},
    "working_dir_url": lambda s: {"working_dir": "https://h/" + s},
    "py_modules": lambda s: {"py_modules": [s]},
    "pip_line": lambda s: {"pip": [s]},
    "pip_url": lambda s: {"pip": ["pkg @ https://user:" + s + "@h/p.whl"]},
    "pip_option": lambda s: {"pip": {"packages": ["six"], "pip_install_options": [s]}},
    "uv_line": lambda s: {"uv": [s]},
    "conda": lambda s: {"conda": {"dependencies": [s, {"pip": [s]}]}},
    "excludes": lambda s: {"working_dir": ".", "excludes": [s]},
    "image_uri": lambda s: {"image_uri": s},
    "java_jars": lambda s: {"java_jars": [s]},
    "config": lambda s: {"config": {"setup_timeout_seconds": s}},
    "unknown_key": lambda s: {s: 1},
    "rtenv_limits": lambda s: {"rtenv": {"limits": {"memory": s}}},
}

# excludes compile to one regex each (pathspec): many times slower per character, so fewer
# shapes, a quarter as long
_GLOB_ODD = ("x", "star", "backslash", "bracket", "dots", "slashes", "newline", "unicode")

# runtime_envs as data: each rule's own work (test_fuzz_linear.py runs them in memory)
DOCS: dict[str, Callable[[int], Any]] = {
    f"{field}/{odd}": (lambda n, f=make, u=unit: f(_runs(u, n)))
    for field, make in _FIELDS.items() if field != "excludes" for odd, unit in _ODD.items()
}
DOCS.update({f"excludes/{odd}": (lambda n, u=_ODD[odd]: _FIELDS["excludes"](_runs(u, n // 4)))
             for odd in _GLOB_ODD})
DOCS["many_env_vars"] = lambda n: {"env_vars": {f"K{i}": "v" for i in range(n // 8)}}
DOCS["many_refs"] = lambda n: {"env_vars": {"A": "x", "B": "$A${A}" * (n // 6)}}

# whole files, parsed as `rtenv validate FILE` parses them (the text-level scans included)
TEXTS: dict[str, Doc] = {
    # structures: PyYAML spends far more per character on them, so they are a fifth as long
    "yaml/many_keys": _text(lambda n: "env_vars:\n" + "".join(
        f"  K{i}: v\n" for i in range(n // 40))),
    "yaml/many_pips": _text(lambda n: "pip:\n" + "  - six\n" * (n // 40)),
    "json/nested_lists": _text(lambda n: '{"pip": ' + "[" * (n // 500) + "]" * (n // 500)
                               + "}"),
    "json/nested_dicts": _text(lambda n: '{"env_vars": ' + '{"a": ' * (n // 500) + "1"
                               + "}" * (n // 500) + "}"),
    # long values
    "yaml/plain": _text(lambda n: "env_vars:\n  A: " + "x" * n + "\n"),
    "json/huge_int": _text(lambda n: '{"config": {"setup_timeout_seconds": ' + "9" * n + "}}"),
    "json/env_value": _json(lambda n: {"env_vars": {"A": "x" * n}}),  # red team: 37 s at 140k
    "json/working_dir": _json(lambda n: {"working_dir": "x" * n}),  # red team: 15 s at 70k
    "json/templates": _json(lambda n: {"env_vars": {"A": _runs("{{{%{#${{${", n)}}),
    "json/escaped_nuls": _text(lambda n: '{"working_dir": "' + "\\u0000" * (n // 6) + '"}'),
    "json/lone_surrogates": _text(lambda n: '{"env_vars": {"A": "' + "\\ud800" * (n // 6)
                                  + '"}}'),
}
