"""A 2-node Ray 2.60.0 cluster with rtenv's plugin on both nodes, each with its own store."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import rtenv_cli
from rtenv_cli.core.rayplugin.setup import ray_env_vars
from tests.support.ray_head import RayHead, RayWorkerNode

REPO = Path(rtenv_cli.__file__).resolve().parents[1]


def plugin_env(home: Path) -> dict[str, str]:
    """What `rtenv ray-env --root HOME` prints, plus this checkout on the agents' path."""
    return {**ray_env_vars(root=home), "PYTHONPATH": str(REPO)}


@dataclass
class PluginCluster:
    head: RayHead
    worker: RayWorkerNode
    head_home: Path
    worker_home: Path

    @property
    def head_node_id(self) -> str:
        return next(n for n in self.worker.head_node_ids() if n != self.worker.node_id)

    def setup_logs(self) -> str:
        """Every runtime_env_setup log line of both nodes."""
        text = []
        for session in (self.head.session_dir(), self.worker.session_dir()):
            for log in sorted((session / "logs").glob("runtime_env_setup-*.log")):
                text.append(log.read_text(errors="replace"))
        return "\n".join(text)

    def node_logs(self, which: str) -> str:
        node = self.head if which == "head" else self.worker
        return "\n".join(p.read_text(errors="replace")
                         for p in sorted((node.session_dir() / "logs")
                                         .glob("runtime_env_setup-*.log")))


@pytest.fixture(scope="session")
def plugin_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PluginCluster]:
    base = tmp_path_factory.mktemp("rtenv-plugin")
    head_home, worker_home = base / "head-home", base / "worker-home"
    head = RayHead(env=plugin_env(head_home)).start()
    try:
        worker = RayWorkerNode(head, env=plugin_env(worker_home)).start()
        try:
            yield PluginCluster(head, worker, head_home, worker_home)
        finally:
            worker.stop()
    finally:
        head.stop()
