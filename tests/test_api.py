"""rtenv_cli.api: typed results, importable without the terminal libraries, the code the CLI
runs, and docs/api.md's examples run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from rtenv_cli import api

DOCS = Path(__file__).resolve().parent.parent / "docs" / "api.md"


def test_importing_and_using_the_api_imports_no_terminal_library() -> None:
    code = ("import sys\nfrom rtenv_cli import api\n"
            "api.validate({'pip': ['requests']})\napi.explain(num_cpus=1)\n"
            "print(sorted(m for m in ('typer', 'rich', 'click') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_types_are_exported() -> None:
    assert api.Diagnostic.__name__ == "Diagnostic"
    assert api.Severity.ERROR.value == "error"
    assert issubclass(api.RtenvError, Exception)
    assert set(api.__all__) >= {"validate", "push", "explain", "doctor", "ValidateReport",
                                "PushResult", "ExplainResult", "DoctorReport"}
    with pytest.raises(AttributeError):
        api.NoSuchThing  # noqa: B018 - the attribute lookup is the test


def test_validate_a_dict_gives_typed_diagnostics(tmp_path: Path) -> None:
    report = api.validate({"env_vars": {"WORKERS": 4}, "pypi": ["x"]}, base_dir=tmp_path)
    assert not report.valid
    assert report.exit_code == 1
    codes = {d.code: d for d in report.files[0].diagnostics}
    assert codes["RTE006"].severity is api.Severity.ERROR
    assert codes["RTE006"].ray_error is True
    assert codes["RTE006"].line is None  # a dict has no positions
    assert codes["RTE101"].severity is api.Severity.WARNING
    assert report.to_dict()["summary"]["errors"] == 1


def test_validate_strict_makes_unknown_fields_errors_for_dicts_too() -> None:
    report = api.validate({"env_var": {"A": "1"}}, strict=True)
    assert [d.severity for d in report.files[0].diagnostics] == [api.Severity.ERROR]
    assert report.exit_code == 1


def test_validate_files_and_directories(tmp_path: Path) -> None:
    (tmp_path / "a_runtime_env.yaml").write_text("pip: [requests]\n")
    (tmp_path / "b_runtime_env.yaml").write_text("env_vars: [1]\n")
    report = api.validate(tmp_path)
    assert [Path(f.path).name for f in report.files] == ["a_runtime_env.yaml",
                                                         "b_runtime_env.yaml"]
    assert [f.valid for f in report.files] == [True, False]
    assert report.files[1].diagnostics[0].line == 1


def test_push_reports_uris_and_what_was_uploaded(tmp_path: Path) -> None:
    (tmp_path / "wd").mkdir()
    (tmp_path / "wd" / "main.py").write_text("print(1)\n")
    dry = api.push(tmp_path / "wd", dry_run=True)
    (planned,) = dry.packages
    assert planned.uri.startswith("gcs://_ray_pkg_")
    assert not planned.uploaded
    shared = tmp_path / "shared"
    shared.mkdir()
    first = api.push(tmp_path / "wd", to=f"file://{shared}")
    (package,) = first.packages
    assert package.uploaded
    assert package.ray_uri == planned.uri  # the same content, Ray's own name
    assert (shared / Path(package.uri).name).is_file()
    assert first.runtime_env == {"working_dir": package.uri}
    again = api.push(tmp_path / "wd", to=f"file://{shared}")
    assert not again.packages[0].uploaded
    assert again.bytes_uploaded == 0


def test_explain_a_dict_or_a_file_with_provenance(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("env_vars:\n  A: job\n  B: job\n")
    result = api.explain({"env_vars": {"A": "task"}}, job_runtime_env=job, gpus="0,1")
    assert result.env["A"] == "task"
    assert result.sources["A"] == "task runtime_env"
    assert result.env["B"] == "job"
    assert result.sources["B"] == "job runtime_env"
    assert result.env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert result.reuse_key["allocated_instances"] == {"GPU": [0, 1]}


@pytest.mark.parametrize("args", [["validate", "runtime_env.yaml"],
                                  ["push", "--dry-run", "runtime_env.yaml"],
                                  ["explain", "runtime_env.yaml", "--num-cpus", "1"]])
def test_the_cli_runs_through_the_api(tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "runtime_env.yaml").write_text("pip: [requests]\n")
    code = ("import sys\nfrom rtenv_cli.cli.main import main\n"
            f"code = main({args!r})\n"
            "print(code, 'rtenv_cli.api' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=tmp_path).stdout.strip().splitlines()[-1]
    assert out == "0 True"


def _examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)


def test_docs_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    blocks = _examples()
    assert len(blocks) >= 5
    namespace: dict[str, object] = {}
    for number, block in enumerate(blocks, 1):
        exec(compile(block, f"docs/api.md example {number}", "exec"), namespace)  # noqa: S102 - the docs' own examples
    printed = capsys.readouterr().out
    assert "did you mean `env_vars`?" in printed
    assert "ray: accelerator visibility (GPU)" in printed
