"""`--resolve` runs the real `uv pip compile` (PyPI is the only network this suite may use)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtenv_cli.core.lint.engine import ValidateOptions, validate_bytes
from tests.support.ports import free_port


@pytest.mark.slow
def test_conflicting_pins_do_not_resolve(tmp_path: Path) -> None:
    options = ValidateOptions(base_dir=tmp_path, env={}, resolve=True)
    report = validate_bytes(b'pip: ["six==1.16.0", "six==1.15.0"]\n', "t.yaml", options)
    [diag] = [d for d in report.diagnostics if d.code in ("RTE160", "RTE161")]
    # offline machines get the "could not check" warning instead of a wrong verdict
    assert diag.code == "RTE160" or "could not check" in diag.message
    assert diag.line == 1


def test_unreachable_index_is_a_warning_not_an_error(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UV_INDEX_URL", f"http://127.0.0.1:{free_port()}/simple")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.delenv("UV_OFFLINE", raising=False)
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    options = ValidateOptions(base_dir=tmp_path, env={}, resolve=True)
    report = validate_bytes(b"uv: [zzz-not-a-real-package-rtenv]\n", "t.yaml", options)
    [diag] = [d for d in report.diagnostics if d.code in ("RTE160", "RTE161")]
    assert diag.code == "RTE161"
    assert report.valid


def test_without_resolve_nothing_runs(tmp_path: Path) -> None:
    report = validate_bytes(b'pip: ["six==1.16.0", "six==1.15.0"]\n', "t.yaml",
                            ValidateOptions(base_dir=tmp_path, env={}))
    assert not [d for d in report.diagnostics if d.code in ("RTE160", "RTE161")]


@pytest.mark.parametrize("kind", ["pip", "uv"])
def test_the_rtenv_field_is_resolved_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         kind: str) -> None:
    monkeypatch.setenv("UV_INDEX_URL", f"http://127.0.0.1:{free_port()}/simple")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.delenv("UV_OFFLINE", raising=False)
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    options = ValidateOptions(base_dir=tmp_path, env={}, resolve=True)
    text = f"rtenv:\n  {kind}: [zzz-not-a-real-package-rtenv]\n".encode()
    report = validate_bytes(text, "t.yaml", options)
    [diag] = [d for d in report.diagnostics if d.code in ("RTE160", "RTE161")]
    assert f"`rtenv.{kind}`" in diag.message
    assert diag.line == 2
