"""The README's two set-up commands: the test command is what CI runs, the main job really works."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from tests.support.cli import run_process

ROOT = Path(__file__).resolve().parent.parent


def _setup_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "README's Set-up section has no bash block"
    return [line for line in block.group(1).splitlines() if line and not line.startswith("#")]


# what .ci/run runs before the README's test command: the shells the completion tests drive
PREREQUISITES = ["bash .ci/shells.sh"]
# what .ci/run runs after the README's test command: the static gates and the dependency floors
GATES = ["ruff check rtenv_cli tests benchmarks scripts", "mypy", "bash .ci/lowest.sh"]


def test_setup_is_two_commands_and_ci_runs_the_second() -> None:
    commands = _setup_commands()
    assert len(commands) == 2
    ci_lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line and not line.startswith(("#", "set ", "cd "))]
    assert ci_lines == [*PREREQUISITES, commands[1], *GATES]


def test_first_command_runs_the_quickstart_on_the_embedded_store() -> None:
    first = _setup_commands()[0]
    # the part after the install: `rtenv run ...`, run with this interpreter's rtenv
    rtenv_part = first.split("&& rtenv ", 1)[1]
    result = run_process(shlex.split(rtenv_part), cwd=str(ROOT), timeout=300)
    assert result.exit_code == 0, result.stderr
    assert "six 1.17.0" in result.stdout
    assert "data.txt: read from the working_dir" in result.stdout
    assert "GREETING=hello from quickstart" in result.stdout


def test_validate_section_lists_every_file_form_rtenv_reads() -> None:
    """The table of file forms is the list forms.read recognises, and each form has a corpus
    file that validates as that kind (tests/core/lint/test_forms_corpus.py runs them)."""
    from rtenv_cli.core.spec.forms import KINDS

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## rtenv validate", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `([a-z_-]+)` \|", section, re.M)
    assert listed == list(KINDS)
    corpus = ROOT / "tests" / "core" / "lint" / "forms_corpus"
    shown = {m for f in corpus.glob("*.yaml")
             for m in re.findall(r"^# check: .*kind=([a-z_-]+)", f.read_text(), re.M)}
    assert shown >= set(KINDS)
