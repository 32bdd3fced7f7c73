"""What each push target can do is declared on its class, not guessed from its label."""

from __future__ import annotations

from pathlib import Path

from rtenv_cli.core.transport.agent_http import AgentTarget
from rtenv_cli.core.transport.base import DeltaTarget, ForkingTarget
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
    caps = {name: (t.pins, isinstance(t, DeltaTarget), isinstance(t, ForkingTarget))
            for name, t in targets.items()}
    assert caps == {
        "gcs": (True, False, True),
        "dashboard": (True, False, False),
        "agent": (False, True, False),
        "store": (False, True, False),
        "file": (False, False, False),
    }
