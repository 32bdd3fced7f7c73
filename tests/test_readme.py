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


# what .ci/run runs before the README's second command: the shells the completion tests drive
PREREQUISITES = ["bash .ci/shells.sh"]
# what .ci/run runs between the install and the test run of the README's second command (the
# static gates: they fail in seconds), and after it (the dependency floors)
BEFORE_TESTS = ["ruff check rtenv_cli tests benchmarks scripts", "mypy"]
AFTER_TESTS = ["bash .ci/lowest.sh"]
TEST_RUN = "python -m pytest"


def test_setup_is_two_commands_and_ci_runs_the_second() -> None:
    commands = _setup_commands()
    assert len(commands) == 2
    install, sep, tests = commands[1].rpartition(" && ")
    assert sep, commands[1]
    assert tests == TEST_RUN, commands[1]
    ci_lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line and not line.startswith(("#", "set ", "cd "))]
    assert ci_lines == [*PREREQUISITES, install, *BEFORE_TESTS, tests, *AFTER_TESTS]


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


def test_the_parity_corpus_is_the_size_the_readme_says() -> None:
    from tests.parity.corpus import CASES
    from tests.parity.test_random_parity import COUNT

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"Ray's own code on (\d+) crafted files and (\d+) seeded random ones", text)
    assert m, "README's validate section no longer says how large the parity corpus is"
    assert (int(m.group(1)), int(m.group(2))) == (len(CASES), COUNT)


def test_the_routes_without_a_token_are_the_ones_the_readme_names() -> None:
    from rtenv_cli.core.agent.server import PUBLIC

    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    m = re.search(r"Every route but (.*?) needs a bearer token", text)
    assert m, "README's agent section no longer says which routes need the token"
    assert tuple(re.findall(r"`(/[^`]*)`", m.group(1))) == PUBLIC
