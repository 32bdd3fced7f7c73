"""The agent's trust model (issue 17, hole 9): a loopback agent is its user's alone.

By default `rtenv agent` requires this user's token (RTENV_HOME/agent-token, 0600), which the
same user's clients read by themselves; another user's process, which cannot read the file,
gets 401. A create that names this machine's files (`-r /file`, a local sdist, `file://`
outside `--allow-file-root`) is refused with 403 before anything reads them.
"""

from __future__ import annotations

import os
import stat
import threading
import zipfile
from pathlib import Path
from typing import Any

import pytest
import requests  # noqa: TID253 - tests are not on the CLI's startup path

from rtenv_cli.core.agent.localpaths import refuse_local_paths
from rtenv_cli.core.errors import ForbiddenError, PackagingError
from rtenv_cli.core.store.beneath import open_beneath
from rtenv_cli.core.store.envs import Environments
from rtenv_cli.core.store.store import Store
from rtenv_cli.core.transport.agent_http import AgentClient
from rtenv_cli.core.transport.agent_token import read_token, token_for, token_path, user_token
from tests.support.agent import agent_process
from tests.support.cli import run_process


def test_a_default_agent_requires_this_users_token(tmp_path: Path) -> None:
    with agent_process(tmp_path / "s", user_token=True) as agent:
        path = token_path()
        assert path.parent == Path(os.environ["RTENV_HOME"])
        assert stat.S_IMODE(path.stat().st_mode) == 0o600  # other users cannot read it
        assert agent.token
        assert agent.token == path.read_text().strip()
        # another user's process holds no token: refused on every protected route
        for method, route in [("GET", "/api/agent"), ("POST", "/api/envs"),
                              ("PUT", "/api/packages/gcs/_ray_pkg_0123456789abcdef.zip"),
                              ("POST", "/api/gc"), ("GET", "/api/cache")]:
            assert requests.request(method, agent.url + route, timeout=10).status_code == 401
        wrong = requests.get(f"{agent.url}/api/agent", timeout=10,
                             headers={"Authorization": "Bearer guessed"})
        assert wrong.status_code == 403
        # the same user's client needs no flag: it reads the file
        assert AgentClient(agent.url).info()["agent"] == "rtenv"


def test_rtenv_run_needs_no_flag_for_its_users_agent(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "data.txt").write_text("mine")
    env_file = tmp_path / "env.yaml"
    env_file.write_text("working_dir: proj\n")
    with agent_process(tmp_path / "s", user_token=True) as agent:
        res = run_process(["run", "--address", agent.url, "-r", str(env_file), "--base-dir",
                           str(tmp_path), "--", "python", "-c",
                           "print(open('data.txt').read())"])
        assert res.exit_code == 0, res.stderr
        assert res.stdout.strip() == "mine"
        push = run_process(["push", str(tmp_path / "proj"), "--to", agent.url])
        assert push.exit_code == 0, push.stderr


def test_the_token_file_is_trusted_only_when_private(tmp_path: Path) -> None:
    path = tmp_path / "agent-token"
    first = user_token(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert user_token(path) == first  # a second agent of the user shares it
    path.chmod(0o644)  # readable by others: a token they may know
    assert read_token(path) is None
    second = user_token(path)
    assert second != first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_token_goes_only_to_a_loopback_agent(tmp_path: Path) -> None:
    user_token()
    assert token_for("http://127.0.0.1:8790") == read_token()
    assert token_for("http://localhost:8790") == read_token()
    assert token_for("http://[::1]:8790") == read_token()
    assert token_for("http://10.1.2.3:8790") is None
    assert token_for("https://agent.example.com") is None


def test_no_token_is_explicit_and_loopback_only(tmp_path: Path) -> None:
    with agent_process(tmp_path / "s") as agent:  # the fixture's --no-token
        assert requests.get(f"{agent.url}/api/agent", timeout=10).status_code == 200
    res = run_process(["agent", "--no-token", "--host", "0.0.0.0", "--root",
                       str(tmp_path / "s2")], timeout=60)
    assert res.exit_code == 2
    assert "without a token" in res.stderr


# -- local paths over HTTP ---------------------------------------------------------------------
LOCAL = [
    {"pip": ["-r /root-only/file"]},
    {"pip": ["-r", "requirements.txt"]},
    {"pip": "requirements.txt"},
    {"pip": ["/srv/src/mypkg"]},
    {"pip": ["./mypkg"]},
    {"pip": ["mypkg-1.0.tar.gz"]},
    {"pip": ["dist/mypkg-1.0.tar.gz"]},
    {"pip": ["mypkg @ file:///srv/mypkg-1.0-py3-none-any.whl"]},
    {"pip": ["git+file:///srv/repo"]},
    {"pip": ["-e", "."]},
    {"pip": {"packages": ["six"], "pip_install_options": ["--find-links", "/srv/wheels"]}},
    {"uv": {"packages": ["six"], "uv_pip_install_options": ["-c", "constraints.txt"]}},
    {"uv": ["--requirement=reqs.txt"]},
    {"working_dir": "file:///etc/secret.zip"},
    {"working_dir": "/home/someone/project"},
    {"py_modules": ["gcs://_ray_pkg_0123456789abcdef.zip", "file:///tmp/m.zip"]},
    {"env_vars": {"UV_CONSTRAINT": "/root-only/file"}},
    {"env_vars": {"PIP_REQUIREMENT": "/root-only/file"}},
]
REMOTE = [
    {"pip": ["six==1.16.0", "requests[socks]>=2; python_version >= '3.8'"]},
    {"pip": ["pkg @ https://example.com/pkg-1.0-py3-none-any.whl",
             "git+https://github.com/org/repo@v1#egg=repo"]},
    {"uv": {"packages": ["six"], "uv_pip_install_options": [
        "--index-url", "https://pypi.example.com/simple", "--python", "3.11"]}},
    {"working_dir": "gcs://_ray_pkg_0123456789abcdef.zip",
     "py_modules": ["https://example.com/m.zip"]},
    {"env_vars": {"UV_INDEX_URL": "https://pypi.example.com/simple", "DATA": "/data/x"}},
]


@pytest.mark.parametrize("runtime_env", LOCAL, ids=lambda e: str(e)[:60])
def test_local_paths_are_refused(runtime_env: dict[str, Any]) -> None:
    with pytest.raises(ForbiddenError, match="does not read local paths"):
        refuse_local_paths(runtime_env)


@pytest.mark.parametrize("runtime_env", REMOTE, ids=lambda e: str(e)[:60])
def test_what_a_client_uploaded_or_the_network_holds_is_allowed(
        runtime_env: dict[str, Any]) -> None:
    refuse_local_paths(runtime_env)


def test_the_agent_answers_403_with_a_hint_and_reads_nothing(tmp_path: Path) -> None:
    secret = tmp_path / "root-only"
    secret.write_text("root:$6$hash\n")
    secret.chmod(0o600)
    with agent_process(tmp_path / "s") as agent:
        for runtime_env in [*LOCAL, {"pip": [f"-r {secret}"]}]:
            resp = requests.post(f"{agent.url}/api/envs", timeout=30,
                                 json={"runtime_env": runtime_env, "holder": "x"})
            assert resp.status_code == 403, (runtime_env, resp.text)
            error = resp.json()["error"]
            assert error["code"] == "forbidden"
            assert "rtenv push" in error["hint"]
            assert "$6$" not in resp.text
        assert list((tmp_path / "s" / "entries").iterdir()) == []


def _zip(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("top/main.py", "print('shared')\n")
    return path


def test_file_uris_under_an_allowed_root_only(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    inside = _zip(shared / "pkg.zip")
    outside = _zip(tmp_path / "outside.zip")
    (shared / "link.zip").symlink_to(outside)  # inside by name, outside in fact
    with agent_process(tmp_path / "s", "--allow-file-root", str(shared)) as agent:
        def create(uri: str) -> requests.Response:
            return requests.post(f"{agent.url}/api/envs", timeout=60, json={
                "runtime_env": {"working_dir": uri}, "holder": "x"})

        ok = create(f"file://{inside}")
        assert ok.status_code == 200, ok.text
        assert (Path(ok.json()["working_dir"]) / "main.py").read_text() == "print('shared')\n"
        assert create(f"file://{outside}").status_code == 403
        assert create(f"file://{shared / 'link.zip'}").status_code == 403
        assert create(f"file://{shared}/../outside.zip").status_code == 403


def test_shapes_ray_refuses_are_left_to_its_normaliser() -> None:
    for runtime_env in ({"pip": 5}, {"pip": {"x": 1}}, {"pip": {"packages": "six"}},
                        {"uv": {"packages": ["six"], "uv_pip_install_options": "-x"}},
                        {"py_modules": "x"}, {"env_vars": ["A"]}):
        refuse_local_paths(runtime_env)  # no error here: a 422 from the create, not a 500


def test_a_file_requirement_under_an_allowed_root(tmp_path: Path) -> None:
    wheel = f"pkg @ file://{tmp_path}/pkg-1-py3-none-any.whl"
    refuse_local_paths({"pip": [wheel]}, (tmp_path,))
    with pytest.raises(ForbiddenError):
        refuse_local_paths({"pip": [wheel]}, (tmp_path / "other",))


# -- --allow-file-root: opened once, beneath the root (issue 22, M3) ------------------------------
@pytest.mark.parametrize("kernel", [True, False], ids=["openat2", "by-hand"])
def test_a_file_is_opened_beneath_its_root_or_not_at_all(tmp_path: Path, kernel: bool) -> None:
    root = tmp_path / "shared"
    (root / "sub").mkdir(parents=True)
    _zip(root / "sub" / "pkg.zip")
    outside = _zip(tmp_path / "outside.zip")
    (root / "out.zip").symlink_to(outside)
    (root / "abs.zip").symlink_to(root / "sub" / "pkg.zip")  # absolute: leaves, by its name
    (root / "dirlink").symlink_to(tmp_path)
    os.mkfifo(root / "fifo.zip")
    with open_beneath(root, "sub/pkg.zip", what="w", kernel=kernel) as fh:
        assert fh.read(4) == b"PK\x03\x04"
    for rel in ("out.zip", "abs.zip", "dirlink/outside.zip", "sub/../../outside.zip",
                "/etc/passwd", "."):
        with pytest.raises(ForbiddenError):
            open_beneath(root, rel, what=rel, kernel=kernel).close()
    for rel in ("fifo.zip", "sub", "missing.zip"):  # a FIFO does not block the open
        with pytest.raises(PackagingError):
            open_beneath(root, rel, what=rel, kernel=kernel).close()


def test_environments_open_file_uris_beneath_their_roots(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    _zip(shared / "pkg.zip")
    (shared / "link.zip").symlink_to(_zip(tmp_path / "outside.zip"))
    envs = Environments(Store(tmp_path / "s"), file_roots=(shared,))
    handle = envs.get_or_create({"working_dir": f"file://{shared}/pkg.zip"}, holder="h")
    assert (Path(str(handle.working_dir)) / "main.py").exists()
    for uri in (f"file://{shared}/link.zip", f"file://{tmp_path}/outside.zip",
                f"file://{shared}/../outside.zip"):
        with pytest.raises(ForbiddenError):  # whatever the check before it said
            envs.get_or_create({"working_dir": uri}, holder="h")
    with pytest.raises(ForbiddenError):
        Environments(Store(tmp_path / "s2"), file_roots=()).get_or_create(
            {"working_dir": f"file://{shared}/pkg.zip"}, holder="h")


def test_a_link_flipped_during_requests_never_unpacks_outside_the_root(tmp_path: Path) -> None:
    """Red team 2, M1: each request names a new link, which a thread keeps swapping (symlink
    and rename) between an archive in the root and one outside it."""
    shared = tmp_path / "shared"
    shared.mkdir()
    with zipfile.ZipFile(shared / "ok.zip", "w") as zf:
        zf.writestr("top/main.py", "inside\n")
    with zipfile.ZipFile(tmp_path / "outside.zip", "w") as zf:
        zf.writestr("top/main.py", "OUTSIDE\n")
    tries, current, done = 300, [0], threading.Event()

    def flip() -> None:
        targets = ("ok.zip", str(tmp_path / "outside.zip"))
        n = 0
        while not done.is_set():
            tmp = shared / f".flip{n % 2}"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(targets[n % 2])
            tmp.rename(shared / f"flip{current[0]}.zip")
            n += 1

    flipper = threading.Thread(target=flip, daemon=True)
    statuses: dict[int, int] = {}
    with agent_process(tmp_path / "s", "--allow-file-root", str(shared)) as agent:
        flipper.start()
        try:
            with requests.Session() as http:
                for n in range(tries):
                    current[0] = n
                    resp = http.post(f"{agent.url}/api/envs", timeout=60, json={
                        "runtime_env": {"working_dir": f"file://{shared}/flip{n}.zip"},
                        "holder": "x"})
                    statuses[resp.status_code] = statuses.get(resp.status_code, 0) + 1
                    assert resp.status_code in (200, 403, 422), resp.text
                    if resp.status_code == 200:
                        text = (Path(resp.json()["working_dir"]) / "main.py").read_text()
                        assert text == "inside\n", f"try {n} unpacked outside the root"
        finally:
            done.set()
            flipper.join(timeout=10)
    # the test saw both sides of the flip (else it proved nothing)
    assert statuses.get(200, 0) > 0, statuses
    assert statuses.get(403, 0) > 0, statuses
