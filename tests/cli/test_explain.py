from __future__ import annotations

import re

import pytest

from tests.support.cli import run_cli, run_process


def write(tmp_path, name: str, text: str):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_json_shape_and_sources(tmp_path) -> None:
    rte = write(tmp_path, "task.yaml", "env_vars:\n  B: task\n  C: ${B}-c\n")
    job = write(tmp_path, "job.yaml", "env_vars:\n  A: job\n  B: job\n")
    r = run_cli(["explain", str(rte), "--job-runtime-env", str(job), "--num-gpus", "2",
                 "--num-cpus", "0.5", "--node-env", "CUDA_VISIBLE_DEVICES=3,5,6,7",
                 "--resource", "FURIOSA=1", "--format", "json"])
    assert r.exit_code == 0, r.stderr
    d = r.json
    assert {"env", "sources", "cwd", "pythonpath", "devices", "warnings"} <= set(d)
    assert d["env"]["A"] == "job"
    assert d["env"]["B"] == "task"
    assert d["env"]["C"] == "task-c"
    assert set(d["env"]["CUDA_VISIBLE_DEVICES"].split(",")) == {"3", "5"}
    assert d["env"]["FURIOSA_DEVICES"] == "npu:0"
    assert d["env"]["NEURON_RT_VISIBLE_CORES"] is None
    assert d["sources"]["A"] == "job runtime_env"
    assert d["sources"]["B"] == "task runtime_env"
    assert d["env"]["OMP_NUM_THREADS"] == "1"


SERVE = """\
applications:
  - name: llm
    import_path: llm:app
    runtime_env: {env_vars: {MODEL: big}}
  - name: web
    import_path: web:app
    runtime_env: {env_vars: {MODEL: none, PORT: "80"}}
"""


def test_serve_config_application_by_name(tmp_path) -> None:
    cfg = write(tmp_path, "serve.yaml", SERVE)
    web = run_cli(["explain", str(cfg), "--app", "web", "--format", "json"])
    assert web.exit_code == 0, web.stderr
    assert (web.json["env"]["MODEL"], web.json["env"]["PORT"]) == ("none", "80")
    assert "applications" not in web.json["env"]
    unnamed = run_cli(["explain", str(cfg)])
    assert unnamed.exit_code == 2
    assert "2 applications" in unnamed.stderr
    assert "llm, web" in unnamed.stderr
    wrong = run_cli(["explain", str(cfg), "--app", "nope"])
    assert wrong.exit_code == 2
    assert "llm, web" in wrong.stderr
    single = write(tmp_path, "one.yaml", SERVE.split("  - name: web", maxsplit=1)[0])
    only = run_cli(["explain", str(single), "--format", "json"])
    assert only.exit_code == 0, only.stderr
    assert only.json["env"]["MODEL"] == "big"
    plain = write(tmp_path, "plain.yaml", "env_vars: {A: '1'}\n")
    assert run_cli(["explain", str(plain), "--app", "llm"]).exit_code == 2


def test_validation_errors_exit_1() -> None:
    r = run_cli(["explain", "--num-gpus", "1.5", "--resource", "TPU=3", "-f", "json"])
    assert r.exit_code == 1
    assert len(r.json["errors"]) == 2


@pytest.mark.parametrize("fmt", ["dotenv", "shell"])
def test_rejected_request_prints_no_values_for_a_shell(fmt: str) -> None:
    r = run_cli(["explain", "--num-gpus", "1.5", "--resource", "TPU=3", "-f", fmt])
    assert r.exit_code == 1
    assert r.stdout == ""
    assert "GPU=1.5" in r.stderr
    assert "TPU=3" in r.stderr


def test_text_dotenv_shell_and_redaction(tmp_path) -> None:
    rte = write(tmp_path, "r.yaml", "env_vars:\n  API_TOKEN: hunter2\n  X: 'a b'\n")
    r = run_cli(["explain", str(rte), "--num-gpus", "1"])
    assert r.exit_code == 0
    assert "CUDA_VISIBLE_DEVICES" in r.stdout
    assert "hunter2" not in r.stdout
    sh = run_cli(["explain", str(rte), "-f", "shell", "--show-secrets"]).stdout
    assert "export API_TOKEN=hunter2" in sh
    assert "export X='a b'" in sh
    for fmt in ("dotenv", "shell"):  # a sourced file never sets a placeholder for a value
        refused = run_cli(["explain", str(rte), "-f", fmt])
        assert refused.exit_code == 2
        assert refused.stdout == ""
        assert "API_TOKEN" in refused.stderr
        assert "--show-secrets" in refused.stderr


@pytest.mark.parametrize("fmt", ["dotenv", "shell"])
def test_values_known_only_on_the_node_are_never_set_by_a_sourced_file(tmp_path, fmt) -> None:
    """PYTHONPATH under <session_dir>, PATH through the plugin's <venv key>: a shell that
    sources the output must not set them to a placeholder; they stay visible, commented out."""
    (tmp_path / "app").mkdir()
    rte = write(tmp_path, "r.yaml", f"working_dir: {tmp_path / 'app'}\n"
                "rtenv: {pip: [six]}\nenv_vars: {A: '1'}\n")
    r = run_cli(["explain", str(rte), "-f", fmt, "--node-env", "PATH=/usr/bin"])
    assert r.exit_code == 0, r.stderr
    export = "export " if fmt == "shell" else ""
    assert f"{export}A=1" in r.stdout.splitlines()
    for line in r.stdout.splitlines():
        assert line.startswith("#") or not re.search(r"<[^>]+>", line), line
    assert any(line.startswith(f"# {export}PYTHONPATH='<session_dir>/") and
               line.endswith("known only on the node") for line in r.stdout.splitlines())
    assert any(line.startswith(f"# {export}VIRTUAL_ENV=") for line in r.stdout.splitlines())
    import subprocess

    script = 'set -a; . /dev/stdin; echo "$A|$PYTHONPATH"'
    sourced = subprocess.run(["env", "-i", "sh", "-c", script], input=r.stdout,
                             capture_output=True, text=True, check=True)
    assert sourced.stdout.strip() == "1|"


def test_settings_with_secret_sounding_names_are_not_redacted(tmp_path) -> None:
    rte = write(tmp_path, "r.yaml", "env_vars:\n  TOKENIZERS_PARALLELISM: 'false'\n"
                "  MAX_TOKENS: '4096'\n  WANDB_API_KEY: ${WANDB_API_KEY}\n")
    dot = run_cli(["explain", str(rte), "-f", "dotenv"])
    assert dot.exit_code == 0, dot.stderr
    assert "TOKENIZERS_PARALLELISM=false" in dot.stdout
    assert "MAX_TOKENS=4096" in dot.stdout
    assert "<redacted>" not in dot.stdout


def test_compare_and_reuse_key() -> None:
    d = run_cli(["explain", "--gpus", "0", "--compare", "gpus=1", "-f", "json"]).json
    assert d["reuse_key"]["allocated_instances"] == {"GPU": [0]}
    assert d["compare"]["ray_2_60_reusable"] is True
    assert d["compare"]["pr_63327_reusable"] is False


def test_usage_errors() -> None:
    assert run_cli(["explain", "--gpus", "0", "--num-gpus", "1"]).exit_code == 2
    assert run_cli(["explain", "--resource", "TPU"]).exit_code == 2
    assert run_cli(["explain", "--verify"]).exit_code == 2


@pytest.mark.parametrize("args", [["--num-cpus", "1.797693134862316e+304"],
                                  ["--num-gpus", "1e300"], ["--num-cpus", "inf"],
                                  ["--resource", "TPU=1e305"], ["--num-gpus", "nan"]])
def test_amounts_ray_cannot_hold_are_usage_errors(args: list[str]) -> None:
    # a finite amount past Ray's 64-bit fixed point overflowed into "internal error" before
    res = run_cli(["explain", *args])
    assert res.exit_code == 2, res.stderr
    assert "internal error" not in res.stderr
    assert "between 0 and" in res.stderr
    assert "hint:" in res.stderr


def test_node_env_file(tmp_path) -> None:
    f = write(tmp_path, "node.env", "# raylet\nexport CUDA_VISIBLE_DEVICES=2,4\nFOO='x'\n")
    d = run_cli(["explain", "--node-env-file", str(f), "--gpus", "1", "-f", "json"]).json
    assert d["env"]["CUDA_VISIBLE_DEVICES"] == "4"
    assert d["sources"]["FOO"] == "node env"


def test_process_imports_no_ray() -> None:
    # its speed is measured by benchmarks/bench_explain.py, not by a timed test
    r = run_process(["explain", "--num-gpus", "1", "-f", "json"])
    assert r.exit_code == 0
    code = ("import sys, runpy; sys.argv=['rtenv','explain','--num-gpus','1','-f','json'];"
            "import rtenv_cli.cli.main as m\ntry:\n    m.main()\nexcept SystemExit: pass\n"
            "assert 'ray' not in sys.modules and 'pynvml' not in sys.modules, 'heavy import'\n"
            "assert 'rtenv_cli.core.rayplugin.schema' not in sys.modules, 'no rtenv field'\n"
            "assert 'rtenv_cli.core.spec.limits' not in sys.modules, 'no rtenv.limits'\n")
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=False, timeout=60)
    assert p.returncode == 0, p.stderr


@pytest.mark.ray
@pytest.mark.slow
def test_verify_against_live_head(ray_cluster) -> None:
    env = ray_cluster.client_env()
    ok = run_cli(["explain", "--num-gpus", "1", "--resource", "TPU=2", "--verify",
                  "--address", ray_cluster.address, "-f", "json"], env=env)
    assert ok.exit_code == 0, ok.stdout + ok.stderr
    assert ok.json["ok"] is True
    assert ok.json["compared"] > 5
    # a wrong belief about the node (a preset list it doesn't have) must show up as a diff
    bad = run_cli(["explain", "--num-gpus", "1", "--node-env", "CUDA_VISIBLE_DEVICES=3,5",
                   "--verify", "--address", ray_cluster.address], env=env)
    assert bad.exit_code == 1
    assert 'CUDA_VISIBLE_DEVICES: "3" -> "0"' in bad.stdout


@pytest.mark.ray
def test_verify_refuses_an_infeasible_request_and_takes_a_dashboard_url(ray_cluster) -> None:
    env = ray_cluster.client_env()
    # the head has 8 GPUs: Ray would keep a 9-GPU task pending forever
    gpus = run_process(["explain", "--num-gpus", "9", "--verify", "--address",
                        ray_cluster.address], env=env, timeout=90)
    assert gpus.exit_code == 1
    assert "infeasible: needs GPU=9, the cluster has 8" in gpus.stderr
    assert gpus.stdout == ""
    assert "Traceback" not in gpus.stderr
    # the help accepts a dashboard URL: it is turned into the GCS address
    ok = run_process(["explain", "--num-gpus", "1", "--verify", "--address",
                      ray_cluster.dashboard_url, "-f", "json"], env=env, timeout=90)
    assert ok.exit_code == 0, ok.stderr
    assert ok.json["ok"] is True
    missing = run_process(["explain", "--resource", "NO_SUCH=1", "--verify", "--address",
                           ray_cluster.dashboard_url], env=env, timeout=90)
    assert missing.exit_code == 1
    assert "needs NO_SUCH=1, the cluster has 0" in missing.stderr


def test_verify_address_must_be_a_ray_cluster() -> None:
    r = run_cli(["explain", "--verify", "--address", "file:///shared/dir"])
    assert r.exit_code == 2
    assert "cannot use file:///shared/dir, a shared directory" in r.stderr
    assert "6379" in r.stderr


def test_address_help_is_about_the_verify_probe() -> None:
    text = run_cli(["explain", "--help"]).stdout
    assert "fastest push" not in text
    assert "--verify" in text.split("--address", 1)[1][:200]


def test_verify_on_an_unreachable_gcs_says_so() -> None:
    from tests.support.ports import free_port

    r = run_cli(["explain", "--num-gpus", "1", "--verify", "--address",
                 f"127.0.0.1:{free_port()}"])
    assert r.exit_code == 1
    assert "cannot reach the Ray GCS" in r.stderr
    assert r.stdout == ""


def test_reuse_key_and_compare_read_as_text_not_python() -> None:
    result = run_cli(["explain", "--gpus", "0,1", "--compare", "gpus=1"])
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert re.search(r"^reuse key: runtime_env [0-9a-f]{16}, allocated GPU 0,1$", out, re.M)
    assert "--compare: could one worker serve both allocations? Ray 2.60: yes; if Ray set " \
        "accelerator variables when a worker starts (the proposal of draft Ray PR #63327, not " \
        "merged): no" in out
    assert "allocated instances differ: GPU 0,1 vs GPU 1 (with the variables set when the " \
        "worker starts, it would keep the first allocation's)" in out
    assert 'CUDA_VISIBLE_DEVICES "0,1" vs "1"' in out
    assert "{'" not in out
    assert "[0, 1]" not in out
