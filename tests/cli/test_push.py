"""`rtenv push` end to end against real Ray 2.60 heads, plus ls-files / check-ignore."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rtenv_cli.core.errors import PackageTooLargeError, TransportError
from rtenv_cli.core.transport.ray_dashboard import RayDashboardTarget
from tests.support.cli import run_cli

DRIVER = """
import json, ray
env = json.load(open({env_file!r}))
ray.init(runtime_env=env)

@ray.remote
def f(module, data):
    import importlib
    mod = importlib.import_module(module)
    return mod.X, open(data).read() if data else ""

for module, data in {probes!r}:
    print("RESULT=" + json.dumps(ray.get(f.remote(module, data), timeout=120)))
"""


def project(tmp_path: Path, marker: str = "v1") -> Path:
    src = tmp_path / "src"
    (src / "mymod").mkdir(parents=True)
    (src / "mymod" / "__init__.py").write_text(f"X = {marker!r}\n")
    (src / "data.txt").write_text(f"data-{marker}\n")
    (src / "big.ckpt").write_text("ignored")
    (src / ".gitignore").write_text("*.ckpt\n")
    return src


def project_with_module(tmp_path: Path, marker: str, module: str) -> tuple[Path, Path]:
    """project() as working_dir plus a local py_module `module`; (src, runtime_env file)."""
    src = project(tmp_path, marker)
    lib = tmp_path / "libs" / module
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text(f"X = {module!r}\n")
    spec = tmp_path / "runtime_env.yaml"
    spec.write_text(f"working_dir: {src}\npy_modules: [{lib}]\n")
    return src, spec


def run_tasks(head, env_file: Path, *probes: tuple[str, str]) -> list[list]:
    """One driver with the runtime_env of `env_file`: per (module, data file) a task imports
    the module and reads the file ("": none); their [X, text] answers. One driver for several
    checks: each costs a driver's start (~4 s here), the tasks a fraction of that."""
    probes = probes or (("mymod", "data.txt"),)
    proc = head.run_driver(DRIVER.format(env_file=str(env_file), probes=list(probes)))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT=")]
    assert len(lines) == len(probes), proc.stderr[-3000:]
    return [json.loads(ln.removeprefix("RESULT=")) for ln in lines]


def run_task(head, env_file: Path, module: str = "mymod", data: str = "data.txt") -> list:
    [result] = run_tasks(head, env_file, (module, data))
    return result


def address_of(head, via: str) -> str:
    """The dashboard URL, or the GCS address (no scheme: Ray's cluster address form)."""
    return head.dashboard_url if via == "dashboard" else head.address


@pytest.mark.ray
@pytest.mark.parametrize("via", ["dashboard", "gcs"])
def test_push_directory_then_a_real_task_imports_and_reads(ray_cluster, tmp_path: Path,
                                                           via: str) -> None:
    src = project(tmp_path, f"v1-{via}")  # content differs per variant: a fresh package each
    out = tmp_path / "pushed.json"
    res = run_cli(["push", str(src), "--address", address_of(ray_cluster, via), "-o", str(out),
                   "--format", "json"])
    assert res.exit_code == 0, res.stderr
    pkg = res.json["packages"][0]
    assert pkg["uploaded"] is True
    assert pkg["file_count"] == 3
    assert pkg["uri"].startswith("gcs://_ray_pkg_")
    assert json.loads(out.read_text())["working_dir"] == pkg["uri"]
    assert run_task(ray_cluster, out) == [f"v1-{via}", f"data-v1-{via}\n"]
    again = run_cli(["push", str(src), "--address", address_of(ray_cluster, via), "-o",
                     str(out), "--format", "json"])
    assert again.json["packages"][0]["uploaded"] is False
    assert again.json["bytes_uploaded"] == 0
    assert again.json["pin_seconds"] == 600


@pytest.mark.ray
@pytest.mark.parametrize("via", ["dashboard", "gcs"])
def test_push_with_token_auth(ray_cluster_token, tmp_path: Path, via: str) -> None:
    src = project(tmp_path, f"tok-{via}")
    out = tmp_path / "pushed.json"
    address = address_of(ray_cluster_token, via)
    denied = run_cli(["push", str(src), "--address", address, "-o", str(out)],
                     env={"HOME": str(tmp_path)})
    assert denied.exit_code == 1
    assert "token" in denied.stderr.lower()
    assert "RAY_AUTH_TOKEN" in denied.stderr
    assert "Traceback" not in denied.stderr
    wrong = run_cli(["push", str(src), "--address", address],
                    env={"RAY_AUTH_TOKEN": "wrong-token-value-000000000000"})
    assert wrong.exit_code == 1
    assert ("403" if via == "dashboard" else "refused") in wrong.stderr
    token_file = tmp_path / "tok"
    token_file.write_text(ray_cluster_token.token + "\n")
    ok = run_cli(["push", str(src), "--address", address, "-o",
                  str(out), "--format", "json"], env={"RAY_AUTH_TOKEN_PATH": str(token_file)})
    assert ok.exit_code == 0, ok.stderr
    assert ok.json["packages"][0]["uploaded"] is True
    assert run_task(ray_cluster_token, out) == [f"tok-{via}", f"data-tok-{via}\n"]


@pytest.mark.ray
def test_too_large_is_refused_before_upload_and_a_real_413_maps_the_same(
        ray_cluster, tmp_path: Path) -> None:
    src = tmp_path / "big"
    (src / "weights").mkdir(parents=True)
    with (src / "weights" / "w.bin").open("wb") as fh:  # incompressible: the zip stays big
        for _ in range(101):
            fh.write(os.urandom(1 << 20))
    (src / "main.py").write_text("X = 1\n")
    res = run_cli(["push", str(src), "--address", ray_cluster.dashboard_url])
    assert res.exit_code == 1
    assert "100 MiB" in res.stderr
    assert "weights/" in res.stderr
    assert "--stage-to" in res.stderr
    assert "--address 127.0.0.1:6379" in res.stderr  # the GCS route takes up to 512 MiB
    target = RayDashboardTarget(ray_cluster.dashboard_url)
    target.max_upload_bytes = None  # skip our pre-check: let the server refuse it
    sparse = tmp_path / "sparse.zip"
    with sparse.open("wb") as fh:
        fh.truncate(100 * 1024 * 1024 + 1)
    with pytest.raises(PackageTooLargeError, match="upload limit"):
        target.upload("gcs://_ray_pkg_00000000000000ff.zip", sparse)


@pytest.mark.ray
def test_file_target_and_stage_to_are_consumed_by_ray(ray_cluster, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    src, spec = project_with_module(tmp_path, "shared", "otherlib")
    shared = tmp_path / "shared"
    out = tmp_path / "pushed.json"
    res = run_cli(["push", str(spec), "--to", shared.as_uri(), "-o", str(out), "--format",
                   "json"])
    assert res.exit_code == 0, res.stderr
    env = json.loads(out.read_text())
    assert env["working_dir"].startswith("file://")
    assert env["py_modules"][0].startswith("file")
    assert run_tasks(ray_cluster, out, ("mymod", "data.txt"), ("otherlib", "")) == [
        ["shared", "data-shared\n"], ["otherlib", ""]]
    # --stage-to: the cluster's limit is lowered so that a small package is "too large"
    monkeypatch.setattr(RayDashboardTarget, "max_upload_bytes", 100)
    (src / "data.txt").write_text("data-staged\n")
    staged = run_cli(["push", str(src), "--address", ray_cluster.dashboard_url, "--stage-to",
                      (tmp_path / "stage").as_uri(), "-o", str(out), "--format", "json"])
    assert staged.exit_code == 0, staged.stderr
    assert staged.json["packages"][0]["staged"] is True
    assert run_task(ray_cluster, out) == ["shared", "data-staged\n"]


@pytest.mark.ray
def test_stage_to_an_agent_is_fetched_by_ray_nodes(ray_cluster, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import requests

    from tests.support.agent import agent_process

    _src, spec = project_with_module(tmp_path, "agent-staged", "stagedlib")
    out = tmp_path / "pushed.json"
    monkeypatch.setattr(RayDashboardTarget, "max_upload_bytes", 100)  # everything is "too big"
    with agent_process(tmp_path / "agent-store", token="stage-token-123") as agent:  # noqa: S106 - test token
        res = run_cli(["push", str(spec), "--address", ray_cluster.dashboard_url,
                       "--stage-to", agent.url, "-o", str(out), "--format", "json"],
                      env={"RTENV_AGENT_TOKEN": "stage-token-123"})
        assert res.exit_code == 0, res.stderr
        env = json.loads(out.read_text())
        assert env["working_dir"].startswith(f"{agent.url}/download/")
        assert env["working_dir"].endswith(".zip")
        assert all(p["staged"] for p in res.json["packages"])
        # Ray's own nodes fetch it (no bearer token: the URL is the capability)
        assert run_tasks(ray_cluster, out, ("mymod", "data.txt"), ("stagedlib", "")) == [
            ["agent-staged", "data-agent-staged\n"], ["stagedlib", ""]]
        name = env["working_dir"].rsplit("/", 1)[1]
        assert requests.get(env["working_dir"], timeout=10).status_code == 200
        assert requests.get(f"{agent.url}/download/{'0' * 32}/{name}",
                            timeout=10).status_code == 404  # a guessed capability opens nothing


def test_dry_run_lists_sizes_and_ignored_python(tmp_path: Path) -> None:
    src = project(tmp_path)
    (src / "tools").mkdir()
    (src / "tools" / "x.py").write_text("")
    (src / ".rayignore").write_text("tools\n")
    res = run_cli(["push", str(src), "--dry-run"])
    assert res.exit_code == 0, res.stderr
    assert "largest:" in res.stderr
    assert "tools/ holds .py" in res.stderr
    assert "working_dir: gcs://_ray_pkg_" in res.stdout
    js = run_cli(["push", str(src), "--dry-run", "--format", "json"]).json
    assert js["packages"][0]["field"] == "working_dir"
    assert js["packages"][0]["ignored_py_dirs"] == [{"path": "tools",
                                                      "rule": ".rayignore:1:tools"}]
    assert js["packages"][0]["size_tree"]
    # a real push to the embedded store: the JSON report has the size tree too; the core
    # computes it only when asked (a text report of a push does not show it)
    pushed = run_cli(["push", str(src), "--format", "json"]).json
    assert pushed["packages"][0]["size_tree"] == js["packages"][0]["size_tree"]
    from rtenv_cli.core.push import push
    from rtenv_cli.core.transport.resolve import resolve_target

    assert push(src, target=resolve_target(None, None)).packages[0].size_tree == ()


def test_unreachable_target_and_root_excluded(tmp_path: Path) -> None:
    from tests.support.ports import free_port

    src = project(tmp_path)
    res = run_cli(["push", str(src), "--address", f"http://127.0.0.1:{free_port()}"])
    assert res.exit_code == 1
    assert "cannot reach" in res.stderr
    spec = tmp_path / "re.yaml"
    spec.write_text(f"working_dir: {src}\nexcludes: ['.*']\n")
    bad = run_cli(["push", str(spec), "--to", (tmp_path / "s").as_uri()])
    assert bad.exit_code == 1
    assert "3030303030303030" in bad.stderr


def test_py_module_collision_refused(tmp_path: Path) -> None:
    for name in ("mylib", "otherlib"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("X = 1\n")
    spec = tmp_path / "r.yaml"
    spec.write_text(f"py_modules: [{tmp_path / 'mylib'}, {tmp_path / 'otherlib'}]\n")
    res = run_cli(["push", str(spec), "--to", (tmp_path / "s").as_uri()])
    assert res.exit_code == 1
    assert "same content" in res.stderr


def test_ls_files_and_check_ignore(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = project(tmp_path)
    res = run_cli(["ls-files", str(src)])
    assert res.stdout.split() == [".gitignore", "data.txt", "mymod/__init__.py"]
    monkeypatch.chdir(src)
    ci = run_cli(["check-ignore", "-v", "big.ckpt", "data.txt"])
    assert ci.exit_code == 0
    assert ci.stdout == ".gitignore:1:*.ckpt\tbig.ckpt\n"
    none = run_cli(["check-ignore", "data.txt"])
    assert none.exit_code == 1
    assert none.stdout == ""


def test_transport_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(TransportError, match="only gcs://"):
        RayDashboardTarget("http://127.0.0.1:1").exists("https://x/y.zip")


def test_push_token_reaches_an_agent_that_requires_one(tmp_path: Path) -> None:
    """The 401 hint says `pass --token`: push has that flag, and it reaches the target."""
    from tests.support.agent import agent_process
    from tests.support.cli import run_process

    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "a.py").write_text("print(1)\n")
    env = {"RTENV_AGENT_TOKEN": ""}
    with agent_process(tmp_path / "agent-store", token="t0ken") as agent:  # noqa: S106 - test
        bad = run_process(["push", "proj", "--to", agent.url, "-f", "json"], cwd=str(tmp_path),
                          env=env)
        assert bad.exit_code == 1
        assert "refused the token" in bad.json["error"]["message"]
        assert "pass --token" in bad.stderr
        ok = run_process(["push", "proj", "--to", agent.url, "--token", "t0ken", "-f", "json"],
                         cwd=str(tmp_path), env=env)
        assert ok.exit_code == 0, ok.stderr
        assert ok.json["packages"][0]["uploaded"] is True


def _repo_with_config(root: Path) -> Path:
    """A repository whose runtime_env sits in configs/ and names `app` relative to the root."""
    (root / "app").mkdir(parents=True)
    (root / "app" / "main.py").write_text("print('app')\n")
    (root / "configs").mkdir()
    spec = root / "configs" / "runtime_env.yaml"
    spec.write_text("working_dir: app\n")
    return spec


def test_push_and_push_once_resolve_paths_against_the_cwd(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Like `ray job submit --runtime-env configs/runtime_env.yaml` run from the repo root."""
    from ray._private.runtime_env.packaging import get_uri_for_directory

    root = tmp_path / "repo"
    _repo_with_config(root)
    monkeypatch.chdir(root)
    pushed = run_cli(["push", "configs/runtime_env.yaml", "--format", "json"])
    assert pushed.exit_code == 0, pushed.stderr
    once = run_cli(["push", "--once", "configs/runtime_env.yaml", "--format", "json"])
    assert once.exit_code == 0, once.stderr
    uri = get_uri_for_directory(str(root / "app"), include_gitignore=True)
    assert pushed.json["runtime_env"]["working_dir"] == uri
    assert once.json["uri"] == uri
    # --base-dir means the same to both, from anywhere
    monkeypatch.chdir(tmp_path)
    args = ["--base-dir", str(root), str(root / "configs" / "runtime_env.yaml"), "--format",
            "json"]
    assert run_cli(["push", *args]).json["runtime_env"]["working_dir"] == uri
    assert run_cli(["push", "--once", *args]).json["uri"] == uri
    failed = run_cli(["push", "--once", str(root / "configs" / "runtime_env.yaml")])
    assert failed.exit_code == 2  # from tmp_path, `app` does not exist: for Ray neither
    assert "no such file or directory" in failed.stderr
    assert "--base-dir" in failed.stderr


def test_output_inside_the_working_dir_is_never_packaged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """README's `rtenv push runtime_env.yaml -o pushed.yaml` with `working_dir: .`: the second
    push gives the same URI (the first one's output is not part of the package)."""
    from ray._private.runtime_env.packaging import get_uri_for_directory

    app = tmp_path / "app"
    app.mkdir()
    (app / "main.py").write_text("print('app')\n")
    (app / "runtime_env.yaml").write_text("working_dir: .\n")
    uri = get_uri_for_directory(str(app), include_gitignore=True)
    monkeypatch.chdir(app)
    uris = []
    for args in (["runtime_env.yaml"], ["runtime_env.yaml"], ["--once", "runtime_env.yaml"]):
        result = run_cli(["push", *args, "-o", "pushed.yaml"])
        assert result.exit_code == 0, result.stderr
        import yaml

        uris.append(yaml.safe_load((app / "pushed.yaml").read_text())["working_dir"])
    assert uris == [uri, uri, uri]


@pytest.mark.parametrize("excludes", [["tests/"], ["*.bin"]])
def test_push_of_a_folder_whose_files_are_all_excluded(tmp_path: Path,
                                                        excludes: list[str]) -> None:
    """To the embedded store and to a real agent, which both verify the zip against its URI."""
    from tests.support.agent import agent_process

    src = tmp_path / "m"
    (src / "tests").mkdir(parents=True)
    (src / "main.py").write_text("print(1)\n")
    (src / "tests" / "t.bin").write_text("t\n")
    spec = tmp_path / "re.yaml"
    spec.write_text(json.dumps({"working_dir": str(src), "excludes": excludes}))
    res = run_cli(["push", str(spec), "--format", "json"])
    assert res.exit_code == 0, res.stderr
    with agent_process(tmp_path / "agent-store") as agent:
        to_agent = run_cli(["push", str(spec), "--to", agent.url, "--format", "json"])
        assert to_agent.exit_code == 0, to_agent.stderr
        assert to_agent.json["packages"][0]["uploaded"] is True
    assert to_agent.json["packages"][0]["uri"] == res.json["packages"][0]["uri"]


def test_dry_run_says_a_package_is_over_the_dashboards_limit(tmp_path: Path) -> None:
    """A real push to a dashboard refuses >100 MiB and names the GCS route; the dry run a
    user runs first says so too (from the size before compression: no target is contacted)."""
    src = project(tmp_path)
    with (src / "weights.bin").open("wb") as f:
        f.truncate(101 * 2**20)
    res = run_cli(["push", str(src), "--dry-run"])
    assert res.exit_code == 0, res.stderr
    assert "over the 100 MiB" in res.stderr
    assert ":6379" in res.stderr  # the GCS route
    small = run_cli(["push", str(project(tmp_path / "small")), "--dry-run"])
    assert "MiB" not in small.stderr.replace("largest", "")
