"""Serve configs against Ray Serve's own schema (RTE180/RTE181), rtenv's copy of Serve's URI rule
against the real one, the fallback without Ray (RTE182), and the import kept lazy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rtenv_cli.core.lint.engine import FileReport, ValidateOptions, validate_bytes
from rtenv_cli.core.lint.serve_schema import import_schema, uri_problems
from rtenv_cli.core.spec.forms import Site

REPO = Path(__file__).resolve().parents[3]
URIS = [".", "./app", "/abs/dir", "app.zip", "s3://b/app.zip", "gs://b/app.zip",
        "https://example.com/app.zip", "gcs://_ray_pkg_0123456789abcdef.zip",
        "local:///opt/app", "local://relative", "ftp://host/app.zip", "file:///nfs/app.zip",
        "s3://b/app", "C:/work/app", "pip://x", "conda://env"]


def check(text: str, tmp_path: Path) -> FileReport:
    return validate_bytes(text.encode(), "serve.yaml", ValidateOptions(base_dir=tmp_path, env={}))


def _serve_accepts(schema: Any, runtime_env: dict[str, Any]) -> bool:
    from pydantic import ValidationError

    try:
        schema.ServeDeploySchema.model_validate(
            {"applications": [{"import_path": "m:app", "runtime_env": runtime_env}]})
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize("field", ["working_dir", "py_modules"])
def test_rtenvs_copy_of_the_uri_rule_agrees_with_serve(field: str) -> None:
    schema = import_schema()
    assert not isinstance(schema, Exception), schema
    for uri in URIS:
        env: dict[str, Any] = {field: uri if field == "working_dir" else [uri]}
        ours = not list(uri_problems(Site((), env, "serve", ())))
        assert ours == _serve_accepts(schema, env), uri


def test_schema_errors_land_on_their_line(tmp_path: Path) -> None:
    report = check("applications:\n  - name: a\n    import_path: not-a-path\n"
                   "    runtime_env: {py_modules: [s3://b/m.zip, ./mods]}\n", tmp_path)
    found = {(d.code, d.line, d.column) for d in report.diagnostics}
    assert ("RTE180", 3, 5) in found  # import_path: Serve's own message
    assert ("RTE181", 4, 46) in found  # the second py_modules entry, not the runtime_env
    assert not report.valid
    assert "RTE003" not in {d.code for d in report.diagnostics}  # Serve never packages it


def test_anyscale_uploads_local_dirs(tmp_path: Path) -> None:
    report = check("name: svc\nray_serve_config:\n  applications:\n    - import_path: m:app\n"
                   "      runtime_env: {working_dir: ., upload_path: 's3://b/up'}\n", tmp_path)
    assert report.kind == "anyscale-service"
    codes = {d.code for d in report.diagnostics}
    assert not codes & {"RTE180", "RTE181", "RTE101"}


def test_without_ray_the_uri_rule_still_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    for module in ("ray", "ray.serve", "ray.serve.schema"):
        monkeypatch.setitem(sys.modules, module, None)  # as if Ray were not installed
    report = check("applications:\n  - name: a\n    import_path: m:app\n"
                   "    runtime_env: {working_dir: ./app}\n", tmp_path)
    by_code = {d.code: d for d in report.diagnostics}
    assert by_code["RTE181"].line == 4
    assert by_code["RTE181"].ray_error
    assert by_code["RTE182"].severity.value == "info"
    assert "ray[serve]" in (by_code["RTE182"].hint or "")


def test_serve_is_imported_only_for_serve_configs(tmp_path: Path) -> None:
    plain = tmp_path / "runtime_env.yaml"
    plain.write_text("env_vars: {A: '1'}\npip: [requests==2.32.3]\n")
    serve = tmp_path / "serve.yaml"
    serve.write_text("applications:\n  - import_path: m:app\n")
    code = ("import sys\nfrom rtenv_cli.core.lint.engine import validate_paths\n"
            "validate_paths([sys.argv[1]])\n"
            "print('ray.serve.schema' in sys.modules, 'pydantic' in sys.modules)")
    runs = [subprocess.run([sys.executable, "-c", code, str(p)], cwd=REPO, capture_output=True,
                           text=True, timeout=120, check=True).stdout.split()
            for p in (plain, serve)]
    assert runs == [["False", "False"], ["True", "True"]]
