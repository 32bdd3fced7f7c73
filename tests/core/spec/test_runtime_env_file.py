"""One reader of runtime_env files: push, watch, run and explain see the same runtime_env."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtenv_cli.core.errors import ConfigError, UsageError

# A job spec in JSON. Ray reads --runtime-env files with yaml.safe_load (YAML 1.1), where `1e3`
# is the string "1e3" (a float needs a dot), not json's 1000.0.
JOB_JSON = """{
  "entrypoint": "python main.py",
  "runtime_env": {
    "working_dir": "app",
    "env_vars": {"N": 1e3, "P": "x${N}"}
  }
}
"""
EXPECTED_ENV_VARS = {"N": "1e3", "P": "x${N}"}


@pytest.fixture
def job(tmp_path: Path) -> Path:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.py").write_text("print('x')\n")
    spec = tmp_path / "job.json"
    spec.write_text(JOB_JSON)
    return spec


def test_the_loader_reads_json_as_ray_does(job: Path) -> None:
    from rtenv_cli.core.spec.runtime_env_file import load_runtime_env_file

    loaded = load_runtime_env_file(job)
    assert loaded.kind == "job"
    assert loaded.prefix == ("runtime_env",)
    assert loaded.runtime_env == {"working_dir": "app", "env_vars": EXPECTED_ENV_VARS}
    assert loaded.doc.positions.key(("runtime_env", "env_vars", "N")) is not None


def test_push_watch_run_and_explain_read_a_json_job_spec_identically(
        job: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rtenv_cli.core.explain.service import build_request, explain
    from rtenv_cli.core.push import push
    from rtenv_cli.core.run import load_runtime_env
    from rtenv_cli.core.transport.local_store import LocalStoreTarget
    from rtenv_cli.core.watch.session import WatchSession

    monkeypatch.chdir(tmp_path)  # `app` is relative to the CWD, as for Ray
    store = LocalStoreTarget(tmp_path / "store")
    pushed = push(job, target=store).runtime_env
    assert pushed["env_vars"] == EXPECTED_ENV_VARS
    session = WatchSession(job, store)
    try:
        event = session.initial_push()
    finally:
        session.close()
    assert event is not None
    assert dict(event.runtime_env) == pushed
    ran, _base = load_runtime_env(job)
    assert ran == {"working_dir": "app", "env_vars": EXPECTED_ENV_VARS}
    preview = explain(build_request(runtime_env=job, node_env={}), gpu_map=False,
                      is_secret=None).preview
    assert preview.env["N"] == "1e3"
    assert preview.env["P"] == "x1e3"  # Ray's ${VAR} expansion (sorted keys: N first)


def test_load_errors(tmp_path: Path) -> None:
    from rtenv_cli.core.spec.runtime_env_file import load_runtime_env_file

    with pytest.raises(UsageError, match="no such file"):
        load_runtime_env_file(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.json"
    bad.write_text('{\n\t"env_vars": {}\n}\n')  # a tab: YAML 1.1 refuses it, as Ray does
    with pytest.raises(ConfigError, match=r"bad\.json:2:1: cannot parse"):
        load_runtime_env_file(bad)
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_runtime_env_file(listed)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_runtime_env_file(empty).runtime_env == {}
    job_without_env = tmp_path / "job.yaml"
    job_without_env.write_text("entrypoint: x\nruntime_env:\n")
    assert load_runtime_env_file(job_without_env).runtime_env == {}


def test_a_serve_config_application(tmp_path: Path) -> None:
    from rtenv_cli.core.spec.runtime_env_file import load_runtime_env_file

    serve = tmp_path / "serve.yaml"
    serve.write_text("applications:\n- name: a\n  runtime_env: {env_vars: {A: '1'}}\n"
                     "- name: b\n  runtime_env: {env_vars: {B: '2'}}\n")
    loaded = load_runtime_env_file(serve, app="b")
    assert (loaded.prefix, loaded.runtime_env) == (("applications", 1, "runtime_env"),
                                                   {"env_vars": {"B": "2"}})
    with pytest.raises(UsageError, match="2 applications"):
        load_runtime_env_file(serve)
    with pytest.raises(UsageError, match="no Serve application named 'c'"):
        load_runtime_env_file(serve, app="c")


RAYJOB = """\
apiVersion: ray.io/v1
kind: RayJob
metadata: {name: j}
spec:
  entrypoint: python m.py
  runtimeEnvYAML: |
    env_vars: {A: "1"}
"""
CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\n"
SERVICE = """\
apiVersion: ray.io/v1
kind: RayService
metadata: {name: s}
spec:
  serveConfigV2: |
    applications:
      - {name: a, import_path: m:app, runtime_env: {env_vars: {B: "2"}}}
"""


def test_a_kuberay_manifest_gives_its_runtime_env(tmp_path: Path) -> None:
    """explain, run and push read a RayJob's runtimeEnvYAML (alone, or beside a ConfigMap in a
    `---` stream), not the manifest as if it were a runtime_env; several are refused by name."""
    from rtenv_cli.core.spec.runtime_env_file import load_runtime_env_file

    one = tmp_path / "rayjob.yaml"
    one.write_text(RAYJOB)
    assert load_runtime_env_file(one).runtime_env == {"env_vars": {"A": "1"}}
    stream = tmp_path / "stream.yaml"
    stream.write_text(f"{RAYJOB}---\n{CONFIGMAP}")
    assert load_runtime_env_file(stream).runtime_env == {"env_vars": {"A": "1"}}
    service = tmp_path / "service.yaml"
    service.write_text(SERVICE)
    assert load_runtime_env_file(service).runtime_env == {"env_vars": {"B": "2"}}
    both = tmp_path / "both.yaml"
    both.write_text(f"{RAYJOB}---\n{SERVICE}")
    with pytest.raises(UsageError, match=r"holds 2 runtime_envs \(0\.spec\.runtimeEnvYAML"):
        load_runtime_env_file(both)
