"""The engine's contract: validate_runtime_env / validate_paths, verdicts, exit codes, notes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rtenv_cli.core.errors import UsageError
from rtenv_cli.core.lint.engine import (
    DEFAULT_GLOBS,
    ValidateOptions,
    expand_inputs,
    validate_paths,
    validate_runtime_env,
)


def test_validate_runtime_env_in_memory(tmp_path: Path) -> None:
    report = validate_runtime_env({"uv": ["a"], "env_vars": {"A": "1"}}, base_dir=tmp_path)
    assert report.valid
    assert report.normalized == {"uv": {"packages": ["a"], "uv_check": False,
                                        "uv_pip_install_options": ["--no-cache"]},
                                 "env_vars": {"A": "1"}}
    bad = validate_runtime_env({"pip": 5}, base_dir=tmp_path, source="inline")
    assert not bad.valid
    assert bad.path == "inline"
    [diag] = [d for d in bad.diagnostics if d.ray_error]
    assert diag.code == "RTE006"
    assert diag.line is None  # no source, no positions


def test_local_packages_get_rays_uri(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "a.py").write_text("x = 1\n")
    report = validate_runtime_env({"working_dir": "proj", "env_vars": {"A": "1"}},
                                  base_dir=tmp_path)
    assert report.valid
    uri = report.normalized["working_dir"]
    assert uri.startswith("gcs://_ray_pkg_")
    assert len(uri) == len("gcs://_ray_pkg_.zip") + 16
    (tmp_path / "proj" / "a.py").write_text("x = 2\n")
    # a second validation walks the edited tree afresh (no module-level cache)
    again = validate_runtime_env({"working_dir": "proj"}, base_dir=tmp_path)
    assert again.normalized["working_dir"] != uri  # content-addressed


def test_expand_inputs(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "runtime_env.yaml").write_text("{}")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "my-runtime-env.json").write_text("{}")
    (tmp_path / "runtime_env.yml").write_text("{}")
    (tmp_path / "values.yaml").write_text("{}")
    found = expand_inputs([str(tmp_path)], DEFAULT_GLOBS)
    assert found == [str(tmp_path / "a" / "my-runtime-env.json"), str(tmp_path / "runtime_env.yml")]
    assert expand_inputs(["-"], DEFAULT_GLOBS) == ["-"]
    with pytest.raises(UsageError):
        expand_inputs([str(tmp_path / "missing.yaml")], DEFAULT_GLOBS)


def test_report_exit_codes(tmp_path: Path) -> None:
    warn = tmp_path / "runtime_env.yaml"
    warn.write_text("env_var: {A: '1'}\n")
    options = ValidateOptions(base_dir=tmp_path, env={})
    assert validate_paths([warn], options).exit_code == 0
    assert validate_paths([warn], ValidateOptions(base_dir=tmp_path, env={},
                                                  fail_on="warning")).exit_code == 1
    report = validate_paths([warn], options)
    data = report.to_dict()
    assert data["summary"] == {"files": 1, "invalid": 0, "errors": 0, "warnings": 1, "infos": 0}


def test_parse_error_is_a_positioned_diagnostic(tmp_path: Path) -> None:
    file = tmp_path / "runtime_env.yaml"
    file.write_text("env_vars:\n  A: '1'\n---\npip: []\n")
    [report] = validate_paths([file], ValidateOptions(base_dir=tmp_path, env={})).files
    [diag] = report.diagnostics
    assert (diag.code, diag.line, diag.column) == ("RTE001", 3, 1)
    assert "ComposerError" in diag.message
    assert diag.hint


def test_job_spec_normalized_by_location(tmp_path: Path) -> None:
    file = tmp_path / "job.yaml"
    file.write_text("entrypoint: python x.py\nruntime_env:\n  env_vars: {A: '1'}\n")
    [report] = validate_paths([file], ValidateOptions(base_dir=tmp_path, env={})).files
    assert report.kind == "job"
    assert report.normalized == {"runtime_env": {"env_vars": {"A": "1"}}}


def test_files_sharing_a_working_dir_walk_it_once_per_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """100 configs of one project cost one walk of it, not 100 (and a new run walks afresh)."""
    from collections import Counter

    from rtenv_cli.core.packaging import hashing, packscan, walk

    calls: Counter[str] = Counter()

    def counted(name: str, real: Any) -> Any:
        def spy(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(*args, **kwargs)
        return spy

    monkeypatch.setattr(walk, "_scan", counted("scan", walk._scan))
    monkeypatch.setattr(packscan, "walk", counted("walk", packscan.walk))
    monkeypatch.setattr(hashing, "digest_entries", counted("digest", hashing.digest_entries))
    (tmp_path / "proj" / "lib").mkdir(parents=True)
    (tmp_path / "proj" / "lib" / "m.py").write_text("x = 1\n")
    files = []
    for i in range(5):
        f = tmp_path / f"runtime_env_{i}.yaml"
        f.write_text(f"working_dir: proj\nexcludes: [outputs/]\nenv_vars: {{N: '{i}'}}\n")
        files.append(f)
    options = ValidateOptions(base_dir=tmp_path, env={})
    report = validate_paths(files, options)
    assert report.valid
    assert len({f.normalized["working_dir"] for f in report.files}) == 1  # type: ignore[index]
    # one package scan and one digest for both APIs and all files; the forgiving walk runs with
    # and without the user's excludes (RTE121's deep drops, RTE122/123's view of the tree)
    assert calls == {"scan": 1, "digest": 1, "walk": 2}
    validate_paths(files, options)
    assert calls == {"scan": 2, "digest": 2, "walk": 4}
