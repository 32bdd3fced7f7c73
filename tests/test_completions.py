"""completions/ holds the scripts generated from the current app, and they are valid shell."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_completions",
                                                  ROOT / "scripts" / "gen_completions.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_completions_are_current() -> None:
    rendered = _generator().render_all()
    for name, text in rendered.items():
        committed = (ROOT / "completions" / name).read_text()
        hint = "run python scripts/gen_completions.py"
        assert committed == text, f"completions/{name} is stale: {hint}"


def test_every_command_is_completed() -> None:
    gen = _generator()
    tree = gen.build_tree()
    bash = gen.bash(tree)
    for name in tree.children:
        assert name in bash


def test_bash_script_parses_and_completes() -> None:
    bash = shutil.which("bash")
    if bash is None:  # pragma: no cover - bash is on every supported machine
        pytest.fail("bash is required for this test")
    script = ROOT / "completions" / "rtenv.bash"
    probe = (f"source {script}; COMP_WORDS=(rtenv ''); COMP_CWORD=1; _rtenv; "
             "printf '%s\\n' \"${COMPREPLY[@]}\"")
    out = subprocess.run([bash, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert "--version" in out.split()


def test_fish_and_zsh_name_the_program() -> None:
    assert (ROOT / "completions" / "rtenv.fish").read_text().count("complete -c rtenv") > 1
    assert (ROOT / "completions" / "rtenv.zsh").read_text().startswith("#compdef rtenv")
