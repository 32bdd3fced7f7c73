"""Trust between two local users (issue 22, H1 and H2): the agent token and the store belong to
their user alone.

- H1: the token file's token goes only to a loopback listener this user owns. Another user who
  listens on the port a client targets gets no token, and the client's error names them.
- H2: a home or store that another user owns, or that others can write, is refused with a hint;
  `rtenv agent --root NEWDIR` makes NEWDIR (and its folders) 0700.

The two-user cases need a real second account: run as root, the tests make one with `useradd`
(removed at teardown) and act as it by forking and dropping to its uid. Elsewhere they skip and
say why; the one-user cases (a world-writable home of this user's own, the 0700 store) run
everywhere.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import signal
import socket
import stat
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rtenv_cli.core.errors import RtenvError, TransportError, UsageError
from rtenv_cli.core.paths import rtenv_home
from rtenv_cli.core.store.layout import SUBDIRS
from rtenv_cli.core.store.store import Store
from rtenv_cli.core.transport.agent_http import AgentClient
from rtenv_cli.core.transport.agent_token import user_token
from rtenv_cli.core.transport.resolve import AddressKind, resolve_address
from tests.support.agent import agent_process
from tests.support.cli import run_process
from tests.support.ports import free_port


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int


@pytest.fixture(scope="module")
def other_user() -> Iterator[User]:
    """A second local account, made for these tests and removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("two-user cases need root, to create a second local user with useradd")
    if not (shutil.which("useradd") and shutil.which("userdel")):
        pytest.skip("two-user cases need useradd/userdel to create a second local user")
    import pwd

    name = f"rtenvt{os.getpid()}"
    subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/bin/false",
                    name], check=True, capture_output=True)
    try:
        entry = pwd.getpwnam(name)
        yield User(name, entry.pw_uid, entry.pw_gid)
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


@dataclass
class Squatter:
    """Another user's HTTP listener on [::] (IPv4 too): it answers every request 200 `{}`, as
    any server could, and reports each request's header block to the test."""

    port: int
    pid: int
    _reports: int

    def requests(self) -> list[str]:
        """The header blocks received so far (each is reported before its reply is sent, so a
        client that got its reply has been recorded)."""
        blocks, data = [], b""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self._reports, 65536):
                data += chunk
        for block in data.split(b"\0"):
            if block:
                blocks.append(block.decode("latin-1"))
        return blocks

    def sent_authorization(self) -> bool:
        return any("\nauthorization:" in b.lower() for b in self.requests())


def _serve_as(user: User, ready: int, reports: int, body: bytes) -> None:
    """In the forked child: become `user`, then listen and record (only modules already loaded:
    the new uid may not read this interpreter's files)."""
    os.setgroups([])
    os.setgid(user.gid)
    os.setuid(user.uid)
    srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    srv.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    srv.bind(("::", 0))
    srv.listen(16)
    os.write(ready, str(srv.getsockname()[1]).encode())
    os.close(ready)
    while True:
        conn, _ = srv.accept()
        with conn:
            conn.settimeout(30)
            head = b""
            with contextlib.suppress(OSError):
                while b"\r\n\r\n" not in head and len(head) < 65536:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    head += chunk
            os.write(reports, head.split(b"\r\n\r\n")[0] + b"\0")
            with contextlib.suppress(OSError):
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                             % (len(body), body))


@pytest.fixture
def squatter(other_user: User, request: pytest.FixtureRequest) -> Iterator[Squatter]:
    """Answers `{}`, or the body an indirect parameter gives."""
    body = getattr(request, "param", b"{}")
    ready_r, ready_w = os.pipe()
    reports_r, reports_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(ready_r)
            os.close(reports_r)
            _serve_as(other_user, ready_w, reports_w, body)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(reports_w)
    try:
        port = int(os.read(ready_r, 32) or b"0")
        os.close(ready_r)
        assert port, "the other user's listener did not start"
        os.set_blocking(reports_r, False)
        yield Squatter(port, pid, reports_r)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(reports_r)


# -- H1: the token goes only to a listener this user owns --------------------------------------
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]"])
def test_the_token_file_is_not_sent_to_another_users_listener(
        squatter: Squatter, other_user: User, host: str) -> None:
    user_token()  # this user's token file, as its agent writes it
    url = f"http://{host}:{squatter.port}"
    with pytest.raises(TransportError) as err:
        AgentClient(url).info()
    assert f"port {squatter.port}" in err.value.message
    assert f"{other_user.name} (uid {other_user.uid})" in err.value.message
    assert "not sent" in err.value.message
    assert err.value.hint
    assert "RTENV_AGENT_TOKEN" in err.value.hint
    assert not squatter.sent_authorization()


def test_no_command_sends_the_token_to_another_users_listener(
        squatter: Squatter, other_user: User, tmp_path: Path) -> None:
    token = user_token()
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "main.py").write_text("print('mine')\n")
    env_file = tmp_path / "re.yaml"
    env_file.write_text("working_dir: proj\n")
    url = f"http://127.0.0.1:{squatter.port}"
    for args in (["cache", "ls", "--agent", url],
                 ["push", str(tmp_path / "proj"), "--to", url],
                 ["run", "--address", url, "-r", str(env_file), "--base-dir", str(tmp_path),
                  "--", "python", "-c", "print(1)"]):
        res = run_process(args, timeout=120)
        assert res.exit_code != 0, (args, res.stdout)
        assert f"port {squatter.port}" in res.stderr, (args, res.stderr)
        assert other_user.name in res.stderr, (args, res.stderr)
        assert "internal error" not in res.stderr
    seen = squatter.requests()
    assert seen, "the probes that find the agent reach the listener, without a token"
    assert not any(token in block for block in seen)
    assert not squatter.sent_authorization()


def test_a_given_token_goes_where_it_is_told(squatter: Squatter) -> None:
    """An explicit token (--token, RTENV_AGENT_TOKEN) is the user's choice: no owner check, so
    a shared agent run by a service account stays usable. (The squatter answers `{}`: not an
    agent's reply, which the client says.)"""
    with pytest.raises(TransportError, match="does not answer as an rtenv agent"):
        AgentClient(f"http://127.0.0.1:{squatter.port}", "given-token").info()
    assert squatter.sent_authorization()


def test_this_users_own_listener_gets_the_token(tmp_path: Path) -> None:
    with agent_process(tmp_path / "s", user_token=True) as agent:
        assert AgentClient(agent.url).info()["agent"] == "rtenv"


def test_where_owners_cannot_be_read_the_token_file_is_withheld(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A system without socket owners (not Linux): the file's token stays home, and the agent's
    401 says why and what to pass instead."""
    from rtenv_cli.core.transport import listeners

    with agent_process(tmp_path / "s", user_token=True) as agent:
        monkeypatch.setattr(listeners, "_listening", lambda: None)
        with pytest.raises(TransportError, match="token file was not sent: this system does "
                           "not show who owns a listening port") as err:
            AgentClient(agent.url).info()
        assert err.value.hint == "pass --token or set RTENV_AGENT_TOKEN"
        assert AgentClient(agent.url, agent.token).info()["agent"] == "rtenv"


@pytest.mark.parametrize("variable", ["http_proxy", "HTTP_PROXY", "all_proxy"])
def test_no_proxy_stands_between_a_client_and_a_loopback_agent(
        squatter: Squatter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        variable: str) -> None:
    """A proxy from the environment (a shared one, here another user's) never carries a request
    to a loopback address: it could not reach this machine's loopback anyway, and it would read
    the token that the owner check of the agent's port let through."""
    with agent_process(tmp_path / "s", user_token=True) as agent:
        monkeypatch.setenv(variable, f"http://127.0.0.1:{squatter.port}")
        assert AgentClient(agent.url).info()["agent"] == "rtenv"
        assert resolve_address(agent.url).kind is AddressKind.AGENT  # the probe too
    assert squatter.requests() == []


@pytest.mark.parametrize("squatter", [b'{"authentication_mode": "token"}'], indirect=True)
def test_the_ray_token_file_is_not_sent_to_another_users_listener(
        squatter: Squatter, other_user: User, tmp_path: Path) -> None:
    """Ray's token read from a file (RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token) is held to the
    rule of rtenv's own: to a loopback port, only while this user listens there. Another user
    on the dashboard's or the GCS's port while this user's Ray is down gets nothing."""
    from rtenv_cli.core.transport.ray_dashboard import RayDashboardTarget, load_token
    from rtenv_cli.core.transport.ray_gcs import RayGcsTarget

    token_file = tmp_path / "auth_token"
    token_file.write_text("the-ray-clusters-token\n")
    env = {"RAY_AUTH_TOKEN_PATH": str(token_file)}
    for build in (
            lambda: RayDashboardTarget(f"http://127.0.0.1:{squatter.port}", env=env)
            .exists("gcs://_ray_pkg_0123456789abcdef.zip"),
            lambda: RayGcsTarget(f"127.0.0.1:{squatter.port}", env=env)):
        with pytest.raises(TransportError) as err:
            build()
        assert f"port {squatter.port}" in err.value.message
        assert f"{other_user.name} (uid {other_user.uid})" in err.value.message
        assert str(token_file) in err.value.message
        assert "RAY_AUTH_TOKEN" in (err.value.hint or "")
    assert not squatter.sent_authorization()
    # given in the environment, it goes where it is told, as --token does for an agent
    assert load_token({**env, "RAY_AUTH_TOKEN": "given"}, to=f"127.0.0.1:{squatter.port}") \
        == "given"
    # this user's own listener (or none) gets the file's token
    assert load_token(env, to=f"127.0.0.1:{free_port()}") == "the-ray-clusters-token"


def test_address_auto_follows_only_this_users_record(other_user: User, tmp_path: Path) -> None:
    """Ray makes its temp dir (/tmp/ray) writable by everyone, so another user can write the
    record `ray start` leaves there (ray_current_cluster) and point `--address auto` at a
    listener of theirs, to be sent the Ray token file's token and the user's code. A record
    this user (or root) did not write is refused, naming its writer."""
    from rtenv_cli.core.transport.resolve import auto_address

    shared = tmp_path / "ray"
    shared.mkdir()
    shared.chmod(0o777)  # as Ray leaves it
    record = shared / "ray_current_cluster"
    env = {"RAY_TMPDIR": str(tmp_path)}
    record.write_text("192.0.2.1:7777")
    assert auto_address(env) == "192.0.2.1:7777"  # this user's own `ray start`
    record.unlink()
    record.write_text("192.0.2.99:7777")
    os.chown(record, other_user.uid, other_user.gid)
    with pytest.raises(UsageError) as err:
        auto_address(env)
    assert str(record) in err.value.message
    assert f"{other_user.name} (uid {other_user.uid})" in err.value.message
    assert "--address" in (err.value.hint or "")
    os.chown(record, os.geteuid(), os.getegid())
    record.chmod(0o666)  # this user's, but anyone may rewrite it
    with pytest.raises(UsageError, match="mode 0666"):
        auto_address(env)


# -- H2: a home or store is this user's alone -------------------------------------------------
def _foreign_dir(path: Path, user: User, mode: int) -> Path:
    path.mkdir()
    os.chown(path, user.uid, user.gid)
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode", [0o777, 0o755], ids=oct)
def test_another_users_home_is_refused(other_user: User, tmp_path: Path, mode: int) -> None:
    home = _foreign_dir(tmp_path / "shared-home", other_user, mode)
    (tmp_path / "proj").mkdir()
    env_file = tmp_path / "re.yaml"
    env_file.write_text("working_dir: proj\n")
    for args in (["run", "-r", str(env_file), "--base-dir", str(tmp_path), "--", "python", "-c",
                  "print('ran')"],
                 ["cache", "ls"]):
        res = run_process(args, env={"RTENV_HOME": str(home)})
        assert res.exit_code == 2, (args, res.stdout, res.stderr)
        assert "ran" not in res.stdout
        assert str(home) in res.stderr
        assert f"owned by {other_user.name} (uid {other_user.uid}), mode {mode:04o}" in res.stderr
        assert "hint:" in res.stderr
        assert "chmod 700" in res.stderr
    assert list(home.iterdir()) == []  # nothing was written there
    assert stat.S_IMODE(home.stat().st_mode) == mode


def test_the_agent_refuses_another_users_root(other_user: User, tmp_path: Path) -> None:
    root = _foreign_dir(tmp_path / "shared-store", other_user, 0o777)
    res = run_process(["agent", "--no-token", "--port", str(free_port()), "--root", str(root)],
                      timeout=60)
    assert res.exit_code == 2, res.stderr
    assert f"the store {root} is not this user's alone" in res.stderr
    assert other_user.name in res.stderr
    assert list(root.iterdir()) == []
    assert stat.S_IMODE(root.stat().st_mode) == 0o777  # left as it was, not made a store


def test_the_plugin_refuses_another_users_home(other_user: User, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from rtenv_cli.core.rayplugin.engine import Engine

    home = _foreign_dir(tmp_path / "node-home", other_user, 0o777)
    monkeypatch.setenv("RTENV_HOME", str(home))
    with pytest.raises(RtenvError, match="not this user's alone") as err:
        Engine().environments()  # create() reports it as the setup's RuntimeEnvSetupError
    assert err.value.hint
    assert "RTENV_HOME" in err.value.hint


def test_a_home_in_another_users_directory_is_refused(other_user: User, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Mine, but inside a directory another user owns: they could rename it away and put
    theirs in its place."""
    parent = _foreign_dir(tmp_path / "theirs", other_user, 0o755)
    (parent / "mine").mkdir(mode=0o700)
    monkeypatch.setenv("RTENV_HOME", str(parent / "mine"))
    with pytest.raises(UsageError, match=f"is in {parent}, which another user can change"):
        rtenv_home()


def _link_as(user: User, link: Path, target: Path) -> None:
    """`link` -> `target`, made (or swapped in, atomically) as `user` would: a link of theirs."""
    tmp = link.with_name(link.name + ".new")
    os.symlink(target, tmp)
    os.lchown(tmp, user.uid, user.gid)
    os.replace(tmp, link)


def test_a_store_named_through_another_users_link_stays_where_it_was_checked(
        other_user: User, tmp_path: Path) -> None:
    """`--root /tmp/rtenv-agent` where another user made that name a link to a directory of
    this user's (the default home, say): checked where it points, the store keeps using that
    directory. Were it reached through the link, the other user could point the link at a
    store of theirs while the agent runs, and the agent would hand out their files to run."""
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)  # as /tmp: the link's owner may replace it
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    theirs = _foreign_dir(tmp_path / "theirs", other_user, 0o777)
    link = sticky / "rtenv-agent"
    _link_as(other_user, link, mine)
    store = Store(link)
    try:
        _link_as(other_user, link, theirs)
        blob = b"written after the link moved"
        store.put_blob(hashlib.sha256(blob).hexdigest(), io.BytesIO(blob))
        assert os.path.realpath(store.entry_dir("working_dir:k")).startswith(str(mine) + "/")
    finally:
        store.close()
    assert list(theirs.iterdir()) == []
    assert any(blob == p.read_bytes() for p in (mine / "blobs").rglob("*") if p.is_file())


def test_a_home_named_through_a_link_is_used_where_it_was_checked(
        other_user: User, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    link = sticky / "rtenv-home"
    _link_as(other_user, link, mine)
    monkeypatch.setenv("RTENV_HOME", str(link))
    assert rtenv_home() == mine
    _link_as(other_user, link, _foreign_dir(tmp_path / "theirs", other_user, 0o777))
    with pytest.raises(UsageError, match="owned by " + other_user.name):
        rtenv_home()  # the next look follows the link again, and refuses where it now points


# -- one user: modes --------------------------------------------------------------------------
def test_a_home_others_can_write_is_refused(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o777)
    monkeypatch.setenv("RTENV_HOME", str(home))
    with pytest.raises(UsageError, match="mode 0777") as err:
        rtenv_home()
    assert err.value.hint
    assert "chmod 700" in err.value.hint
    home.chmod(0o775)  # group-writable: refused too
    with pytest.raises(UsageError, match="mode 0775"):
        rtenv_home()
    home.chmod(0o755)
    assert rtenv_home() == home


def test_a_home_under_a_directory_others_can_write_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # anyone may rename the home away: refused
    monkeypatch.setenv("RTENV_HOME", str(shared / "home"))
    with pytest.raises(UsageError, match="which another user can change"):
        rtenv_home()
    shared.chmod(0o1777)  # sticky, as /tmp: only the owner may rename it
    assert rtenv_home() == shared / "home"


def test_a_missing_home_is_made_0700_with_its_parents(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    umask = os.umask(0o002)  # a umask that makes 0775 directories
    try:
        monkeypatch.setenv("RTENV_HOME", str(tmp_path / "a" / "b" / "home"))
        home = rtenv_home()
    finally:
        os.umask(umask)
    for path in (tmp_path / "a", tmp_path / "a" / "b", home):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path


def test_an_explicit_store_root_is_made_0700(tmp_path: Path) -> None:
    store = Store(tmp_path / "new" / "store")
    try:
        for path in (tmp_path / "new", store.root, *(store.root / sub for sub in SUBDIRS)):
            assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    finally:
        store.close()


def test_agent_root_newdir_is_made_0700(tmp_path: Path) -> None:
    root = tmp_path / "agent-root"
    with agent_process(root):
        assert stat.S_IMODE(root.stat().st_mode) == 0o700
        for sub in SUBDIRS:
            assert stat.S_IMODE((root / sub).stat().st_mode) == 0o700, sub


def test_read_only_commands_work_beside_an_untrusted_home_and_touch_nothing(
        tmp_path: Path) -> None:
    """A command that needs no store only loses its caches (the ignore-pattern cache): it
    neither reads nor writes them."""
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o777)
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / ".gitignore").write_text("*.log\n")
    (tmp_path / "proj" / "main.py").write_text("print(1)\n")
    (tmp_path / "re.yaml").write_text("working_dir: proj\n")
    for args in (["validate", "re.yaml"], ["ls-files", "proj"],
                 ["check-ignore", "proj/x.log"]):
        res = run_process(args, env={"RTENV_HOME": str(home)}, cwd=str(tmp_path))
        assert res.exit_code == 0, (args, res.stderr)
    assert list(home.iterdir()) == []


# -- the resident rtenv (`rtenv daemon`): a request carries the caller's environment (tokens)


def _as_user(user: User, work: Callable[[], bytes]) -> bytes:
    """WORK's result, run in a forked child as USER (modules already loaded only)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setgid(user.gid)
            os.setuid(user.uid)
            os.write(write_fd, work())
        finally:
            os._exit(0)
    os.close(write_fd)
    try:
        chunks = []
        while chunk := os.read(read_fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(read_fd)
        os.waitpid(pid, 0)
    return b"".join(chunks)


def test_the_daemon_client_hands_nothing_to_another_users_socket(other_user: User) -> None:
    """A socket served by another user where the daemon's would be: the client sees the peer's
    uid and closes without a byte (the command then runs in the caller's own process)."""
    import select
    import tempfile
    import threading

    from rtenv_cli.resident.client import _connect

    place = Path(tempfile.mkdtemp(prefix="rtd", dir="/tmp"))  # reachable by the other user
    os.chmod(place, 0o755)  # noqa: S103 - the other user listens there
    os.chown(place, other_user.uid, other_user.gid)
    path = str(place / "daemon.sock")
    ready_r, ready_w = os.pipe()

    def listen() -> bytes:
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        os.chmod(path, 0o666)  # noqa: S103 - any client may connect: the uid check decides
        srv.listen(1)
        os.write(ready_w, b"1")
        conn, _ = srv.accept()
        conn.settimeout(60)
        got = b""
        with contextlib.suppress(OSError):
            while chunk := conn.recv(65536):
                got += chunk
        return b"got:" + got

    done: list[bytes] = []
    runner = threading.Thread(target=lambda: done.append(_as_user(other_user, listen)))
    runner.start()
    try:
        assert select.select([ready_r], [], [], 120)[0], "the other user's listener"
        assert os.read(ready_r, 1) == b"1"
        assert _connect(path) is None
    finally:
        runner.join(120)
        os.close(ready_r)
        os.close(ready_w)
        shutil.rmtree(place, ignore_errors=True)
    assert done == [b"got:"]


def test_the_daemon_answers_another_user_nothing(other_user: User) -> None:
    """Another user who reaches the daemon's socket (its directory opened up on purpose here)
    gets no answer and runs nothing."""
    import tempfile

    from rtenv_cli.resident.wire import recv_frame, send_frame

    home = tempfile.mkdtemp(prefix="rtd", dir="/tmp")
    env = {"RTENV_HOME": home, "RTENV_DAEMON": ""}
    try:
        started = run_process(["daemon", "start", "-f", "json"], env=env)
        assert started.exit_code == 0, started.stderr
        sock_path = Path(home) / "run" / "daemon.sock"
        for opened in (Path(home), sock_path.parent):
            os.chmod(opened, 0o711)  # noqa: S103 - opened up on purpose: the test's point
        os.chmod(sock_path, 0o666)  # noqa: S103 - the same

        def ask() -> bytes:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(60)
                conn.connect(str(sock_path))
                send_frame(conn, {"op": "run", "argv": ["push", "--help"], "cwd": "/",
                                  "env": {"RTENV_HOME": home}, "umask": 0o22,
                                  "streams": [None, None, None], "fp": ""})
                try:
                    reply, _ = recv_frame(conn)
                except ConnectionResetError:  # closed with our request unread
                    reply = None
                except OSError as exc:
                    return f"error:{exc}".encode()
                return b"no answer" if reply is None else repr(reply).encode()

        # the stream ends without a frame: not even `stale` (which a caller of this user with
        # another install's fingerprint, as here, would be told)
        assert _as_user(other_user, ask) == b"no answer"
        status = run_process(["daemon", "status", "-f", "json"], env=env)
        assert status.json["pid"] == started.json["pid"]  # still serving its own user
    finally:
        for opened in (Path(home), Path(home) / "run"):
            with contextlib.suppress(OSError):
                os.chmod(opened, 0o700)
        run_process(["daemon", "stop"], env=env)
        shutil.rmtree(home, ignore_errors=True)
