"""Rendering for `rtenv push --watch`: one line per push, a live status line on a TTY."""

from __future__ import annotations

import time
from typing import Any

from rtenv_cli.render.output import Output
from rtenv_cli.render.units import human_bytes


def push_line(event: Any) -> str:
    return (f"+{len(event.added)} ~{len(event.modified)} -{len(event.removed)} files, "
            f"{human_bytes(event.bytes_sent)} sent, {event.uri} in {event.elapsed_ms:.0f} ms")


class WatchRenderer:
    """Callbacks for WatchSession: stdout gets data (lines or JSON), stderr gets notices."""

    def __init__(self, out: Output, *, verbose: bool = False, label: str = "") -> None:
        self.out = out
        self.verbose = verbose
        self.label = label
        self.live = not out.is_machine and out.stdout.isatty()
        self._status: Any = None

    def start_status(self, text: str) -> None:
        if not self.live:
            return
        self._status = self.out.console().status(text, spinner="dots")
        self._status.start()

    def set_status(self, text: str) -> None:
        if self._status is not None:
            self._status.update(text)

    def stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def on_push(self, event: Any) -> None:
        if self.out.fmt == "json":
            self.out.json_line(event.to_dict())
            return
        line = push_line(event)
        if event.trigger != "change":
            line += f" ({event.trigger})"
        if self._status is not None:
            self.out.console().print(line, highlight=False, markup=False)
        else:
            self.out.line(line)
            self.out.stdout.flush()
        if self.verbose:
            for sign, files in (("+", event.added), ("~", event.modified), ("-", event.removed)):
                for f in files:
                    self.out.message(f"  {sign} {f}")
            if event.triggered_by and not (event.added or event.modified or event.removed):
                self.out.message("  triggered by: " + ", ".join(event.triggered_by))
            for label, uri in event.uris.items():
                self.out.message(f"  {label}: {uri}")
        self.set_status(f"watching {self.label} · last push {time.strftime('%H:%M:%S')} · "
                        "Ctrl-C to stop")

    def on_notice(self, kind: str, message: str, hint: str | None) -> None:
        if kind == "error":
            self.out.stderr.write(f"error: {message}\n")
            if hint:
                self.out.stderr.write(f"hint: {hint}\n")
            self.out.stderr.flush()
        elif kind == "note":  # as `rtenv push` says it (render/push.py)
            self.out.message(f"note: {message}")
        elif kind == "env":
            self.out.warning(message, hint)
        else:
            self.out.warning(message, hint)
