"""Test isolation: every test gets its own RTENV_HOME, no colour, a fixed width, a temp CWD."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ray_head import RayHead

FAKE_ACCELERATORS = {"neuron_cores": 8, "TPU": 8, "HPU": 8, "NPU": 8, "RBLN": 4, "TTNPU": 4,
                     "FURIOSA": 4, "MBLT": 4}


@pytest.fixture(autouse=True)
def _isolate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "rtenv-home"
    monkeypatch.setenv("RTENV_HOME", str(home))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    for var in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RTENV_CONFIG", "FORCE_COLOR",
                "RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES",
                "RAY_AUTH_TOKEN", "RAY_AUTH_MODE", "RTENV_DEBUG"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayHead]:
    """One real Ray 2.60.0 head for the whole session: no auth, 2 CPUs, fake accelerators.

    The fake GPUs and accelerator resources serve `explain` parity; push and cache ignore them.
    """
    head = RayHead(num_gpus=8, resources=FAKE_ACCELERATORS).start()
    try:
        yield head
    finally:
        head.stop()


@pytest.fixture(scope="session")
def ray_cluster_token() -> Iterator[RayHead]:
    """A second head with Ray's token auth on."""
    head = RayHead(token="rtenv-test-token-0123456789abcdef").start()  # noqa: S106 - test token
    try:
        yield head
    finally:
        head.stop()
