"""Stopping what a test started: only its own process group, by PID, never by name."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any


def stop_group(proc: subprocess.Popen[Any], timeout: float = 10) -> None:
    """SIGTERM the process group `proc` leads (started with start_new_session=True), then
    SIGKILL it if it has not exited within `timeout` seconds."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)
