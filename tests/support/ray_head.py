"""A real Ray 2.60.0 head on free loopback ports, in its own temp dir and process group.

Started with `ray start --head --block` in a new session; stopped by killing that process group
(never `ray stop`, which would stop every Ray on the machine).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.ports import free_ports
from tests.support.wait import until


def ray_executable() -> str:
    candidate = Path(sys.executable).with_name("ray")
    return str(candidate) if candidate.exists() else "ray"


def worker_port_base(taken: list[int]) -> int:
    """The start of 201 worker ports below the kernel's ephemeral range (where the free ports
    above come from), so that none of them can be one of `taken`; varied per head."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    span = max(low - 10000 - 201, 1)
    base = 10000 + (taken[-1] * 7919 + os.getpid()) % span
    while any(base <= p <= base + 200 for p in taken):
        base = 10000 + (base - 10000 + 211) % span
    return base


@dataclass
class RayHead:
    num_cpus: int = 2
    num_gpus: int | None = None
    resources: dict[str, float] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # the raylet's own environment additions
    token: str | None = None  # RAY_AUTH_MODE=token with this token
    proc: subprocess.Popen[bytes] | None = None
    temp_dir: Path | None = None
    gcs_port: int = 0
    dashboard_port: int = 0
    home: Path | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def client_env(self) -> dict[str, str]:
        """Environment for a driver/CLI that talks to this head."""
        env = {"RAY_ADDRESS": self.dashboard_url, "HOME": str(self.home),
               "RAY_USAGE_STATS_ENABLED": "0"}
        if self.token:
            env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token})
        else:
            env["RAY_AUTH_MODE"] = "disabled"
        return env

    def start(self, timeout: float = 120.0) -> RayHead:
        # short paths: Ray's unix sockets live under the temp dir (108-byte limit)
        self.temp_dir = Path(tempfile.mkdtemp(prefix="rtr", dir="/tmp"))
        self.home = self.temp_dir / "home"
        self.home.mkdir()
        ports = free_ports(11)
        workers = worker_port_base(ports)
        self.gcs_port, self.dashboard_port = ports[0], ports[1]
        args = [
            ray_executable(), "start", "--head", "--block", "--disable-usage-stats",
            "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1",
            f"--port={ports[0]}", f"--dashboard-port={ports[1]}",
            f"--object-manager-port={ports[2]}", f"--node-manager-port={ports[3]}",
            f"--ray-client-server-port={ports[4]}", f"--dashboard-agent-listen-port={ports[5]}",
            f"--dashboard-agent-grpc-port={ports[6]}", f"--runtime-env-agent-port={ports[7]}",
            f"--metrics-export-port={ports[8]}",
            f"--min-worker-port={workers}", f"--max-worker-port={workers + 200}",
            f"--temp-dir={self.temp_dir / 'ray'}", f"--num-cpus={self.num_cpus}",
            "--object-store-memory=200000000", "--include-dashboard=true",
        ]
        if self.num_gpus is not None:
            args.append(f"--num-gpus={self.num_gpus}")
        if self.resources:
            args.append(f"--resources={json.dumps(self.resources)}")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "CUDA_VISIBLE"))}
        env.update({"HOME": str(self.home), "RAY_USAGE_STATS_ENABLED": "0"})
        if self.token:
            env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token})
        else:
            env["RAY_AUTH_MODE"] = "disabled"
        env.update(self.env)
        log = (self.temp_dir / "ray-start.log").open("wb")
        self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        import urllib.request

        url = f"{self.dashboard_url}/api/gcs_healthz"

        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"ray start exited early:\n{self.log_tail()}")
            req = urllib.request.Request(url)  # noqa: S310 - http URL we built
            if self.token:
                req.add_header("Authorization", f"Bearer {self.token}")
            with urllib.request.urlopen(req, timeout=2) as resp:  # noqa: S310 - http URL we built
                return bool(resp.status == 200 and self._jobs_api_ready() and self._node_alive())

        try:
            until(ready, what=lambda: f"the Ray head ready:\n{self.log_tail()}",
                  timeout=timeout, interval=0.5, retry_on=(OSError,))
        except AssertionError:
            self.stop()
            raise

    def _node_alive(self) -> bool:
        """The head node is registered alive in the GCS: its dashboard answers a few seconds
        before, and a push in between finds no alive node (so takes the zip path, saying so)."""
        from rtenv_cli.core.transport.ray_kv import RayKV

        try:
            kv = RayKV.connect(self.address, token=self.token)
        except Exception:  # not up yet: the caller polls
            return False
        try:
            return bool(kv.alive_nodes())
        except Exception:  # not up yet: the caller polls
            return False
        finally:
            kv.close()

    def _jobs_api_ready(self) -> bool:
        import urllib.request

        url = f"{self.dashboard_url}/api/packages/gcs/_ray_pkg_probe.zip"
        req = urllib.request.Request(url, method="HEAD")  # noqa: S310 - http URL we built
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            urllib.request.urlopen(req, timeout=2)  # noqa: S310 - http URL we built
        except urllib.error.HTTPError as exc:
            return exc.code == 404
        except OSError:
            return False
        return True

    def log_tail(self, n: int = 4000) -> str:
        if self.temp_dir is None:
            return ""
        path = self.temp_dir / "ray-start.log"
        return path.read_text(errors="replace")[-n:] if path.exists() else ""

    def session_dir(self) -> Path:
        assert self.temp_dir is not None
        return (self.temp_dir / "ray" / "session_latest").resolve()

    def stop(self) -> None:
        """Kill the process group we started (SIGTERM, then SIGKILL).

        Ray's processes exit on SIGTERM within a fraction of a second, but `ray start --block`
        itself does not (it sits in its monitor loop until killed), nor do the raylet and the
        autoscaler's monitor (not within 10 s here), so waiting for them only costs time: the
        group gets SIGTERM and up to 3 s to shrink, and SIGKILL once it stops shrinking.
        """
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            _wait_group_settled(self.proc.pid, grace=3.0)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        # children of `ray start` that outlived it are still in its process group
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def run_driver(self, code: str, *, timeout: float = 180,
                   cwd: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run a Python driver script connected to this head; returns the completed process."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env.update(self.client_env())
        env["RAY_ADDRESS"] = self.address
        return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd,
                              capture_output=True, text=True, timeout=timeout, check=False)


def _group_members(pgid: int) -> set[int]:
    """The live (not zombie) processes of process group `pgid`, from /proc."""
    members = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # exited meanwhile
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.add(int(entry.name))
    return members


def _wait_group_settled(pgid: int, grace: float, settle: float = 0.5) -> None:
    """Wait until group `pgid` has no member but its leader, or has not shrunk for `settle`
    seconds, at most `grace` seconds."""
    deadline = time.monotonic() + grace
    last, since = _group_members(pgid), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = _group_members(pgid)
        if now <= {pgid}:
            return
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= settle:
            return


@contextlib.contextmanager
def ray_head(**kwargs: object) -> Iterator[RayHead]:
    head = RayHead(**kwargs).start()  # type: ignore[arg-type]
    try:
        yield head
    finally:
        head.stop()


@dataclass
class RayWorkerNode:
    """A second Ray node joined to `head` on this machine: its own ports, temp dir and process
    group (`ray start --address=... --block`), stopped like the head."""

    head: RayHead
    num_cpus: int = 2
    env: dict[str, str] = field(default_factory=dict)  # the raylet's own environment additions
    proc: subprocess.Popen[bytes] | None = None
    temp_dir: Path | None = None
    node_id: str = ""

    def start(self, timeout: float = 120.0) -> RayWorkerNode:
        self.temp_dir = Path(tempfile.mkdtemp(prefix="rtw", dir="/tmp"))
        ports = free_ports(7)
        workers = worker_port_base(ports)
        deadline = time.monotonic() + timeout  # one bound for both waits
        # the head registers after it is up
        before = set(until(self.head_node_ids, what="the head node registered",
                           timeout=timeout, interval=0.3))
        args = [
            ray_executable(), "start", f"--address={self.head.address}", "--block",
            "--disable-usage-stats", "--node-ip-address=127.0.0.1",
            f"--object-manager-port={ports[0]}", f"--node-manager-port={ports[1]}",
            f"--dashboard-agent-listen-port={ports[2]}",
            f"--dashboard-agent-grpc-port={ports[3]}", f"--runtime-env-agent-port={ports[4]}",
            f"--metrics-export-port={ports[5]}",
            f"--min-worker-port={workers}", f"--max-worker-port={workers + 200}",
            f"--temp-dir={self.temp_dir / 'ray'}", f"--num-cpus={self.num_cpus}",
            "--object-store-memory=200000000",
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "CUDA_VISIBLE"))}
        env.update({"HOME": str(self.head.home), "RAY_USAGE_STATS_ENABLED": "0",
                    "RAY_AUTH_MODE": "disabled"})
        env.update(self.env)
        log = (self.temp_dir / "ray-start.log").open("wb")
        self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        proc = self.proc

        def joined() -> set[str]:
            if proc.poll() is not None:
                raise RuntimeError(f"ray start (worker) exited early:\n{self.log_tail()}")
            return set(self.head_node_ids()) - before

        try:
            self.node_id = until(joined, what=lambda: f"the worker node joined:\n{self.log_tail()}",
                                 timeout=max(0.0, deadline - time.monotonic()), interval=0.5).pop()
        except AssertionError:
            self.stop()
            raise
        return self

    def head_node_ids(self) -> list[str]:
        """The ids of the cluster's alive nodes (the dashboard's state API)."""
        import urllib.request

        url = f"{self.head.dashboard_url}/api/v0/nodes?limit=100"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - http URL we built
                data = json.loads(resp.read())
        except (OSError, ValueError):
            return []
        rows = data.get("data", {}).get("result", {}).get("result", [])
        return [r["node_id"] for r in rows if r.get("state") == "ALIVE"]

    def session_dir(self) -> Path:
        assert self.temp_dir is not None
        return (self.temp_dir / "ray" / "session_latest").resolve()

    def log_tail(self, n: int = 4000) -> str:
        path = self.temp_dir / "ray-start.log" if self.temp_dir else None
        return path.read_text(errors="replace")[-n:] if path and path.exists() else ""

    def stop(self) -> None:
        """Kill the process group we started, as `RayHead.stop` does."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            if self.proc.poll() is None:
                _wait_group_settled(self.proc.pid, grace=3.0)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
