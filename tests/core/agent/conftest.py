"""Fixtures: a real `rtenv agent` process per test (tests/support/agent.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.agent import AgentProc, agent_process


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProc]:
    with agent_process(tmp_path / "agent-store") as proc:
        yield proc


@pytest.fixture
def start_agent(tmp_path: Path) -> Callable[..., object]:
    return lambda *extra, **kw: agent_process(tmp_path / "agent-store", *extra, **kw)
