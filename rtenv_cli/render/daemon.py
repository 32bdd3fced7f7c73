"""Text for `rtenv daemon start|stop|status` (JSON is DaemonState.to_dict)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rtenv_cli.render.units import human_duration

if TYPE_CHECKING:
    from rtenv_cli.render.output import Output
    from rtenv_cli.resident.control import DaemonState


def render_state(out: Output, state: DaemonState, *, verb: str) -> None:
    """`rtenv daemon: running, pid 4242, up 5m, exits after 30m idle; socket ...`."""
    if state.pid is None:
        out.line(f"rtenv daemon: {verb} (socket {state.socket})")
        return
    facts = [f"pid {state.pid}"]
    if state.started is not None and verb in ("running", "started", "already running"):
        facts.append(f"up {human_duration(max(0.0, time.time() - state.started), exact=False)}")
    if state.idle_exit_s is not None and verb in ("running", "started", "already running"):
        facts.append(f"exits after {human_duration(state.idle_exit_s)} idle")
    if state.current is False:
        facts.append("STALE: it runs other code than this install; `rtenv daemon start` "
                     "replaces it")
    out.line(f"rtenv daemon: {verb}, {', '.join(facts)}; socket {state.socket}")
