"""`rtenv validate`: exit codes, formats, inputs, golden output, and no tracebacks ever.

Regenerate the golden files with `RTENV_UPDATE_GOLDEN=1 pytest tests/cli/test_validate.py`.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rtenv_cli import __version__
from tests.support.cli import run_cli, run_process

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "validate"
# input -> golden file stem: the samples with mistakes, and a clean config from examples/ci
GOLDEN_CASES = {"examples/invalid/runtime_env.yaml": "runtime_env_yaml",
                "examples/ci/configs/train_runtime_env.yaml": "clean_runtime_env_yaml",
                "examples/invalid/invalid_runtime_env.json": "invalid_runtime_env_json",
                "examples/invalid/serve_config.yaml": "serve_config_yaml",
                # issue 24: runtime_envs Serve drops and keys it ignores
                "tests/core/lint/forms_corpus/serve_dropped_runtime_envs.yaml":
                    "serve_dropped_runtime_envs_yaml"}
FORMATS = {"text": "txt", "json": "json", "github": "github", "sarif": "sarif.json"}


def _filter(text: str) -> str:
    text = text.replace(__version__, "[VERSION]")
    return re.sub(r"(?<![\w/])/(?:tmp|work|root|home)/[^\s'\")]*", "[TMP]", text)


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("case", GOLDEN_CASES)
def test_golden_output(case: str, fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    result = run_cli(["validate", case, "--format", fmt])
    actual = f"$ rtenv validate {case} --format {fmt}\nexit_code: {result.exit_code}\n" \
             f"----- stdout -----\n{_filter(result.stdout)}"
    golden = GOLDEN / f"{GOLDEN_CASES[case]}.{FORMATS[fmt]}.golden"
    if os.environ.get("RTENV_UPDATE_GOLDEN") == "1":
        golden.write_text(actual)
    assert golden.exists(), f"missing {golden}: run with RTENV_UPDATE_GOLDEN=1"
    assert actual == golden.read_text()


def test_exit_codes(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("env_vars: {A: '1'}\n")
    warn = tmp_path / "warn.yaml"
    warn.write_text("env_var: {A: '1'}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("env_vars: {A: 1}\n")
    assert run_cli(["validate", str(good)]).exit_code == 0
    assert run_cli(["validate", str(warn)]).exit_code == 0
    assert run_cli(["validate", str(warn), "--fail-on", "warning"]).exit_code == 1
    assert run_cli(["validate", str(warn), "--strict"]).exit_code == 1
    assert run_cli(["validate", str(bad)]).exit_code == 1
    assert run_cli(["validate", str(good), str(bad)]).exit_code == 1
    missing = run_cli(["validate", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 2
    assert "no such file" in missing.stderr
    assert "hint:" in missing.stderr
    assert run_cli(["validate", str(good), "--api", "bogus"]).exit_code == 2
    assert run_cli(["validate", str(good), "--format", "xml"]).exit_code == 2


def test_json_shape(tmp_path: Path) -> None:
    file = tmp_path / "runtime_env.yaml"
    file.write_text("pip: [requests]\nenv_vars:\n  N: 4\n")
    result = run_cli(["validate", str(file), "-f", "json"])
    assert result.exit_code == 1
    data = result.json
    [entry] = data["files"]
    assert entry["path"] == str(file)
    assert entry["valid"] is False
    assert entry["normalized"] is None
    [diag] = [d for d in entry["diagnostics"] if d["code"] == "RTE006"]
    assert (diag["line"], diag["column"], diag["severity"]) == (3, 6, "error")
    assert set(diag) >= {"code", "severity", "message", "line", "column"}


def test_stdin_and_directories(tmp_path: Path) -> None:
    result = run_cli(["validate", "-", "-f", "json"], input='{"env_vars": {"A": "1"}}')
    assert result.exit_code == 0
    assert result.json["files"][0]["normalized"] == {"env_vars": {"A": "1"}}
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "runtime_env.yaml").write_text("env_vars: {A: 1}\n")
    (tmp_path / "other.yaml").write_text("not: a runtime_env\n")
    result = run_cli(["validate", str(tmp_path), "-f", "json"])
    assert [f["path"] for f in result.json["files"]] == [str(tmp_path / "sub" / "runtime_env.yaml")]
    result = run_cli(["validate", str(tmp_path), "--glob", "*.yaml", "-f", "json"])
    assert len(result.json["files"]) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_cli(["validate", str(empty)]).exit_code == 2


def test_api_difference_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mod.py").write_text("x = 1\n")
    (tmp_path / "runtime_env.yaml").write_text("py_modules: [mod.py]\n")
    submit = run_cli(["validate", "runtime_env.yaml", "-v"])  # RTE009 is an info
    assert submit.exit_code == 1
    assert "RTE009" in submit.stdout
    assert "ray.init" in submit.stdout
    init = run_cli(["validate", "runtime_env.yaml", "--api", "ray-init", "--show-info"])
    assert init.exit_code == 0
    assert "RTE009" in init.stdout


def test_serve_config_positions_in_outer_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    result = run_cli(["validate", "examples/invalid/serve_config.yaml", "-f", "json"])
    [entry] = result.json["files"]
    assert entry["kind"] == "serve"
    [diag] = entry["diagnostics"]
    assert (diag["line"], diag["json_path"]) == (15, ["applications", 1, "runtime_env",
                                                      "env_vars", "BATCH_SIZE"])


def test_base_dir_overrides_cwd(tmp_path: Path) -> None:
    (tmp_path / "reqs.txt").write_text("requests\n")
    file = tmp_path / "runtime_env.yaml"
    file.write_text("pip: reqs.txt\n")
    assert run_cli(["validate", str(file)]).exit_code == 1  # CWD is elsewhere, like Ray
    result = run_cli(["validate", str(file), "--base-dir", str(tmp_path), "-f", "json"])
    assert result.exit_code == 0
    assert result.json["files"][0]["normalized"]["pip"]["packages"] == ["requests"]


def test_as_a_real_process(tmp_path: Path) -> None:
    file = tmp_path / "runtime_env.json"
    file.write_text('{\n\t"env_vars": {}\n}\n')
    result = run_process(["validate", str(file)])
    assert result.exit_code == 1
    assert f"{file}:2:1: RTE001 error: ScannerError" in result.stdout
    assert "Traceback" not in result.stderr
    result = run_process(["validate", "-", "--format", "github"], input="pip: [a]\nconda: x\n")
    assert result.exit_code == 1
    assert result.stdout.startswith("::error file=-,line=2,col=1")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                 lambda inner: st.lists(inner, max_size=3) |
                 st.dictionaries(st.sampled_from(["pip", "uv", "conda", "env_vars", "config",
                                                  "working_dir", "py_modules", "excludes",
                                                  "image_uri", "container", "x", "A"]),
                                 inner, max_size=4),
                 max_leaves=10).map(lambda v: json.dumps(v).encode()),
))
@example(b'{"":"\\ud800"}')  # a lone surrogate: once an internal error writing the JSON
@example(b'{"pip":"\\u0000"}')  # a NUL in a requirements path: once an internal error
def test_arbitrary_bytes_never_crash(data: bytes) -> None:
    result = run_cli(["validate", "-", "--format", "json"], input=data.decode("latin-1"))
    assert result.exit_code in (0, 1, 2)
    assert "internal error" not in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_validate_keeps_heavy_modules_off_its_import_path(tmp_path: Path) -> None:
    file = tmp_path / "runtime_env.yaml"
    file.write_text("working_dir: s3://bucket/project.zip\nenv_vars: {A: '1'}\npip: [requests]\n")
    # nor what only some files need: the plugin's schema (an `rtenv` field), packaging (a local
    # working_dir or py_module)
    code = ("import sys\nfrom rtenv_cli.cli.main import main\n"
            f"main(['validate', {str(file)!r}])\n"
            "print(sorted(m for m in ('pydantic', 'rich', 'ray', 'requests', 'importlib.metadata',"
            " 'rtenv_cli.core.rayplugin.schema', 'rtenv_cli.core.spec.limits',"
            " 'rtenv_cli.core.packaging.walk', 'rtenv_cli.core.packaging.ignore')"
            " if m in sys.modules))")
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip().splitlines()[-1]
    assert out == "[]"


def test_lone_surrogates_in_the_input_are_escaped_in_every_output() -> None:
    data = '{"\\ud800x": 1, "env_vars": {"A": "\\udcff"}}'
    as_json = run_process(["validate", "-", "--format", "json"], input=data)
    assert as_json.exit_code == 0, as_json.stderr
    normalized = json.loads(as_json.stdout)["files"][0]["normalized"]
    assert normalized["env_vars"] == {"A": "\udcff"}  # the same value, written as an escape
    assert "\ud800x" in normalized
    for args in (["validate", "-"], ["validate", "-", "--format", "github"]):
        shown = run_process(args, input=data)
        assert shown.exit_code == 0, shown.stderr
        assert "internal error" not in shown.stderr
        assert "\\ud800x" in shown.stdout + shown.stderr  # the unknown key, escaped
    assert run_cli(["validate", "-", "--format", "json"], input=data).exit_code == 0


def _fresh_checkout(root: Path) -> None:
    """A training project as `git clone` and a first `python -m venv .venv` leave it."""
    import shutil
    import subprocess

    (root / "trainer").mkdir(parents=True)
    (root / "trainer" / "__init__.py").write_text("")
    (root / "train.py").write_text("import trainer\n")
    (root / ".gitignore").write_text(".venv/\noutputs/\nwandb/\n__pycache__/\n")
    (root / ".venv" / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    (root / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (root / ".venv" / "lib" / "python3.11" / "site-packages" / "six.py").write_text("X = 1\n")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    stock = REPO / "examples" / "ci" / "configs" / "training_runtime_env.yaml"
    shutil.copy(stock, root / "runtime_env.yaml")


def test_stock_training_config_passes_fail_on_warning(tmp_path: Path) -> None:
    _fresh_checkout(tmp_path)
    result = run_process(["validate", "--fail-on", "warning"], cwd=str(tmp_path))
    assert result.exit_code == 0, result.stdout
    assert " warning:" not in result.stdout
    # no info either: `working_dir: .` beside the project and a `.git` beside the user's own
    # excludes are what everybody writes (issue 24: infos on nearly every file are noise)
    assert result.stdout.endswith("0 invalid, 0 errors, 0 warnings\n")
    assert "checking 1 file found in the current directory: runtime_env.yaml" in result.stderr
    shown = run_process(["validate", "-v"], cwd=str(tmp_path))
    assert re.findall(r"RTE\d+", shown.stdout) == []


def test_infos_only_when_asked_in_text_and_github_always_in_json_and_sarif(
        tmp_path: Path) -> None:
    file = tmp_path / "runtime_env.yaml"
    file.write_text("env_vars: {A: '1'}\nupload_path: s3://b/up\n")  # RTE109 is an info
    text = run_cli(["validate", str(file)])
    assert "RTE109" not in text.stdout
    assert "(1 info not shown: -v shows it)" in text.stdout
    assert "RTE109 info" in run_cli(["validate", str(file), "-v"]).stdout
    github = run_cli(["validate", str(file), "--format", "github"]).stdout
    assert "RTE109" not in github
    assert "::notice title=rtenv validate::1 info not shown" in github
    assert "::notice file=" in run_cli(["validate", str(file), "-f", "github",
                                        "--show-info"]).stdout
    as_json = run_cli(["validate", str(file), "-f", "json"]).json
    assert [d["code"] for d in as_json["files"][0]["diagnostics"]] == ["RTE109"]
    sarif = json.loads(run_cli(["validate", str(file), "-f", "sarif"]).stdout)
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["RTE109"]
    for args in ([], ["-v"], ["--fail-on", "warning"], ["--fail-on", "warning", "-v"]):
        assert run_cli(["validate", str(file), *args]).exit_code == 0  # infos never fail


def test_no_path_checks_the_current_directory(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert run_cli(["validate"]).exit_code == 2  # nothing to check: a usage error
    (tmp_path / "runtime_env.yaml").write_text("env_vars: {A: '1'}\n")
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "serve_config.yaml").write_text(
        "applications:\n- name: a\n  import_path: m:app\n  runtime_env: {env_vars: {A: '1'}}\n")
    (tmp_path / "deploy" / "job_spec.yaml").write_text(
        "entrypoint: python m.py\nruntime_env: {env_vars: {A: '1'}}\n")
    (tmp_path / "deploy" / "jobs.yaml").write_text("on: push\njobs: {test: {}}\n")  # CI, no job
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "runtime_env.yaml").write_text("env_vars: {A: 1}\n")
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "runtime_env.yaml").write_text("env_vars: {A: 1}\n")
    (tmp_path / ".gitignore").write_text("build/\n")
    result = run_cli(["validate", "-f", "json"])
    assert result.exit_code == 0, result.stdout
    checked = [f["path"] for f in result.json["files"]]
    assert checked == ["deploy/job_spec.yaml", "deploy/serve_config.yaml", "runtime_env.yaml"]
    assert ("checking 3 files found in the current directory: deploy/job_spec.yaml, "
            "deploy/serve_config.yaml, runtime_env.yaml") in result.stderr


def test_the_summary_names_the_tool_that_reads_each_form(tmp_path: Path) -> None:
    files = {
        "runtime_env.yaml": "env_vars: {A: '1'}\n",
        "job.yaml": "entrypoint: python x.py\nruntime_env:\n  env_vars: {A: '1'}\n",
        "serve_config.yaml": "applications:\n- name: app\n  import_path: app:deployment\n"
                             "  route_prefix: /\n  runtime_env:\n    env_vars: {A: '1'}\n",
        "rayjob.yaml": "apiVersion: ray.io/v1\nkind: RayJob\nmetadata: {name: x}\nspec:\n"
                       "  entrypoint: python x.py\n  runtimeEnvYAML: |\n"
                       "    env_vars: {A: '1'}\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    alone = run_cli(["validate", str(tmp_path / "serve_config.yaml")])
    assert alone.stdout.splitlines()[-1].startswith("Checked 1 file for serve deploy: "), \
        alone.stdout
    kuberay = run_cli(["validate", str(tmp_path / "rayjob.yaml")])
    assert "Checked 1 file for kubectl apply (KubeRay): " in kuberay.stdout
    plain = run_cli(["validate", "--api", "ray-init", str(tmp_path / "runtime_env.yaml")])
    assert "Checked 1 file for ray.init: " in plain.stdout
    every = run_cli(["validate", *(str(tmp_path / n) for n in files)])
    assert ("Checked 4 files (2 for ray job submit, 1 for serve deploy, "
            "1 for kubectl apply (KubeRay)): ") in every.stdout, every.stdout
