"""completions/ holds the scripts generated from the current app, and bash, zsh and fish really
complete with them: every option's choices as the app itself completes them, rule codes,
sub-commands, files, and the command after `run --` (zsh and fish: tests/support/shells.py)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from scripts import gen_completions
from tests.support.shells import fish_complete, zsh_complete

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "completions" / "rtenv.bash"


def test_completions_are_current() -> None:
    for name, text in gen_completions.render_all().items():
        committed = (ROOT / "completions" / name).read_text()
        assert committed == text, f"completions/{name} is stale: run python -m " \
            "scripts.gen_completions"


def _bash() -> str:
    bash = shutil.which("bash")
    if bash is None:  # pragma: no cover - bash is on every supported machine
        pytest.fail("bash is required for this test")
    return bash


def complete(words: list[str], cwd: Path | None = None) -> list[str]:
    """What TAB offers after `words` (the last one being completed), in a real bash that
    sourced completions/rtenv.bash and runs the function `complete -p rtenv` names."""
    harness = (f"source {shlex.quote(str(SCRIPT))}\n"
               "fn=$(complete -p rtenv | sed -n 's/.*-F \\([^ ]*\\) rtenv$/\\1/p')\n"
               f"COMP_WORDS=({' '.join(shlex.quote(w) for w in ['rtenv', *words])})\n"
               "COMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n"
               "COMP_LINE=\"${COMP_WORDS[*]}\"; COMP_POINT=${#COMP_LINE}\n"
               '"$fn" rtenv "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"\n'
               "printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    out = subprocess.run([_bash(), "--norc", "--noprofile", "-c", harness], capture_output=True,
                         text=True, check=True, cwd=cwd).stdout
    return [line for line in out.splitlines() if line]


def test_complete_p_registers_the_function() -> None:
    out = subprocess.run([_bash(), "--norc", "-c", f"source {shlex.quote(str(SCRIPT))}; "
                          "complete -p rtenv"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "complete -o filenames -F _rtenv rtenv"


def _app_choices() -> list[tuple[tuple[str, ...], str, list[str]]]:
    """(command path, option name, the values the app itself completes) for every option with
    a fixed set of values, from click's own shell_complete."""
    import typer

    from rtenv_cli.cli import app

    found = []

    def walk(cmd: Any, path: tuple[str, ...]) -> None:
        ctx = cmd.make_context(path[-1] if path else "rtenv", [], resilient_parsing=True)
        for param in cmd.params:
            if param.param_type_name != "option" or param.hidden:
                continue
            values = [item.value for item in param.shell_complete(ctx, "")]
            if values:
                found.extend((path, name, values) for name in param.opts)
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return found


CHOICES = _app_choices()


def test_the_app_has_the_choices_this_test_relies_on() -> None:
    index = {(" ".join(p), o): v for p, o, v in CHOICES}
    assert index[("validate", "--format")] == ["text", "json", "github", "sarif"]
    assert index[("explain", "--format")] == ["text", "json", "dotenv", "shell"]
    assert index[("cache ls", "--kind")] == ["working_dir", "py_modules", "pip", "uv",
                                             "package", "blob", "build-cache", "conda",
                                             "java_jars"]
    assert index[("cache ls", "--use")] == ["in-use", "unused"]
    assert index[("cache ls", "--only")] == ["ray", "rtenv"]
    assert index[("ls-files", "--kind")] == ["working_dir", "py_module"]
    assert index[("ray-env", "--format")] == ["shell", "json", "yaml", "text"]


@pytest.mark.parametrize(("path", "option", "values"), CHOICES,
                         ids=[f"{' '.join(p)} {o}" for p, o, _v in CHOICES])
def test_bash_offers_each_options_own_choices(path: tuple[str, ...], option: str,
                                              values: list[str]) -> None:
    assert complete([*path, option, ""]) == values
    first = values[0]
    assert complete([*path, option, first[:2]]) == [v for v in values if v.startswith(first[:2])]


def test_option_values_before_the_word_do_not_confuse_the_command() -> None:
    assert complete(["cache", "ls", "--kind", "uv", "--format", ""]) == ["text", "json"]
    assert complete(["explain", "--kind", "actor", "-f", "d"]) == ["dotenv"]


def test_sub_commands_and_options() -> None:
    top = complete([""])
    assert {"validate", "explain", "cache", "doctor"} <= set(top)
    assert complete(["cache", ""]) == ["ls", "gc", "purge"]
    assert "--dry-run" in complete(["cache", "gc", "--"])
    assert complete(["--ver"]) == ["--version"]


def test_files_for_path_arguments_and_options(tmp_path: Path) -> None:
    (tmp_path / "runtime_env.yaml").write_text("{}\n")
    (tmp_path / "src").mkdir()
    assert complete(["validate", "run"], cwd=tmp_path) == ["runtime_env.yaml"]
    assert complete(["push", "-o", "s"], cwd=tmp_path) == ["src"]
    assert complete(["explain", "--address", ""], cwd=tmp_path) == []  # a free value


def test_fish_and_zsh_name_the_program() -> None:
    assert (ROOT / "completions" / "rtenv.fish").read_text().count("complete -c rtenv") > 1
    assert (ROOT / "completions" / "rtenv.zsh").read_text().startswith("#compdef rtenv")


RULE_CODES = sorted(r.code for r in __import__("rtenv_cli.core.lint.registry",
                                               fromlist=["all_rules"]).all_rules())


def test_bash_offers_rule_codes_and_commands_after_run() -> None:
    assert complete(["rules", "RTE13"]) == [c for c in RULE_CODES if c.startswith("RTE13")]
    assert "bash" in complete(["run", "--", "bas"])
    assert "bash" in complete(["run", "-r", "env.yaml", "--", "bas"])
    assert "bash" not in complete(["run", "--", "bash", "bas"])  # its own words: files


def _lines(tmp_path: Path) -> list[tuple[str, set[str] | None, set[str]]]:
    """(line typed, exactly what TAB must offer or None, what it must include)."""
    (tmp_path / "runtime_env.yaml").write_text("{}\n")
    cases: list[tuple[str, set[str] | None, set[str]]] = [
        (f"rtenv {' '.join(path)} {option} ", set(values), set())
        for path, option, values in CHOICES]
    cases += [
        ("rtenv rules RTE13", {c for c in RULE_CODES if c.startswith("RTE13")}, set()),
        ("rtenv cache ", {"ls", "gc", "purge"}, set()),
        ("rtenv run -- bas", None, {"bash"}),
        ("rtenv run -r runtime_env.yaml -- bas", None, {"bash"}),
        ("rtenv validate run", {"runtime_env.yaml"}, set()),
    ]
    return cases


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_complete_as_bash_does(shell: str, tmp_path: Path) -> None:
    cases = _lines(tmp_path)
    lines = [line for line, _exact, _some in cases]
    got = (zsh_complete(lines, tmp_path, cwd=tmp_path) if shell == "zsh" else
           fish_complete(lines, cwd=tmp_path))
    wrong = {line: sorted(found) for (line, exact, some), found in zip(cases, got, strict=True)
             if (exact is not None and set(found) != exact) or not some <= set(found)}
    assert wrong == {}
