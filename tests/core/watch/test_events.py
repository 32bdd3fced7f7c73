from __future__ import annotations

import errno
from pathlib import Path

from rtenv_cli.core.watch.events import Watcher, limit_notice
from tests.core.watch.helpers import wait_for


def test_limit_notices_name_the_sysctl() -> None:
    watches = limit_notice(OSError(errno.ENOSPC, "No space left on device"))
    instances = limit_notice(OSError(errno.EMFILE, "Too many open files"))
    assert watches is not None
    assert "fs.inotify.max_user_watches" in (watches.hint or "")
    assert instances is not None
    assert "fs.inotify.max_user_instances" in (instances.hint or "")
    assert limit_notice(OSError(errno.EACCES, "denied")) is None


def test_native_watcher_reports_paths(tmp_path: Path) -> None:
    seen: list[str] = []
    w = Watcher([tmp_path], lambda path, _complete: seen.append(path))
    w.start()
    try:
        assert w.mode == "native"
        (tmp_path / "x.py").write_text("x")
        wait_for(lambda: str(tmp_path / "x.py") in seen)
    finally:
        w.stop()


def test_limit_error_falls_back_to_polling(tmp_path: Path) -> None:
    notices = []

    def exhausted() -> object:
        raise OSError(errno.ENOSPC, "No space left on device")

    seen: list[str] = []
    w = Watcher([tmp_path], lambda path, _complete: seen.append(path),
                observer_factory=exhausted, poll_interval_s=0.1,
                on_notice=notices.append)
    w.start()
    try:
        assert w.mode == "polling"
        assert len(notices) == 1
        (tmp_path / "y.py").write_text("y")
        wait_for(lambda: str(tmp_path / "y.py") in seen)
    finally:
        w.stop()
