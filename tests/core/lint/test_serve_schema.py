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


def test_a_missing_field_is_named(tmp_path: Path) -> None:
    """pydantic's "Field required" lands on the application (the key is not in the file), so
    the message names the field Serve wants."""
    report = check("applications:\n  - name: a\n    route_prefix: /\n", tmp_path)
    [found] = [d for d in report.diagnostics if d.code == "RTE180"]
    assert (found.line, found.column) == (2, 5)
    assert "`applications.0.import_path`" in found.message, found.message


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
    assert not [d for d in report.diagnostics if d.severity.value == "info"]  # no noise
    assert report.serve_check == "rtenv-table"
    [note] = [n for n in report.notes if "Serve" in n]
    assert "rtenv's table of Serve's structure" in note
    assert "ray[serve]" in note
    # the table still finds what Serve's schema would refuse
    broken = check("applications:\n  - name: a\n    deployments:\n      - num_replicas: 2\n"
                   "  - name: a\n    import_path: nodot\n", tmp_path)
    found = {(d.code, d.line) for d in broken.diagnostics}
    assert {("RTE180", 2), ("RTE180", 4), ("RTE180", 5), ("RTE180", 6)} <= found, found
    assert not broken.valid


def test_the_note_names_serves_own_schema_when_it_ran(tmp_path: Path) -> None:
    report = check("applications:\n  - import_path: m:app\n", tmp_path)
    assert report.serve_check == "serve-schema"
    assert report.to_dict()["serve_check"] == "serve-schema"
    assert report.notes == ()
    assert report.diagnostics == ()


def test_structure_table_is_serves_schema() -> None:
    """serve_structure.LEVELS holds the installed Serve's fields, required ones included."""
    from rtenv_cli.core.lint.serve_structure import LEVELS

    schema = import_schema()
    assert not isinstance(schema, Exception), schema
    models = {"config": schema.ServeDeploySchema, "application": schema.ServeApplicationSchema,
              "deployment": schema.DeploymentSchema,
              "ray_actor_options": schema.RayActorOptionsSchema,
              "http_options": schema.HTTPOptionsSchema, "grpc_options": schema.gRPCOptionsSchema}
    for level, model in models.items():
        fields = model.model_fields
        assert LEVELS[level] == (frozenset(fields),
                                 frozenset(k for k, f in fields.items() if f.is_required())), level


STRUCTURES = [
    {"applications": [{"import_path": "m:app"}]},
    {"applications": [{"name": "a"}]},
    {"applications": {"name": "a", "import_path": "m:app"}},
    {"applications": ["m:app"]},
    {"applications": [{"import_path": "m:app", "deployments": [{"num_replicas": 1}]}]},
    {"applications": [{"import_path": "m:app", "deployments": {"name": "D"}}]},
    {"applications": [{"import_path": "m:app", "deployments": [{"name": "D",
                                                                "ray_actor_options": 3}]}]},
    {"applications": [{"import_path": "a:b:c"}]}, {"applications": [{"import_path": "nodot"}]},
    {"applications": [{"import_path": ":app"}]}, {"applications": [{"import_path": "m."}]},
    {"applications": [{"import_path": 5}]},
    {"applications": [{"import_path": "m:app", "route_prefix": "api"}]},
    {"applications": [{"import_path": "m:app", "route_prefix": "/api"}]},
    {"applications": [{"name": "x", "import_path": "m:a"}, {"name": "x", "import_path": "m:b"}]},
    {"applications": [{"import_path": "m:a"}, {"import_path": "m:b"}]},
    {"import_path": "m:app", "host": "0.0.0.0", "port": 8000},
    {"runtime_env": {"pip": ["x"]}, "applications": [{"import_path": "m:app", "foo": 1}]},
    {"applications": [{"import_path": "m:app", "deployments": [
        {"name": "D", "runtime_env": {"pip": ["x"]}, "num_replica": 2}]}]},
]


@pytest.mark.parametrize("config", STRUCTURES, ids=[str(i) for i in range(len(STRUCTURES))])
def test_structure_verdict_is_serves(config: dict[str, Any]) -> None:
    """rtenv's table refuses (RTE180/RTE185) exactly what Serve's schema refuses."""
    from pydantic import ValidationError

    from rtenv_cli.core.lint.serve_structure import check as structure
    from rtenv_cli.core.lint.serve_structure import old_format
    from rtenv_cli.core.spec.forms import ServeConfig, is_old_serve
    from rtenv_cli.core.spec.loader import Positions

    schema = import_schema()
    try:
        schema.ServeDeploySchema.model_validate(config)
    except ValidationError:
        serve_ok = False
    else:
        serve_ok = True
    old = is_old_serve(config)
    serve_config = ServeConfig((), config, "serve", single_app=old, old_format=old)
    found = structure(serve_config, Positions(), shapes=True)
    if old:
        found += list(old_format(serve_config, Positions()))
    assert (not any(d.ray_error for d in found)) == serve_ok, [d.message for d in found]


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
