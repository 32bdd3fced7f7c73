"""`rtenv push` of a Serve config or a KubeRay manifest writes the same file back with URIs, and
`push -o` inlines local requirements files (core/push_carrier.py, core/spec/rewrite.py)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from tests.support.cli import run_cli

SERVE = """\
# my Serve config: comments, quoting and order stay
http_options: {host: 127.0.0.1, port: 8000}
applications:
  - name: a   # the first app
    route_prefix: /a
    import_path: m:app
    runtime_env:
      working_dir: app  # the local directory
      pip: req.txt
      excludes:
        - "*.log"
      env_vars: {A: "1"}
    deployments:
      - name: D
        ray_actor_options:
          runtime_env: {py_modules: ["lib"]}
  - name: b
    route_prefix: /b
    import_path: m:app
    runtime_env:
      working_dir: "app"
"""

RAYJOB = """\
apiVersion: ray.io/v1
kind: RayJob
metadata:
  name: train  # the job
spec:
  entrypoint: python m.py
  runtimeEnvYAML: |
    working_dir: app   # kept
    pip: req.txt
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "m.py").write_text("app = 1\n")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "__init__.py").write_text("X = 1\n")
    (tmp_path / "req.txt").write_text("requests==2.32.3\nnumpy\n")
    return tmp_path


def _uri(tmp_path: Path, directory: str) -> str:
    result = run_cli(["push", directory, "--dry-run", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    return str(result.json["packages"][0]["uri"])


def test_serve_config_is_written_back_with_every_path_pushed(project: Path) -> None:
    (project / "serve.yaml").write_text(SERVE)
    app, lib = _uri(project, "app"), _uri(project, "lib")
    result = run_cli(["push", "serve.yaml", "-o", "deploy.yaml"])
    assert result.exit_code == 0, result.stderr
    assert "inlined req.txt" in result.stderr
    written = (project / "deploy.yaml").read_text()
    expected = (SERVE.replace("working_dir: app  #", f"working_dir: {app}  #")
                .replace('working_dir: "app"', f'working_dir: "{app}"')  # quoting kept
                .replace('py_modules: ["lib"]', f'py_modules: ["{lib}"]')
                .replace("pip: req.txt", 'pip: ["requests==2.32.3", "numpy"]')
                .replace('      excludes:\n        - "*.log"\n', ""))
    assert written == expected  # every other byte, comments included, as the user wrote it
    again = run_cli(["validate", "deploy.yaml"])
    assert again.exit_code == 0, again.stdout  # Serve's local-path rule (RTE181) is satisfied


SERVICE = """\
apiVersion: ray.io/v1
kind: RayService
metadata:
  name: svc
spec:
  serveConfigV2: |
    applications:
      - name: a
        import_path: m:app
        runtime_env:
          working_dir: app
"""


@pytest.mark.parametrize("text", [RAYJOB, f"{RAYJOB}---\n{SERVICE}"],
                         ids=["rayjob", "rayjob-and-rayservice"])  # one file, several documents
def test_rayjob_runtime_env_yaml_is_rewritten_in_place(project: Path, text: str) -> None:
    (project / "rayjob.yaml").write_text(text)
    app = _uri(project, "app")
    result = run_cli(["push", "rayjob.yaml", "-o", "out.yaml"])
    assert result.exit_code == 0, result.stderr
    assert (project / "out.yaml").read_text() == text.replace(
        "working_dir: app", f"working_dir: {app}").replace(
        "pip: req.txt", 'pip: ["requests==2.32.3", "numpy"]')


@pytest.mark.parametrize(("field", "value"), [
    ("runtimeEnvYAML", '"working_dir: app\\npip: [a]\\n"'),  # escapes: not in file columns
    ("runtimeEnv", base64.b64encode(b"working_dir: app\n").decode()),  # the older base64 form
])
def test_embedded_strings_not_in_file_lines_are_written_anew(project: Path, field: str,
                                                             value: str) -> None:
    head = RAYJOB.split("  runtimeEnvYAML", maxsplit=1)[0]
    text = f"{head}  {field}: {value}\n"
    (project / "rayjob.yaml").write_text(text)
    app = _uri(project, "app")
    result = run_cli(["push", "rayjob.yaml", "-o", "out.yaml"])
    assert result.exit_code == 0, result.stderr
    out = (project / "out.yaml").read_text()
    assert out.startswith(head)  # the rest is untouched
    raw = yaml.safe_load(out)["spec"][field]
    inner = yaml.safe_load(base64.b64decode(raw) if field == "runtimeEnv" else raw)
    assert inner["working_dir"] == app


def test_push_o_inlines_requirements_so_the_file_works_from_anywhere(project: Path) -> None:
    lines = ["requests==2.32.3", "numpy"]
    for spec, pushed in (("pip: req.txt\n", {"pip": lines}), ("uv: req.txt\n", {"uv": lines}),
                         ("pip:\n  packages: req.txt\n", {"pip": {"packages": lines}})):
        (project / "runtime_env.yaml").write_text(spec)
        result = run_cli(["push", "runtime_env.yaml", "-o", "pushed.yaml"])
        assert result.exit_code == 0, result.stderr
        assert yaml.safe_load((project / "pushed.yaml").read_text()) == pushed
        assert f"{next(iter(pushed))}: inlined req.txt" in result.stderr


def test_a_json_serve_config_stays_json(project: Path) -> None:
    import json

    config = {"applications": [{"name": "a", "import_path": "m:app",
                                "runtime_env": {"working_dir": "app", "pip": "req.txt"}}]}
    (project / "serve.json").write_text(json.dumps(config, indent=2) + "\n")
    result = run_cli(["push", "serve.json", "-o", "deploy.json"])
    assert result.exit_code == 0, result.stderr
    pushed = json.loads((project / "deploy.json").read_text())  # still JSON
    env = pushed["applications"][0]["runtime_env"]
    assert env == {"working_dir": _uri(project, "app"), "pip": ["requests==2.32.3", "numpy"]}



@pytest.mark.ray
def test_a_serve_config_to_a_cluster_without_the_plugin_says_why_zip(
        project: Path, ray_cluster: object) -> None:
    """The note a plain push prints (push.tree_path's one wording), for a carried file too."""
    address = ray_cluster.address  # type: ignore[attr-defined]
    (project / "serve.yaml").write_text(SERVE.replace("      pip: req.txt\n", ""))
    (project / "env.yaml").write_text("working_dir: app\n")
    plain = run_cli(["push", "env.yaml", "--address", address, "-o", "p.yaml"])
    carried = run_cli(["push", "serve.yaml", "--address", address, "-o", "s.yaml"])
    assert plain.exit_code == 0, plain.stderr
    assert carried.exit_code == 0, carried.stderr
    [why] = [line for line in plain.stderr.splitlines() if line.startswith("note: zip path: ")]
    assert "do not load rtenv's plugin" in why
    assert [line for line in carried.stderr.splitlines() if line.startswith("note: zip path")] \
        == [why]  # the same line, once for the file's three packages
    assert "path: zip (Ray's gcs:// packages)" in carried.stderr
