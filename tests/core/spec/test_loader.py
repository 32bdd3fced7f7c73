from __future__ import annotations

import datetime

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
