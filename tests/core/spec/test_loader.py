from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from rtenv_cli.core.spec.loader import Span, load_bytes, load_path, load_text


def test_positions_of_keys_and_values() -> None:
    doc = load_text("env_vars:\n  A: '1'\npip: [requests, torch]\n", "f.yaml")
    assert doc.error is None
    assert doc.positions.key(("env_vars", "A")) == Span(2, 3, 2, 4)
    assert doc.positions.value(("env_vars", "A")) == Span(2, 6, 2, 9)
    assert doc.positions.value(("pip", 1)) == Span(3, 17, 3, 22)
    assert doc.positions.best(("pip", 9)) == doc.positions.key(("pip",))


def test_json_is_parsed_as_yaml_11_with_positions() -> None:
    doc = load_text('{"env_vars": {"N": 1e3, "M": 012, "D": 2024-06-01, "T": 12:30}}', "f.json")
    # unquoted JSON-ish values get YAML 1.1 types, exactly as under Ray's yaml.safe_load
    assert doc.data == {"env_vars": {"N": "1e3", "M": 10, "D": datetime.date(2024, 6, 1),
                                     "T": 750}}
    doc = load_text("env_vars: {N: 1e3, M: 012, D: 2024-06-01, T: 12:30, Y: yes}", "f.yaml")
    assert doc.data["env_vars"] == {"N": "1e3", "M": 10, "D": datetime.date(2024, 6, 1),
                                    "T": 750, "Y": True}
    assert doc.positions.key(("env_vars", "M")) == Span(1, 20, 1, 21)


def test_duplicate_keys_last_wins_and_are_recorded() -> None:
    doc = load_text("env_vars:\n  A: '1'\n  A: '2'\n", "f.yaml")
    assert doc.data == {"env_vars": {"A": "2"}}
    [dup] = doc.positions.duplicates
    assert dup.path == ("env_vars", "A")
    assert (dup.first.line, dup.second.line) == (2, 3)
    assert doc.positions.key(("env_vars", "A")).line == 3


def test_merge_keys_are_not_duplicates() -> None:
    doc = load_text("x: &a {A: '1', B: '2'}\nenv_vars:\n  <<: *a\n  B: '3'\n", "f.yaml")
    assert doc.data["env_vars"] == {"A": "1", "B": "3"}
    assert doc.positions.duplicates == []
    assert doc.positions.key(("env_vars", "B")).line == 4
    assert doc.positions.key(("env_vars", "A")).line == 1


def test_parse_errors_are_data_with_positions() -> None:
    assert load_text("a: 1\n---\nb: 2\n", "f").error.kind == "ComposerError"
    tab = load_text('{\n\t"a": 1}', "f.json").error
    assert tab.kind == "ScannerError"
    assert (tab.span.line, tab.span.column) == (2, 1)
    assert load_text("a: !!python/name:os.system x", "f").error.kind == "ConstructorError"


def test_encoding_like_ray_open() -> None:
    assert load_bytes(b"\xef\xbb\xbfa: 1\n", "f").data == {"a": 1}
    err = load_bytes(b"a: 1\nb: \xff\n", "f").error
    assert err.kind == "UnicodeDecodeError"
    assert (err.span.line, err.span.column) == (2, 4)
    assert load_bytes(b"a: 1\r\nb: 2\r\n", "f").positions.key(("b",)).line == 2


def test_empty_and_missing_files(tmp_path) -> None:
    empty = tmp_path / "e.yaml"
    empty.write_text("# nothing\n")
    assert load_path(empty).data is None
    assert load_path(empty).error is None
    assert load_path(tmp_path / "missing.yaml").error.kind == "OSError"


def test_anchor_cycles_do_not_hang() -> None:
    doc = load_text("a: &x [*x]\n", "f")
    assert doc.error is None


def test_alias_expansion_is_bounded_and_located() -> None:
    from rtenv_cli.core.spec.loader import LIMIT_KIND, MAX_ALIAS_NODES

    levels = ["a: &a [" + ", ".join(["x"] * 9) + "]"]
    levels += [f"{c}: &{c} [" + ", ".join([f"*{p}"] * 9) + "]" for p, c in zip("abcdef", "bcdefg",
                                                                             strict=True)]
    doc = load_text("\n".join(levels) + "\n", "bomb.yaml")
    assert doc.error is not None
    assert doc.error.kind == LIMIT_KIND
    assert doc.error.message.startswith("too many aliases")
    assert f"{MAX_ALIAS_NODES:,}" in doc.error.message
    assert doc.error.span is not None
    assert (doc.error.span.line, doc.error.span.column) == (6, 8)


def test_ordinary_and_recursive_aliases_still_load() -> None:
    merged = load_text('base: &b {A: "1"}\nenv_vars:\n  <<: *b\n  C: "2"\n', "m.yaml")
    assert merged.ok
    assert merged.data["env_vars"] == {"A": "1", "C": "2"}  # type: ignore[index]
    many = load_text("x: &x [1, 2]\n" + "".join(f"k{i}: *x\n" for i in range(1000)), "n.yaml")
    assert many.ok
    recursive = load_text("a: &a [*a, *a]\n", "r.yaml")  # Ray's safe_load builds a cycle too
    assert recursive.ok


def test_read_file_refuses_what_is_not_a_small_regular_file(tmp_path: Path) -> None:
    import os

    from rtenv_cli.core.spec.loader import LIMIT_KIND, load_path, read_file

    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    raw, error = read_file(fifo)  # opened without blocking: no writer is waited for
    assert raw is None
    assert error is not None
    assert "FIFO" in error.message
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * 2048)
    assert load_path(big, limit=1024).error.kind == LIMIT_KIND  # type: ignore[union-attr]
    assert load_path(tmp_path).error.message.startswith("a directory")  # type: ignore[union-attr]


def test_read_text_names_option_file_line_and_byte(tmp_path: Path) -> None:
    from rtenv_cli.core.errors import ConfigError
    from rtenv_cli.core.spec.loader import read_text

    path = tmp_path / "node.env"
    path.write_bytes(b"A=1\nB=\xfe\n")
    with pytest.raises(ConfigError) as info:
        read_text(path, "--node-env-file")
    assert info.value.message.startswith(f"--node-env-file {path}:2:3: ")
    assert "byte 0xfe in position 6" in info.value.message
    assert info.value.hint == "save the file as UTF-8"
