"""`rtenv run` core: the child's environment, exit codes, env var expansion."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtenv_cli.core.errors import ConfigError, UsageError
from rtenv_cli.core.run import RunRequest, child_environment, expand, load_runtime_env, run_command
from rtenv_cli.core.store.handle import EnvHandle


def _handle(**kw: object) -> EnvHandle:
    base = {"key": "k", "holder": "h", "working_dir": "/wd", "py_modules": ("/m1", "/m2"),
            "venv": "/venv", "env_vars": {}}
    base.update(kw)
    return EnvHandle(**base)  # type: ignore[arg-type]


def test_child_environment_orders_pythonpath_like_ray() -> None:
    env = child_environment(_handle(env_vars={"A": "x${HOME_DIR}y", "B": "${A}-${NOPE}"}),
                            RunRequest(command=["x"], gpus="1,3", num_cpus=2),
                            base={"PATH": "/usr/bin", "PYTHONPATH": "/old", "HOME_DIR": "/h"})
    assert env["PYTHONPATH"] == "/m1:/m2:/wd:/old"
    assert env["PATH"] == "/venv/bin:/usr/bin"
    assert env["VIRTUAL_ENV"] == "/venv"
    assert env["A"] == "x/hy"
    assert env["B"] == "x/hy-"  # a leftover ${VAR} becomes "", as Ray's update_envs does
    assert env["CUDA_VISIBLE_DEVICES"] == "1,3"
    assert env["OMP_NUM_THREADS"] == "2"


def test_omp_num_threads_from_env_vars_wins() -> None:
    env = child_environment(_handle(env_vars={"OMP_NUM_THREADS": "8"}),
                            RunRequest(command=["x"], num_cpus=2), base={})
    assert env["OMP_NUM_THREADS"] == "8"


def test_expand_keeps_unknown_plain_dollar_words() -> None:
    assert expand({"X": "$UNSET_A and ${UNSET_B}"}, {}) == {"X": "$UNSET_A and "}


def test_load_runtime_env_from_job_spec(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("entrypoint: python x.py\nruntime_env:\n  env_vars:\n    A: '1'\n")
    data, base = load_runtime_env(spec)
    assert data == {"env_vars": {"A": "1"}}
    assert base == Path.cwd().resolve()  # like `ray job submit`: relative to the CWD
    assert load_runtime_env(spec, base_dir=tmp_path)[1] == tmp_path.resolve()


def test_load_runtime_env_warns_of_warnings_not_infos(tmp_path: Path) -> None:
    file = tmp_path / "runtime_env.yaml"
    file.write_text("env_vars: {A: '1'}\nupload_path: s3://b/u\nenv_var: {B: '2'}\n")
    warnings: list[tuple[str, str | None]] = []
    load_runtime_env(file, warnings, base_dir=tmp_path)
    assert [w for w, _hint in warnings] == [
        f"{file}: RTE101 unknown field `env_var`: Ray keeps it as a plugin name and ignores it "
        "(one log line on the node)"]  # not RTE109 (upload_path is Anyscale's): an info


def test_load_runtime_env_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        load_runtime_env(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigError):
        load_runtime_env(bad)


def test_run_without_runtime_env_passes_exit_code() -> None:
    notes: list[str] = []
    code = run_command(RunRequest(command=["python", "-c", "raise SystemExit(5)"]),
                       notify=lambda m, h: notes.append(m))
    assert code == 5
    assert run_command(RunRequest(command=["no-such-command-xyz"]),
                       notify=lambda m, h: notes.append(m)) == 127
    assert "command not found" in notes[-1]


def test_local_working_dir_is_pushed_and_released(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "data.txt").write_text("payload")
    env_file = tmp_path / "runtime_env.yaml"
    env_file.write_text("working_dir: proj\nenv_vars:\n  MODE: test\n")
    out = tmp_path / "out.txt"
    code = run_command(RunRequest(
        command=["python", "-c", f"import os; open({str(out)!r}, 'w').write("
                 "open('data.txt').read() + os.environ['MODE'])"],
        runtime_env=env_file, base_dir=tmp_path), notify=lambda m, h: None)
    assert code == 0
    assert out.read_text() == "payloadtest"
    from rtenv_cli.core.cache.ls import list_store
    from rtenv_cli.core.store.store import Store

    entries = list_store(Store()).entries
    assert {e.kind for e in entries} == {"package", "working_dir"}
    assert all(e.refs == 0 for e in entries)  # released when the command ended


def test_embedded_store_enforces_the_agent_budget_of_the_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rtenv_cli.core.cache.ls import list_store
    from rtenv_cli.core.store.store import Store

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RTENV_UPLOAD_PIN_S", "0")  # no grace for fresh uploads: budget only
    (tmp_path / "rtenv.toml").write_text('[agent]\nmax-size = "1B"\n')
    labels = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f.txt").write_text(name)
        env_file = tmp_path / f"{name}.yaml"
        env_file.write_text(f"working_dir: {name}\n")

        def seen(handle: EnvHandle, _s: float) -> None:
            labels.append(sorted(e.label for e in list_store(Store()).entries if e.refs))

        code = run_command(RunRequest(command=["python", "-c", "pass"], runtime_env=env_file,
                                      base_dir=tmp_path), notify=lambda m, h: None,
                           on_ready=seen)
        assert code == 0
    from rtenv_cli.core.packaging.hashing import package_uri

    left = list_store(Store()).entries
    # creating `two` dropped every unreferenced entry to meet the 1-byte budget: all of `one`,
    # and `two`'s package (its unpacked working_dir, referenced by the run, stays)
    assert [(e.kind, e.uri) for e in left] == [
        ("working_dir", package_uri(tmp_path / "two", kind="working_dir", env={}))]
    assert len(labels[1]) == 1


def test_bad_budget_in_config_is_a_config_error(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from rtenv_cli.core.run import embedded_budget

    monkeypatch.chdir(tmp_path)
    (tmp_path / "rtenv.toml").write_text('[agent]\nmax-size = "lots"\n')
    with pytest.raises(ConfigError, match="max-size"):
        embedded_budget()


def test_py_modules_and_requirements_file(tmp_path: Path) -> None:
    (tmp_path / "mymod").mkdir()
    (tmp_path / "mymod" / "__init__.py").write_text("VALUE = 'from py_modules'\n")
    (tmp_path / "requirements.txt").write_text("# pinned\nsix==1.16.0\n")
    env_file = tmp_path / "env.yaml"
    env_file.write_text("py_modules: [mymod]\npip: requirements.txt\n")
    out = tmp_path / "out.txt"
    code = run_command(RunRequest(
        command=["python", "-c", "import mymod, six; open(" + repr(str(out)) +
                 ", 'w').write(mymod.VALUE + ' ' + six.__version__)"],
        runtime_env=env_file, base_dir=tmp_path), notify=lambda m, h: None)
    assert code == 0
    assert out.read_text() == "from py_modules 1.16.0"


def test_local_zip_working_dir_goes_up_as_is(tmp_path: Path) -> None:
    import zipfile

    with zipfile.ZipFile(tmp_path / "code.zip", "w") as zf:
        zf.writestr("inside.txt", "zipped")
    (tmp_path / "env.yaml").write_text("working_dir: code.zip\n")
    out = tmp_path / "out.txt"
    code = run_command(RunRequest(
        command=["python", "-c", f"open({str(out)!r}, 'w').write(open('inside.txt').read())"],
        runtime_env=tmp_path / "env.yaml", base_dir=tmp_path), notify=lambda m, h: None)
    assert code == 0
    assert out.read_text() == "zipped"


def test_gpu_ids_index_a_preset_visible_list_like_ray() -> None:
    # a node started with CUDA_VISIBLE_DEVICES=4,5,6,7: Ray's GPU slot 1 is device 5
    env = child_environment(_handle(), RunRequest(command=["x"], gpus="1"),
                            base={"CUDA_VISIBLE_DEVICES": "4,5,6,7"})
    assert env["CUDA_VISIBLE_DEVICES"] == "5"
