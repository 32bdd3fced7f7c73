"""What each push target can do is declared on its class, not guessed from its label."""

from __future__ import annotations

from pathlib import Path

from rtenv_cli.core.transport.agent_http import AgentTarget
from rtenv_cli.core.transport.base import DeltaTarget, ForkingTarget, RemoteServing, Target
from rtenv_cli.core.transport.file_target import FileTarget
from rtenv_cli.core.transport.local_store import LocalStoreTarget
from rtenv_cli.core.transport.ray_dashboard import RayDashboardTarget
from rtenv_cli.core.transport.ray_gcs import RayGcsTarget


def test_capabilities(tmp_path: Path) -> None:
    # constructing a target opens no connection: nothing listens on these ports
    targets = {
        "gcs": RayGcsTarget("127.0.0.1:9", env={}),
        "dashboard": RayDashboardTarget("http://127.0.0.1:9", env={}),
        "agent": AgentTarget("http://127.0.0.1:9"),
        "store": LocalStoreTarget(tmp_path / "store"),
        "file": FileTarget((tmp_path / "shared").as_uri()),
    }
    assert all(isinstance(t, Target) for t in targets.values())
    caps = {name: (t.pins, t.layout, t.verifies_packages, isinstance(t, DeltaTarget),
                   isinstance(t, ForkingTarget), isinstance(t, RemoteServing))
            for name, t in targets.items()}
    assert caps == {
        "gcs": (True, "ray", False, False, True, False),
        "dashboard": (True, "ray", False, False, False, False),
        "agent": (False, "ray", True, True, False, True),
        "store": (False, "ray", True, True, False, False),
        "file": (False, "remote", False, False, False, False),
    }
