"""docs/ is generated from the code (scripts/gen_docs.py) and current: a page per command and per
rule, the configuration keys of the schema that checks config files, the exit-code table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rtenv_cli.cli.commands import COMMANDS
from rtenv_cli.core.errors import TABLE, ConfigError
from rtenv_cli.core.lint.registry import all_rules
from scripts import gen_docs

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_docs_are_current() -> None:
    stale = gen_docs.stale(gen_docs.render_all())
    assert stale == [], f"stale docs: {', '.join(stale)}; run python -m scripts.gen_docs"


def test_a_page_per_command_and_per_rule() -> None:
    for name in COMMANDS:
        assert (DOCS / "commands" / f"{name}.md").is_file(), name
    for sub in ("ls", "gc", "purge"):
        assert (DOCS / "commands" / f"cache-{sub}.md").is_file()
    index = (DOCS / "rules" / "README.md").read_text()
    for rule in all_rules():
        page = (DOCS / "rules" / f"{rule.code}.md").read_text()
        assert f"# {rule.code} {rule.name}" in page
        assert f"[{rule.code}]({rule.code}.md)" in index


def test_command_page_has_help_options_and_examples() -> None:
    page = (DOCS / "commands" / "validate.md").read_text()
    assert page.splitlines()[2] == "# rtenv validate"
    assert "Check runtime_env files exactly as Ray 2.60.0 would, and beyond." in page
    assert ("| `--format`, `-f` | `text\\|json\\|github\\|sarif` | `text` |  | "
            "`[validate] format` |") in page
    assert "$ rtenv validate runtime_env.yaml" in page


def _documented_keys() -> set[tuple[str, str]]:
    keys = set()
    table = None  # "" for the top level (the root's own options)
    for line in (DOCS / "configuration.md").read_text().splitlines():
        if line.startswith("## ["):
            table = line[4:-1]
        elif line == "## Top level":
            table = ""
        elif table is not None and (m := re.match(r"\| `([a-z-]+)` \|", line)):
            keys.add((table, m.group(1)))
    return keys


def test_configuration_documents_exactly_the_keys_config_files_accept(tmp_path: Path) -> None:
    from rtenv_cli.cli.config_schema import CommandTables
    from rtenv_cli.core.config import load_default_map

    accepted = set()
    tables = CommandTables(gen_docs._root())
    for name in tables:
        entry = tables[name]
        if hasattr(entry, "param"):  # a root option: a key outside any table
            accepted.add(("", name))
            continue
        pairs = ([(f"{name}.{sub}", entry[sub]) for sub in entry] if hasattr(entry, "group")
                 else [(name, entry)])
        accepted |= {(t, key) for t, keys in pairs for key in keys}
    assert _documented_keys() == accepted
    # and the schema really is the one that checks files: a documented key loads, a typo not
    assert load_default_map(schema=tables, cwd=_config(tmp_path, "[cache.gc]\nkeep-storage = "
                                                      '"20GB"\n'))["cache"]["gc"]
    with pytest.raises(ConfigError, match="unknown key 'too'"):
        load_default_map(schema=tables, cwd=_config(tmp_path, "[push]\ntoo = 1\n"))


def _config(cwd: Path, text: str) -> Path:
    (cwd / "rtenv.toml").write_text(text)
    return cwd


def test_exit_codes_page_has_every_error_class() -> None:
    page = (DOCS / "exit-codes.md").read_text()
    for cls, row in TABLE.items():
        assert f"| `{cls.__name__}` | `{row.code}` | {int(row.exit_code)} | {row.http_status} |" \
            in page
