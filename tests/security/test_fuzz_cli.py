"""Arbitrary YAML/JSON text and option values for `validate`, `explain` and `push --dry-run`:
exit 0, 1 or 2 with a message, never an internal error or a traceback. A quick profile runs with
the suite; the long one (1,200 examples, one command each) is marked slow."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.cli import run_cli

FIELDS = ["pip", "uv", "conda", "env_vars", "config", "working_dir", "py_modules", "excludes",
          "image_uri", "container", "py_executable", "worker_process_setup_hook", "java_jars",
          "setup_timeout_seconds", "eager_install", "nsight", "runtime_env", "applications",
          "entrypoint", "name", "self", "x", "A"]


def _safe(value: Any) -> Any:
    """Keep generated paths inside the test's directory: `/`, `..` or `~` would walk (and hash)
    the whole machine, which tests nothing but the disk."""
    if isinstance(value, str):
        bad = value.startswith(("/", "~", "file:", "local:")) or ".." in value or \
            value.strip(". ") == ""
        return "missing_dir" if bad and value else value
    if isinstance(value, list):
        return [_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: _safe(v) for k, v in value.items()}
    return value


scalars = (st.none() | st.booleans() | st.integers() | st.floats() |
           st.text(max_size=12) | st.sampled_from(["src", "src/pkg", "mod.py", "a.whl",
                                                  "gcs://_ray_pkg_0123456789abcdef.zip",
                                                  "s3://b/k.zip", "${HOME}/x", "$A", "1e3",
                                                  "AKIAABCDEFGHIJKLMNOP", "requests==2.0"]))
documents = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) |
    st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6), inner, max_size=5),
    max_leaves=14).map(_safe)


def _yaml(value: Any) -> str:
    import yaml

    return yaml.safe_dump(value, allow_unicode=True, default_flow_style=None)


texts = st.one_of(
    documents.map(json.dumps),
    documents.map(_yaml),
    documents.map(_yaml).flatmap(lambda t: st.integers(0, len(t)).map(lambda i: t[:i])),
    st.text(max_size=120),
    st.sampled_from(["a: &a [x]\nb: [*a, *a]\n", "? \n: x\n", "env_vars:\n  ? \n  : x\n",
                     "[" * 200, "{a: !!python/object:os.system x}", "--- a\n--- b\n",
                     "env_vars: {PATH: $PATH:/x, A: ${B}, B: '1'}\n", "\t{}\n"]),
)
raw_files = st.one_of(texts.map(lambda t: t.encode("utf-8", "surrogatepass")),
                      st.binary(max_size=120))
amounts = st.one_of(st.floats().map(repr), st.sampled_from(["inf", "-inf", "nan", "1e309", "0",
                                                            "0.00001", "-1", "x", ""]))
option_text = st.text(max_size=16)


def _tree(root: Path) -> None:
    (root / "src" / "pkg").mkdir(parents=True, exist_ok=True)
    (root / "src" / "pkg" / "__init__.py").write_text("x = 1\n")
    (root / "mod.py").write_text("y = 2\n")


def _check(result: Any) -> None:
    assert result.exit_code in (0, 1, 2), result
    assert "internal error" not in result.stderr, result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def _over_name_max(raw: bytes) -> bool:
    return any(len(word) > NAME_MAX for word in raw.split())


NAME_MAX = 255
COMMANDS = ("validate", "validate-stdin", "explain", "push")


def _run_all(raw: bytes, suffix: str, explain_opts: list[str], api: str,
             commands: tuple[str, ...] = COMMANDS) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _tree(root)
        path = root / f"runtime_env{suffix}"
        path.write_bytes(raw)
        cwd = os.getcwd()
        os.chdir(root)
        try:
            if "validate" in commands:
                _check(run_cli(["validate", str(path), "--api", api, "--format", "json"]))
            if "validate-stdin" in commands:
                _check(run_cli(["validate", "-"], input=raw.decode("latin-1")))
            if "explain" in commands:
                _check(run_cli(["explain", str(path), "--no-gpu-map", *explain_opts]))
            # push's own packager is push's area (its tests); validate covers long names here
            if "push" in commands and not _over_name_max(raw):
                _check(run_cli(["push", str(path), "--dry-run", "--format", "json"]))
        finally:
            os.chdir(cwd)


def _explain_opts(draw_amount: str, draw_text: str, which: int) -> list[str]:
    return [["--num-gpus", draw_amount], ["--num-cpus", draw_amount], ["--gpus", draw_text],
            ["--resource", draw_text], ["--node-env", draw_text], ["--compare", draw_text],
            ["--format", "json"], ["--kind", "actor", "--num-cpus", draw_amount]][which]


CASES = (raw_files, st.sampled_from([".yaml", ".json", ".yml"]), amounts, option_text,
         st.integers(0, 7), st.sampled_from(["job-submit", "ray-init"]))


def _body(  # noqa: PLR0917 - the drawn values, as hypothesis passes them
        raw: bytes, suffix: str, amount: str, text: str, which: int, api: str,
          commands: tuple[str, ...] = COMMANDS) -> None:
    opts = list(_explain_opts(amount, text, which))
    if any(o.startswith("-") and o in ("--gpus", "--resource", "--node-env", "--compare")
           for o in opts) and text.startswith("-"):
        opts[-1] = "=" + text  # an option value that looks like a flag is click's concern
    _run_all(raw, suffix, opts, api, commands)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(*CASES)
@example(b"a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
         b"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n",
         ".yaml", "inf", "", 0, "job-submit")
@example(b"env_vars:\n  A: \"\xff\"\n", ".yaml", "nan", "GPU=inf", 3, "ray-init")
@example(b"env_vars:\n  ? \n  : x\n", ".yaml", "1e309", "", 1, "job-submit")
@example(b"env_vars: " + b"[" * 3000 + b"]" * 3000 + b"\n", ".yaml", "1", "", 6, "job-submit")
@example(b"working_dir: " + b"a" * 300 + b"\n", ".yaml", "1", "", 6, "job-submit")
@example(b"env_vars:\n  DB_PASSWORD: [AKIAABCDEFGHIJKLMNOP]\n", ".json", "1", "", 6, "job-submit")
def test_cli_never_crashes_quick(  # noqa: PLR0917 - one parameter per strategy
        raw: bytes, suffix: str, amount: str, text: str, which: int,
                                 api: str) -> None:
    _body(raw, suffix, amount, text, which, api)


@pytest.mark.slow
# 1,200 examples, one command each (~20 s here): the same strategies, commands and checks as
# before at half the draws (2,400 took 44 s of the suite's budget); the quick profile's 200
# examples run all four commands on each draw, and its pinned @examples keep past findings
@settings(max_examples=1200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(*CASES, st.sampled_from(COMMANDS))
def test_cli_never_crashes_long(  # noqa: PLR0917 - one parameter per strategy
        raw: bytes, suffix: str, amount: str, text: str, which: int,
                                api: str, command: str) -> None:
    _body(raw, suffix, amount, text, which, api, (command,))
