"""examples/: every workflow folder runs, for real, as its README shows.

- Each folder's README commands run in a copy of the folder (a Ray head from the session fixture
  when the README uses RAY_ADDRESS, else the embedded store) and must print what the README shows
  (timings and ids masked) with the exit code shown. `RTENV_UPDATE_EXAMPLES=1` rewrites the
  READMEs' outputs from such a run. The serve folder deploys its app on the session head (on a
  free HTTP port), gets the pushed code's answer and shuts Serve down again.
- Every runtime_env and Serve config outside examples/invalid/ is valid; every sample in
  examples/invalid/ fails with exactly the codes its `# expect:` line names.
- The parts a README cannot replay: push --watch re-pushing and resubmitting on an edit, the CI
  workflow's validate steps and the pre-commit hook.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.cli import default_signals, run_cli
from tests.support.examples import (
    EXAMPLES,
    ROOT,
    Sandbox,
    comparable,
    readme_steps,
    write_block_outputs,
)
from tests.support.ports import free_port
from tests.support.ray_head import RayHead
from tests.support.wait import until

FOLDERS = sorted(p.name for p in EXAMPLES.iterdir() if (p / "README.md").exists())
# files in examples/ that are not runtime_envs, Serve configs or job specs
NOT_CONFIGS = {"ci/github-workflow.yml", "ci/pre-commit-config.yaml"}
# Serve configs that name a local directory: Serve refuses them (RTE181) until `rtenv push`
PUSH_FIRST = {"serve/serve_config.yaml"}
UPDATE = os.environ.get("RTENV_UPDATE_EXAMPLES") == "1"


def _needs_head(folder: str) -> bool:
    return "RAY_ADDRESS" in (EXAMPLES / folder / "README.md").read_text(encoding="utf-8")


def _sandbox(tmp_path: Path, folder: str, head: RayHead | None) -> Sandbox:
    env = dict(os.environ)
    box = Sandbox.create(tmp_path, sorted({folder, "invalid"}), env)
    if head is not None:
        box.env.update(head.client_env())
        box.env["HOME"] = env.get("HOME", "")  # the user's: uv's cache, so builds stay quick
        box.env["RAY_ADDRESS"] = head.address  # the GCS: rtenv, `ray job` and ray.init take it
        box.env["RAY_DASHBOARD_ADDRESS"] = head.dashboard_url  # `serve`'s default --address
        box.subs += [(head.dashboard_url, "http://127.0.0.1:8265"),
                     (head.address, "127.0.0.1:6379")]
        if "RTENV_HOME" in head.env:  # the plugin's store on the node, as the README sets it
            box.subs.append((head.env["RTENV_HOME"], "/var/cache/rtenv"))
    return box


SERVE_PORT = 8000  # the HTTP port examples/serve shows; each run deploys on a free one


def _serve_on_free_port(box: Sandbox) -> int:
    """Point the sandbox's Serve config, and the README's commands and output, at a free port."""
    port = free_port()
    config = box.root / "examples/serve/serve_config.yaml"
    text = config.read_text(encoding="utf-8")
    assert f"port: {SERVE_PORT}\n" in text
    config.write_text(text.replace(f"port: {SERVE_PORT}\n", f"port: {port}\n"), encoding="utf-8")
    box.aliases.append((f"127.0.0.1:{SERVE_PORT}", f"127.0.0.1:{port}"))
    box.subs += [(f"port: {port}", f"port: {SERVE_PORT}"),
                 (f"127.0.0.1:{port}", f"127.0.0.1:{SERVE_PORT}")]
    return port


def _serve_actors(head: RayHead) -> dict[str, str]:
    """Serve's actors on the head (controller, proxy, replicas): class name -> state."""
    url = f"{head.dashboard_url}/api/v0/actors?limit=1000"
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback URL we built
        actors = json.load(resp)["data"]["result"]["result"]
    return {a["class_name"]: a["state"] for a in actors
            if a["class_name"].startswith(("Serve", "ProxyActor"))}


def _serve_shutdown(head: RayHead) -> None:
    """What `serve shutdown -y` sends: Serve's controller, proxies and replicas go."""
    url = f"{head.dashboard_url}/api/serve/applications/"
    request = urllib.request.Request(url, method="DELETE")  # noqa: S310 - loopback URL we built
    with urllib.request.urlopen(request, timeout=60):  # noqa: S310 - loopback URL we built
        pass


def _serve_gone(head: RayHead, port: int) -> bool:
    """Whether every Serve actor is dead and its HTTP port closed."""
    return all(s == "DEAD" for s in _serve_actors(head).values()) and _port_free(port)


def _needs_plugin(folder: str) -> bool:
    """A folder about rtenv's Ray plugin: its head loads it (its README runs `rtenv ray-env`;
    a mere mention, as in the zip path's note, is not enough)."""
    return "$ rtenv ray-env" in (EXAMPLES / folder / "README.md").read_text(encoding="utf-8")


@pytest.fixture
def head(request: pytest.FixtureRequest) -> RayHead | None:
    folder = request.node.callspec.params["folder"]
    if _needs_plugin(folder):
        return request.getfixturevalue("plugin_head")
    return request.getfixturevalue("ray_cluster") if _needs_head(folder) else None


@pytest.fixture
def plugin_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayHead]:
    """A one-node head started with `rtenv ray-env`'s variables (its own store), this checkout
    on its agent's path: tests/core/rayplugin's 2-node cluster covers the nodes' side."""
    from tests.core.rayplugin.conftest import plugin_env

    head = RayHead(env=plugin_env(tmp_path_factory.mktemp("ray-nodes-home"))).start()
    try:
        yield head
    finally:
        head.stop()


def _marks(folder: str) -> list[pytest.MarkDecorator]:
    if _needs_head(folder):
        return [pytest.mark.ray, pytest.mark.slow]
    return [pytest.mark.slow] if folder in {"quickstart", "slurm"} else []  # they build envs


@pytest.mark.parametrize("folder", [pytest.param(f, marks=_marks(f)) for f in FOLDERS])
def test_readme_commands_run_as_shown(folder: str, head: RayHead | None, tmp_path: Path,
                                      request: pytest.FixtureRequest) -> None:
    readme = EXAMPLES / folder / "README.md"
    text = readme.read_text(encoding="utf-8")
    steps = readme_steps(text)
    assert steps, f"{readme}: no ```console block with `$ ` commands"
    box = _sandbox(tmp_path, folder, head)
    serve_port = _serve_on_free_port(box) if folder == "serve" else 0
    if serve_port and head is not None:  # a failed step must not leave Serve on the shared head
        request.addfinalizer(lambda: _serve_gone(head, serve_port) or _serve_shutdown(head))
    agent_ports: list[int] = []  # local/srun's per-node agents (slurm)
    if folder == "slurm":
        results, agent_ports = _run_slurm(box, steps, tmp_path)
    else:
        results = [box.run(step.command) for step in steps]
    if UPDATE:
        readme.write_text(write_block_outputs(text, results), encoding="utf-8")
        steps = readme_steps(readme.read_text(encoding="utf-8"))
    for step, got in zip(steps, results, strict=True):
        shown = "\n".join(got.output)
        assert got.exit_code == step.exit_code, f"$ {step.command}\n{shown}"
        assert comparable(got.output) == comparable(step.output), f"$ {step.command}\n{shown}"
    if folder == "slurm":  # the batch script stops every agent it started, and they clean up
        assert all(_port_free(p) for p in agent_ports)
        assert not list((box.root / ".rtenv-slurm/1.0/ready").iterdir())  # ready files gone
        assert not list((tmp_path / "nodes").glob("node*/rtenv-agent-*"))  # stores removed
    if folder == "serve":  # the replica ran the pushed package; Serve left the head as it was
        assert head is not None
        deploy = yaml.safe_load((box.root / "deploy.yaml").read_text())
        [app] = deploy["applications"]
        package = app["runtime_env"]["working_dir"].removeprefix("gcs://").removesuffix(".zip")
        [answer] = [r for r in results if r.command.startswith("curl ")]
        assert answer.output == [f"hello from serve, from package {package}"]
        until(lambda: _serve_gone(head, serve_port),
              what=lambda: f"Serve gone from the head: {_serve_actors(head)}")


def _run_slurm(box: Sandbox, steps: list, tmp_path: Path) -> tuple[list, list[int]]:
    """The slurm README's steps, local/srun's per-node agents on two free ports. Those ports
    are picked from the kernel's ephemeral range, which every outgoing connection of the
    suite's Ray head also draws from: one taken between the pick and the agent's bind fails
    that node's agent (`port ... is in use`), and the batch script then stops, naming the node.
    A run that lost such a race is run again, from a clean shared directory, on two other
    ports (at most 3 runs); the gate's deadline, 60 s, bounds a run whose agent hangs."""
    base_subs = list(box.subs)
    for _attempt in range(3):
        ports = _two_free_ports()
        box.env.update(FAKE_SRUN_PORT=str(ports[0]), FAKE_SRUN_DIR=str(tmp_path / "nodes"),
                       READY_TIMEOUT="60")
        box.subs = [*base_subs, *((f"127.0.0.1:{p}", f"127.0.0.1:{8790 + i}")
                                  for i, p in enumerate(ports))]
        results = [box.run(step.command) for step in steps]
        raced = any(f"port {p} on 127.0.0.1 is in use" in line
                    for r in results for line in r.output for p in ports)
        if not raced:
            break
        shutil.rmtree(box.root / ".rtenv-slurm", ignore_errors=True)
    return results, ports


def _two_free_ports() -> list[int]:
    """Two consecutive free ports, as local/srun gives node i the port FAKE_SRUN_PORT + i."""
    while True:
        port = free_port()
        if port < 65535 and _port_free(port + 1):
            return [port, port + 1]


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _configs() -> list[str]:
    found = []
    for path in sorted(EXAMPLES.rglob("*")):
        rel = path.relative_to(EXAMPLES).as_posix()
        if path.suffix in {".yaml", ".yml", ".json"} and not rel.startswith("invalid/") \
                and rel not in NOT_CONFIGS | PUSH_FIRST:
            found.append(f"examples/{rel}")
    return found


def test_every_example_config_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    configs = _configs()
    assert len(configs) >= 8
    monkeypatch.chdir(ROOT)  # relative working_dirs resolve against the repository root
    result = run_cli(["validate", "--format", "json", *configs])
    assert result.exit_code == 0, result.stdout
    assert {f["path"] for f in result.json["files"] if f["valid"]} == set(configs)


def test_serve_configs_with_local_directories_need_a_push(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.chdir(ROOT)
    for rel in sorted(PUSH_FIRST):
        result = run_cli(["validate", "--format", "json", f"examples/{rel}"])
        assert result.exit_code == 1, result.stdout
        [entry] = result.json["files"]
        assert {d["code"] for d in entry["diagnostics"]} == {"RTE181"}


def _expected_codes(path: Path) -> set[str]:
    """The codes a sample names: its `# expect: CODE ...` line, or (JSON has no comments) the
    examples/invalid/README.md table row of its name."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        readme = (path.parent / "README.md").read_text(encoding="utf-8")
        text = next(line for line in readme.splitlines() if f"`{path.name}`" in line)
    codes = re.findall(r"expect:\s*((?:RTE\d{3}\s*)+)", text)
    assert codes, f"{path}: no `expect: RTE...` line"
    return set(codes[0].split())


INVALID = sorted(p.name for p in (EXAMPLES / "invalid").iterdir() if p.name != "README.md")


@pytest.mark.parametrize("name", INVALID)
def test_invalid_samples_fail_with_the_codes_they_name(name: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    path = f"examples/invalid/{name}"
    result = run_cli(["validate", "--format", "json", "--fail-on", "warning", path])
    assert result.exit_code == 1, result.stdout
    [entry] = result.json["files"]
    assert {d["code"] for d in entry["diagnostics"]} == _expected_codes(ROOT / path)


def test_examples_index_lists_every_folder() -> None:
    index = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    top = (ROOT / "README.md").read_text(encoding="utf-8").split("## Examples", 1)[1]
    for folder in FOLDERS:
        assert f"({folder}/)" in index, f"examples/README.md does not link {folder}/"
        assert f"(examples/{folder}/)" in top.split("\n## ", 1)[0], \
            f"README's Examples section does not link examples/{folder}/"


# -- push --watch ---------------------------------------------------------------------------------

def _jobs(head: RayHead) -> list[dict[str, object]]:
    with urllib.request.urlopen(f"{head.dashboard_url}/api/jobs/", timeout=10) as resp:  # noqa: S310 - loopback URL we built
        return list(json.load(resp))


def _job_logs(head: RayHead, job: dict[str, object]) -> str:
    url = f"{head.dashboard_url}/api/jobs/{job['submission_id']}/logs"
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback URL we built
        return str(json.load(resp)["logs"])


def _wait_job(head: RayHead, uri: str) -> dict[str, object]:
    """The job submitted with working_dir `uri`, once it has finished."""

    def finished() -> dict[str, object] | None:
        for job in _jobs(head):
            env = job.get("runtime_env") or {}
            if isinstance(env, dict) and env.get("working_dir") == uri \
                    and job["status"] in {"SUCCEEDED", "FAILED", "STOPPED"}:
                return job
        return None

    return until(finished, what=f"a finished job with working_dir {uri}")


@pytest.fixture
def watch_session(ray_cluster: RayHead, tmp_path: Path) -> Iterator[tuple[Sandbox, Path]]:
    box = _sandbox(tmp_path, "push-watch", ray_cluster)
    events = tmp_path / "events.jsonl"
    readme = (EXAMPLES / "push-watch" / "README.md").read_text(encoding="utf-8")
    shown = re.search(r"```bash\n(rtenv push --watch .*?)\n```", readme, re.S)
    assert shown, "examples/push-watch/README.md: no ```bash block with the watch command"
    command = shown.group(1).replace("\\\n", " ") + " --format json"  # as the README runs it
    with events.open("w") as out, (tmp_path / "watch.err").open("w") as err:
        proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=box.root, env=box.env,
                                stdout=out, stderr=err, start_new_session=True,
                                preexec_fn=default_signals)  # noqa: PLW1509 - no threads here
    try:
        yield box, events
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _pushes(events: Path, n: int) -> list[dict[str, object]]:
    def lines() -> list[dict[str, object]] | None:
        found = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
        return found if len(found) >= n else None

    return until(lines, what=lambda: f"{n} pushes: {events.read_text()}")


def _wait_text(path: Path, text: str) -> None:
    until(lambda: text in path.read_text(), what=f"{text!r} in {path}")


@pytest.mark.ray
@pytest.mark.slow
def test_push_watch_resubmits_the_job_on_an_edit(ray_cluster: RayHead,
                                                 watch_session: tuple[Sandbox, Path]) -> None:
    box, events = watch_session
    err = box.root.parent / "watch.err"
    [first] = _pushes(events, 1)
    job = _wait_job(ray_cluster, str(first["uri"]))
    assert job["status"] == "SUCCEEDED"
    assert "train: step=0.1 run=push-watch" in _job_logs(ray_cluster, job)
    # `ray job submit` follows the job: its logs stream to the watch's stderr
    _wait_text(err, "train: step=0.1 run=push-watch")

    train = box.root / "examples/push-watch/src/train.py"
    train.write_text(train.read_text().replace("STEP = 0.1", "STEP = 0.2"))
    second = _pushes(events, 2)[1]
    assert (second["modified"], second["added"], second["trigger"]) == (1, 0, "change")
    assert second["uri"] != first["uri"]
    job = _wait_job(ray_cluster, str(second["uri"]))
    assert job["status"] == "SUCCEEDED"
    assert "train: step=0.2 run=push-watch" in _job_logs(ray_cluster, job)
    _wait_text(err, "train: step=0.2 run=push-watch")
    assert "warning" not in err.read_text()  # no command failed


# -- CI -------------------------------------------------------------------------------------------

def _workflow_validate_runs() -> list[str]:
    workflow = yaml.safe_load((EXAMPLES / "ci/github-workflow.yml").read_text(encoding="utf-8"))
    steps = [s for job in workflow["jobs"].values() for s in job["steps"]]
    runs = [s["run"] for s in steps if "rtenv validate" in s.get("run", "")]
    assert any("--format github" in r for r in runs)
    assert any("--format sarif" in r for r in runs)
    assert any(s.get("uses", "").startswith("github/codeql-action/upload-sarif") for s in steps)
    assert any("pre-commit try-repo . rtenv-validate" in s.get("run", "") for s in steps)
    return runs


def test_ci_workflow_validate_steps_pass(tmp_path: Path) -> None:
    box = Sandbox.create(tmp_path, ["ci"], dict(os.environ))
    runs = _workflow_validate_runs()
    for run in runs:
        result = box.run(run, timeout=60)
        assert result.exit_code == 0, "\n".join([run, *result.output])
    sarif = json.loads((box.root / "rtenv.sarif").read_text())
    assert sarif["version"] == "2.1.0"
    [sarif_run] = sarif["runs"]
    # SARIF always carries infos (code scanning shows them as notes); nothing above that
    assert [r["ruleId"] for r in sarif_run["results"] if r["level"] != "note"] == []


def test_pre_commit_hook_matches_the_sample_and_passes_on_the_ci_configs(tmp_path: Path) -> None:
    [hook] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    sample = yaml.safe_load((EXAMPLES / "ci/pre-commit-config.yaml").read_text(encoding="utf-8"))
    [local] = sample["repos"][0]["hooks"]
    keys = ("id", "entry", "files", "pass_filenames")
    assert [local[k] for k in keys] == [hook[k] for k in keys]
    # pre-commit runs the hook when a staged file matches `files`: a runtime_env, a Serve config
    # or a job spec by its name
    configs = sorted(p.relative_to(ROOT).as_posix() for p in (EXAMPLES / "ci").rglob("*"))
    assert [p for p in configs if re.search(hook["files"], p)] == [
        "examples/ci/configs/serve_config.yaml", "examples/ci/configs/train_runtime_env.yaml",
        "examples/ci/configs/training_runtime_env.yaml"]
    assert re.search(hook["files"], "deploy/train_job.yaml")
    # and runs the entry alone (no file names): validate's discovery, which keeps a job spec
    # and leaves out a CI workflow named jobs.yaml
    assert hook["pass_filenames"] is False
    box = Sandbox.create(tmp_path, ["ci"], dict(os.environ))
    (box.root / "deploy").mkdir()
    (box.root / "deploy" / "train_job.yaml").write_text(
        "entrypoint: python train.py\nruntime_env:\n  env_vars: {EPOCHS: '3'}\n")
    (box.root / ".github" / "workflows").mkdir(parents=True)
    (box.root / ".github" / "workflows" / "jobs.yaml").write_text(
        "on: [push]\njobs:\n  t: {runs-on: ubuntu-latest, steps: [{run: echo}]}\n")
    result = box.run(hook["entry"], timeout=60)
    output = "\n".join(result.output)
    assert result.exit_code == 0, output
    assert "deploy/train_job.yaml" in output
    assert "examples/ci/configs/serve_config.yaml" in output
    assert "jobs.yaml" not in output


# -- Slurm: the readiness gate --------------------------------------------------------------------

@pytest.mark.slow
def test_slurm_job_step_waits_for_every_agent(tmp_path: Path) -> None:
    """A node whose agent never comes up (its port is taken) keeps the job step from starting:
    the batch script stops at once, naming the node (not at its deadline, here far beyond the
    run's own bound), and stops the agents that did start."""
    import socket

    box = Sandbox.create(tmp_path, ["slurm"], dict(os.environ))
    with socket.socket() as taken:
        # node0's port, held from the start (a port picked free and bound later can be taken
        # in between: the kernel's ephemeral range is every outgoing connection's too)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        box.env.update(FAKE_SRUN_PORT=str(port), FAKE_SRUN_DIR=str(tmp_path / "nodes"),
                       SLURM_JOB_ID="7", SLURM_JOB_NUM_NODES="2", READY_TIMEOUT="3600",
                       PATH=f"{box.root / 'examples/slurm/local'}:{box.env['PATH']}")
        result = box.run("bash examples/slurm/rtenv.sbatch", timeout=120)
    output = "\n".join(result.output)
    assert result.exit_code == 1, output
    assert "error: the agent on node0 exited (status 2) before it was ready" in output
    assert "six 1.17.0" not in output  # no job step ran
    ready = {p.name for p in (box.root / ".rtenv-slurm/7.0/ready").iterdir()}
    assert "node0" not in ready
    assert _port_free(port + 1)  # node1's agent, if it started, was stopped with the script
