"""One case per rule: a runtime_env that triggers it, at the expected line."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtenv_cli.core.lint.diagnostic import Severity
from rtenv_cli.core.lint.engine import FileReport, ValidateOptions, validate_bytes
from rtenv_cli.core.lint.registry import all_rules, get_rule


def check(text: str, base: Path, **kw: object) -> FileReport:
    options = ValidateOptions(base_dir=base, env={}, **kw)  # type: ignore[arg-type]
    return validate_bytes(text.encode(), "t.yaml", options)


CASES = [
    ("RTE001", "env_vars: [1\n", 2, False),
    ("RTE002", "- pip: [a]\n", 1, False),
    ("RTE002", "1: a\n", 1, False),
    ("RTE003", "working_dir: nope\n", 1, False),
    ("RTE004", "worker_process_setup_hook: 42\n", 1, False),
    ("RTE005", "pip: [a]\nconda: env\n", 2, False),
    ("RTE005", "image_uri: x\npip: [a]\n", 2, False),
    ("RTE006", "env_vars:\n  DEBUG: yes\n", 2, False),
    ("RTE007", "my_plugin: 2024-06-01\n", 1, False),
    ("RTE007", "my_plugin: .nan\n", 1, False),
    ("RTE008", "config:\n  setup_timeout_seconds: true\n", 2, False),
    ("RTE008", "worker_process_setup_hook: 0\n", 1, False),
    ("RTE009", "py_modules: [mod.py]\n", 1, False),
    ("RTE101", "env_var: {A: '1'}\n", 1, True),
    ("RTE102", "config: {setup_timeout: 5}\n", 1, True),
    ("RTE102", "conda: {dependecies: [x]}\n", 1, True),
    ("RTE103", "env_vars:\n  A: '1'\n  A: '2'\n", 3, True),
    ("RTE104", "env_vars: {N: 1e3}\n", 1, True),
    ("RTE105", "nsight: default\n_nsight: x\n", 2, True),
    ("RTE107", "env_vars:\n  HF_TOKEN: ${oc.env:HF_TOKEN}\n", 2, True),
    ("RTE107", "working_dir: '{{ wd }}'\n", 1, False),
    ("RTE108", "model: bert\nlearning_rate: '3e-5'\nepochs: 3\n", 1, True),
    ("RTE109", "env_vars: {A: '1'}\nupload_path: s3://b/uploads\n", 2, True),
    ("RTE111", "pip: ~/reqs.txt\n", 1, False),
    ("RTE112", "working_dir: ''\nexcludes: ['*']\n", 1, True),
    ("RTE122", "working_dir: s3://b/app.zip\nexcludes: ['*.log']\n", 2, True),
    ("RTE122", "working_dir: .\nexcludes: ['.log']\n", 2, True),
    ("RTE123", "working_dir: .\nexcludes: [.git]\n", 2, True),
    ("RTE130", "env_vars: {CUDA_VISIBLE_DEVICES: '0'}\n", 1, True),
    ("RTE131", "env_vars: {OMP_NUM_THREADS: '8'}\n", 1, True),
    ("RTE132", "env_vars: {PYTHONPATH: /opt/lib}\n", 1, True),
    ("RTE133", "env_vars:\n  HF_TOKEN: hf_abcdefghijklmnopqrstu\n", 2, True),
    ("RTE134", "env_vars:\n  A: $B/x\n  B: /opt\n", 2, True),
    ("RTE135", "env_vars: {'A=B': x}\n", 1, True),
    ("RTE140", "pip: ['ray==2.9.0']\n", 1, True),
    ("RTE141", "pip: [a, 'a==1']\n", 1, True),
    ("RTE142", "uv: ['--no-deps', a]\n", 1, True),
    ("RTE142", "pip: ['-r requirements-dev.txt', a]\n", 1, True),
    ("RTE148", "pip: ['-e .', a]\n", 1, True),
    ("RTE149", "pip: ['git+https://github.com/me/tool.git#egg=tool\"']\n", 1, True),
    ("RTE143", "pip: ['git+https://example.com/x.git']\n", 1, True),
    ("RTE190", "rtenv:\n  pipp: [six]\n", 2, True),  # the plugin's field: rules/rtenv_field.py
    ("RTE190", "rtenv: [six]\n", 1, True),
    ("RTE191", "rtenv: {pip: [six]}\npy_executable: python3\n", 2, True),
    ("RTE192", "rtenv:\n  uv: {packages: reqs.txt}\n", 2, True),
    ("RTE193", "rtenv:\n  pip: [six]\n  limits: {memory: lots}\n", 3, True),
    ("RTE193", "rtenv:\n  limits: {cpu: 2}\n", 2, True),
    ("RTE191", "rtenv: {limits: {cpus: 1}}\ncontainer: {image: x}\n", 2, False),  # Ray: RTE005
    ("RTE194", "rtenv:\n  pip: [six, 'ray[data]==2.60.0']\n", 2, True),
    ("RTE141", "rtenv:\n  uv:\n    - six\n    - six==1.16.0\n", 4, True),
    ("RTE144", "pip: [torch]\n", 1, True),
    ("RTE145", "pip: reqs.txt\n", 1, True),
    ("RTE146", "pip: {packages: [a], pip_version: '23.3'}\n", 1, True),
    ("RTE170", "nsight: on_cpu\n", 1, True),
    ("RTE170", "env_vars: {A: '1'}\nconda: env.YML\n", 2, True),
    ("RTE170", "container: my-image\n", 1, True),
    ("RTE170", "conda: empty.yaml\n", 1, True),
    ("RTE171", "working_dir: pip://x\n", 1, True),
    ("RTE172", "pip: [a]\npy_executable: python3\n", 2, True),
]


@pytest.mark.parametrize(("code", "text", "line", "valid"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_fires(tmp_path: Path, code: str, text: str, line: int, valid: bool) -> None:
    (tmp_path / "mod.py").write_text("x = 1\n")
    (tmp_path / "reqs.txt").write_text("# comment\nrequests\n")
    (tmp_path / "empty.yaml").write_text("")
    report = check(text, tmp_path)
    hits = [d for d in report.diagnostics if d.code == code]
    assert hits, [(d.code, d.message) for d in report.diagnostics]
    assert hits[0].line == line
    assert report.valid is valid
    assert hits[0].hint  # every finding says what to do


def test_clean_file_has_no_findings(tmp_path: Path) -> None:
    report = check("working_dir: s3://b/x.zip\nenv_vars: {A: '1'}\n"
                   "pip: ['requests==2.32.3']\nconfig: {setup_timeout_seconds: 900}\n", tmp_path)
    assert report.valid
    assert report.diagnostics == ()
    assert report.normalized == {
        "working_dir": "s3://b/x.zip", "env_vars": {"A": "1"},
        "pip": {"packages": ["requests==2.32.3"], "pip_check": False},
        "config": {"setup_timeout_seconds": 900, "eager_install": True, "log_files": []},
        "_ray_commit": "b7f4259e944bf6959f721b106adc366ddfa0c356"}


def test_strict_makes_unknown_fields_errors(tmp_path: Path) -> None:
    report = check("env_var: {A: '1'}\n", tmp_path, strict=True)
    [diag] = [d for d in report.diagnostics if d.code == "RTE101"]
    assert diag.severity is Severity.ERROR
    assert report.valid  # Ray still accepts it: the verdict does not change


def test_all_errors_reported_at_once(tmp_path: Path) -> None:
    report = check("pip: [a]\nconda: x\nenv_vars: {A: 1}\nconfig: {setup_timeout_seconds: 0}\n"
                   "excludes: 5\n", tmp_path)
    codes = [(d.code, d.line) for d in report.diagnostics if d.ray_error]
    assert ("RTE005", 2) in codes
    assert ("RTE006", 3) in codes
    assert ("RTE006", 4) in codes
    assert ("RTE006", 5) in codes


def test_secret_values_are_redacted(tmp_path: Path) -> None:
    report = check("env_vars:\n  API_KEY: supersecretvalue123\n", tmp_path)
    text = " ".join(d.message + (d.hint or "") for d in report.diagnostics)
    assert "supersecretvalue123" not in text
    assert "sup****" in text


def test_path_relative_to_file_not_cwd(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "a.py").write_text("x = 1\n")
    runtime_env = project / "runtime_env.yaml"
    runtime_env.write_text("working_dir: src\n")
    from rtenv_cli.core.lint.engine import validate_paths

    report = validate_paths([runtime_env], ValidateOptions(base_dir=tmp_path, env={}))
    [file] = report.files
    assert not file.valid  # Ray resolves against the CWD: src does not exist there
    assert {d.code for d in file.diagnostics} >= {"RTE003", "RTE110"}
    fixed = validate_paths([runtime_env], ValidateOptions(base_dir=project, env={}))
    assert fixed.files[0].valid


def test_excludes_everything_and_size(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "a.py").write_text("x = 1\n")
    (tmp_path / "proj" / "big.bin").write_bytes(b"\0" * (11 * 1024 * 1024))
    report = check("working_dir: proj\nexcludes: ['*']\n", tmp_path)
    assert "RTE120" in {d.code for d in report.diagnostics}
    report = check("working_dir: proj\n", tmp_path)
    [big] = [d for d in report.diagnostics if d.code == "RTE151"]
    assert "big.bin" in big.message


def test_revalidating_in_one_process_sees_an_edited_tree(tmp_path: Path) -> None:
    """A long-running caller (watch) validates again after edits: no walk is reused."""
    (tmp_path / "proj" / "lib").mkdir(parents=True)
    (tmp_path / "proj" / "lib" / "m.py").write_text("x = 1\n")
    before = check("working_dir: proj\n", tmp_path)
    assert "RTE121" not in {d.code for d in before.diagnostics}
    (tmp_path / "proj" / ".gitignore").write_text("lib/\n")
    after = check("working_dir: proj\n", tmp_path)
    assert "RTE121" in {d.code for d in after.diagnostics}


def test_gitignore_dropping_python(tmp_path: Path) -> None:
    (tmp_path / "proj" / "lib").mkdir(parents=True)
    (tmp_path / "proj" / "main.py").write_text("import lib.m\n")
    (tmp_path / "proj" / "lib" / "m.py").write_text("x = 1\n")
    (tmp_path / "proj" / ".gitignore").write_text("lib/\n*.log\n")
    report = check("working_dir: proj\n", tmp_path)
    [diag] = [d for d in report.diagnostics if d.code == "RTE121"]
    assert "lib/m.py" in diag.message or "`lib`" in diag.message
    ignored = check("working_dir: proj\n", tmp_path)
    assert ignored.valid


@pytest.mark.parametrize(("gitignore", "nested"), [
    ("lib/\n", False),  # the files under lib/ are dropped, lib itself is walked
    ("lib\n", False),  # lib itself is dropped: the walk never enters it
    ("m.py\n", True),  # a nested .gitignore
])
def test_rte121_hint_is_the_line_that_keeps_the_code_in_rays_package(
        tmp_path: Path, gitignore: str, nested: bool) -> None:
    import re

    from ray._private.runtime_env.packaging import get_uri_for_directory


    proj = tmp_path / "proj"
    (proj / "lib").mkdir(parents=True)
    (proj / "main.py").write_text("import lib.m\n")
    (proj / "lib" / "m.py").write_text("x = 1\n")
    ignore = proj / "lib" / ".gitignore" if nested else proj / ".gitignore"
    ignore.write_text(gitignore)
    before = get_uri_for_directory(str(proj), include_gitignore=True)
    [diag] = [d for d in check("working_dir: proj\n", tmp_path).diagnostics
              if d.code == "RTE121"]
    assert str(ignore) in (diag.hint or "")
    lines = re.findall(r"`(![^`]+)`", diag.hint or "")
    assert lines
    ignore.write_text(gitignore + "\n".join(lines) + "\n")  # follow the hint
    # each validation walks afresh: no cache to clear between edits
    assert not [d for d in check("working_dir: proj\n", tmp_path).diagnostics
                if d.code == "RTE121"]
    # and Ray itself now packages lib/m.py
    assert get_uri_for_directory(str(proj), include_gitignore=True) != before
    assert _ray_files(proj) >= {"lib/m.py", "main.py"}


def _ray_files(root: Path) -> set[str]:
    import zipfile

    from ray._private.runtime_env.packaging import create_package

    out = root.parent / "ray.zip"
    create_package(str(root), out, include_gitignore=True)
    with zipfile.ZipFile(out) as zf:
        return {n.rstrip("/") for n in zf.namelist()}


def test_package_over_the_job_submit_limit(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    with (tmp_path / "proj" / "model.safetensors").open("wb") as f:
        f.truncate(101 * 1024 * 1024)  # sparse: fast to create
    report = check("working_dir: proj\n", tmp_path)
    [diag] = [d for d in report.diagnostics if d.code == "RTE150"]
    assert "model.safetensors" in diag.message
    assert diag.severity is Severity.ERROR
    ray_init = check("working_dir: proj\n", tmp_path, api="ray-init")
    assert "RTE150" not in {d.code for d in ray_init.diagnostics}


def test_every_rule_is_documented() -> None:
    codes = [r.code for r in all_rules()]
    assert len(codes) == len(set(codes))
    for rule in all_rules():
        assert all((rule.what, rule.why, rule.example, rule.fixed)), rule.code
        assert get_rule(rule.code) is rule
        assert get_rule(rule.name) is rule
        assert "## What it does" in rule.docs()
    used = {c[0] for c in CASES} | {"RTE110", "RTE120", "RTE121", "RTE150", "RTE151"}
    # RTE160/161: tests/core/lint/test_resolve; the forms corpus and Serve: test_forms_corpus,
    # test_serve_schema
    elsewhere = {"RTE160", "RTE161", "RTE106", "RTE124", "RTE136", "RTE137", "RTE138",
                 "RTE139", "RTE147", "RTE180", "RTE181", "RTE183", "RTE184", "RTE185",
                 "RTE186"}
    assert used | elsewhere == set(codes)


def test_excludes_matching_nothing(tmp_path: Path) -> None:
    """Only a pattern that can never match is a warning; one that matches nothing yet is not."""
    (tmp_path / "proj" / "data").mkdir(parents=True)
    (tmp_path / "proj" / "a.py").write_text("x = 1\n")
    (tmp_path / "proj" / "data" / "d.csv").write_text("1\n")
    absolute = str(tmp_path / "proj" / "data")
    report = check(f"working_dir: proj\nexcludes: ['data/', '*.log', '{absolute}']\n", tmp_path)
    found = {d.json_path[-1]: d for d in report.diagnostics if d.code == "RTE122"}
    assert set(found) == {2}  # `*.log`: no log file yet, and that is fine
    assert "absolute path" in found[2].message
    assert found[2].hint == "write `/data`"


# -- issue 24: false alarms removed, misses caught -----------------------------------------------
def test_misspelt_rtenv_field_suggests_rtenv(tmp_path: Path) -> None:
    report = check("rtnev:\n  pip: [six]\n", tmp_path)
    [diag] = [d for d in report.diagnostics if d.code == "RTE101"]
    assert diag.hint == "did you mean `rtenv`?"


def test_ray_pin_is_a_warning_saying_what_the_cluster_does(tmp_path: Path) -> None:
    report = check("pip: ['ray[default]==2.9.3', pandas]\n", tmp_path, ray_version="2.60.0")
    [diag] = [d for d in report.diagnostics if d.code == "RTE140"]
    assert diag.severity == Severity.WARNING
    assert report.valid
    assert "Ray 2.60.0 cluster" in diag.message
    assert "Changing the ray version is not allowed" in diag.message


def test_same_version_with_other_extras_is_no_conflict(tmp_path: Path) -> None:
    report = check("pip: ['pkg[a]==1.0', 'pkg[b]==1.0', 'other[x]==1', 'other==2']\n", tmp_path)
    assert [d.message for d in report.diagnostics if d.code == "RTE141"] == [
        "`other` is listed twice: `other[x]==1` and `other==2` may conflict"]


def test_pip_entry_naming_the_working_dirs_own_project(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "pyproject.toml").write_text('[project]\nname = "My_Trainer"\n')
    report = check("working_dir: proj\npip: [my-trainer, numpy]\n", tmp_path)
    [diag] = [d for d in report.diagnostics if d.code == "RTE148"]
    assert diag.line == 2
    assert "`my-trainer`" in diag.message


def test_quotes_in_markers_are_no_stray_quotes(tmp_path: Path) -> None:
    report = check("pip: ['numpy; python_version < \"3.12\"']\n", tmp_path)
    assert not [d for d in report.diagnostics if d.code == "RTE149"]


def test_excludes_dropping_a_file_the_code_opens_by_name(tmp_path: Path) -> None:
    (tmp_path / "proj" / "configs").mkdir(parents=True)
    (tmp_path / "proj" / "train.py").write_text(
        "import yaml\n\ncfg = yaml.safe_load(open('sft_config.yaml'))\n")
    (tmp_path / "proj" / "sft_config.yaml").write_text("lr: 1\n")
    (tmp_path / "proj" / "configs" / "unused.yaml").write_text("a: 1\n")
    report = check("working_dir: proj\nexcludes: ['*.yaml']\n", tmp_path)
    [diag] = [d for d in report.diagnostics if d.code == "RTE124"]
    assert diag.line == 2
    assert "`sft_config.yaml`, which `train.py` opens by name (line 3)" in diag.message
    assert "!/sft_config.yaml" in (diag.hint or "")
    quiet = check("working_dir: proj\nexcludes: ['configs/']\n", tmp_path)
    assert not [d for d in quiet.diagnostics if d.code == "RTE124"]


@pytest.mark.parametrize(("text", "code", "hint"), [
    ("working_dir:/path/to/proj\n", "RTE002", "put a space after the colon (`working_dir: "
                                              "/path/to/proj`)"),
    ("- name: app\n  import_path: main:app\n", "RTE002", "put `applications:` above it"),
    ('pip: {"torch", "numpy"}\n', "RTE006", "write a list, `[torch, numpy]`"),
    ('{"torch", "numpy"}\n', "RTE108", "write a list, `[torch, numpy]`"),
])
def test_broken_shapes_say_what_was_meant(tmp_path: Path, text: str, code: str,
                                          hint: str) -> None:
    """Ray's message for each is a bare `'<type>' object has no attribute 'get'` (or no error
    at all for the set at the top: its names become plugins that do nothing)."""
    report = check(text, tmp_path)
    [diag] = [d for d in report.diagnostics if d.code == code]
    assert hint in (diag.hint or ""), diag.hint


def test_dot_slash_pattern_names_the_pattern_that_works(tmp_path: Path) -> None:
    (tmp_path / "proj" / "data").mkdir(parents=True)
    (tmp_path / "proj" / "data" / "x.csv").write_text("a\n")
    report = check("working_dir: proj\nexcludes: ['./data']\n", tmp_path)
    [diag] = [d for d in report.diagnostics if d.code == "RTE122"]
    assert "like `data`, never `./data`" in diag.message
    assert diag.hint == "write `/data`"


def test_a_reference_to_the_nodes_environment_is_no_warning(tmp_path: Path) -> None:
    """`${SCRATCH}` reads the worker's environment (the raylet's, or for a task the job's
    env_vars), which a file cannot see: an info saying so, not a warning that it "is not set"
    (a key that sorts later still is a warning: that one is wrong whatever the node holds)."""
    report = check("env_vars:\n  OUT: ${SCRATCH}/out\n", tmp_path)
    [found] = [d for d in report.diagnostics if d.code == "RTE134"]
    assert found.severity == Severity.INFO
    assert "not set on the worker" not in found.message
    assert "node" in found.message
    mixed = check("env_vars:\n  A: $B/${SCRATCH}\n  B: /opt\n", tmp_path)
    [both] = [d for d in mixed.diagnostics if d.code == "RTE134"]
    assert both.severity == Severity.WARNING
