"""A damaged store still opens: what cannot be read is set aside (logged), the rest recovered.

Each test damages a real store on disk as a power loss or old code would, then restarts it
(`Store(root)` runs recovery) in a new process, as the agent or the CLI would start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rtenv_cli.core.cache.backends import LocalBackend
from rtenv_cli.core.store.envs import Environments
from rtenv_cli.core.store.store import Store

_RESTART = """
import json, sys
from pathlib import Path
from rtenv_cli.core.store.store import Store
from rtenv_cli.core.cache.backends import LocalBackend
store = Store(Path(sys.argv[1]))
gc = LocalBackend(store.root).gc(dry_run=True, purge=True)
print(json.dumps(sorted(e.key for e in store.index.all())))
"""


def _restart(root: Path) -> tuple[list[str], str]:
    """Open the store in a fresh process (recovery, then a gc plan); its keys and stderr."""
    proc = subprocess.run([sys.executable, "-c", _RESTART, str(root)], capture_output=True,
                          text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


_SEED = """
import sys
from pathlib import Path
from rtenv_cli.core.store.store import Store
store = Store(Path(sys.argv[1]))
for key in ("uv:a", "uv:b"):
    store.get_or_build(key, kind="uv", uri=f"uv://{key}", label=key,
                       build=lambda t: (t / "f").write_text("x"))
"""


def _store_with_entries(root: Path) -> None:
    """Two published entries, written by a process that has exited since."""
    subprocess.run([sys.executable, "-c", _SEED, str(root)], check=True, timeout=120,
                   env={**os.environ, "PYTHONPATH": os.getcwd()})


def test_zero_length_meta_json_is_quarantined(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _store_with_entries(root)
    (root / "entries" / "uv_a" / "meta.json").write_bytes(b"")  # a power loss before the data
    (root / "index.sqlite").unlink()  # and the row: recovery must read meta.json
    keys, err = _restart(root)
    assert keys == ["uv:b"]
    assert not (root / "entries" / "uv_a").exists()
    [moved] = (root / "quarantine").iterdir()
    assert moved.name.startswith("uv_a.")
    assert (moved / "tree" / "f").read_text() == "x"  # kept for a look, out of the way
    assert err.count("meta.json unreadable") == 1


def test_garbage_and_foreign_meta_json_are_quarantined(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _store_with_entries(root)
    (root / "entries" / "uv_a" / "meta.json").write_bytes(b"\x00\xff{garbage")
    (root / "entries" / "uv_b" / "meta.json").write_text(json.dumps({"key": "uv:b"}))
    (root / "index.sqlite").unlink()
    keys, err = _restart(root)
    assert keys == []
    assert len(list((root / "quarantine").iterdir())) == 2
    assert err.count("moved to quarantine") == 2


def test_garbage_index_is_set_aside_and_rebuilt(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _store_with_entries(root)
    for suffix in ("-wal", "-shm"):
        Path(f"{root / 'index.sqlite'}{suffix}").unlink(missing_ok=True)
    (root / "index.sqlite").write_bytes(b"this is not a database" * 500)
    keys, err = _restart(root)
    assert keys == ["uv:a", "uv:b"]  # rebuilt from the directories
    [old] = root.glob("index.sqlite.corrupt-*")
    assert old.read_bytes().startswith(b"this is not a database")
    assert "index.sqlite unreadable" in err
    assert err.count("\n") == 1  # one line


def test_a_damaged_page_further_in_is_rebuilt_too(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = Store(root)
    with store.index.tx() as db:  # enough rows for pages beyond the first
        db.executemany("INSERT INTO envs VALUES (?,?,?,?)",
                       [(f"e{i}", json.dumps({"entries": []}) * 20, 0, 0) for i in range(2000)])
    store.index.conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    del store
    data = bytearray((root / "index.sqlite").read_bytes())
    page = 4096
    for at in range(2 * page, len(data), page):  # every page but the schema's
        data[at:at + 64] = b"\xee" * 64
    (root / "index.sqlite").write_bytes(bytes(data))
    keys, err = _restart(root)
    assert keys == []
    assert list(root.glob("index.sqlite.corrupt-*"))
    assert "index.sqlite unreadable" in err


def test_a_ref_row_with_a_bad_pid_does_not_stop_start_up_or_gc(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _store_with_entries(root)
    store = Store(root)
    with store.index.tx() as db:  # what the old code stored from {"pid": "abc"} and friends
        db.executemany("INSERT INTO refs VALUES ('env', ?, ?, ?, NULL, ?, 0)",
                       [("uv:a", "h1", "abc", None), ("uv:a", "h2", 1.5, None),
                        ("uv:b", "h3", 0, None), ("uv:b", "h4", -1, None),
                        ("uv:b", "h5", 2**62, None), ("uv:b", "h6", None, "soon")])
    del store
    keys, _err = _restart(root)
    assert keys == ["uv:a", "uv:b"]
    store = Store(root)
    assert store.index.conn().execute("SELECT COUNT(*) FROM refs").fetchone()[0] == 0
    removed = LocalBackend(root).gc(dry_run=False, purge=True).removed
    assert sorted(e.key for e in removed) == ["uv:a", "uv:b"]  # pid 0 and -1 pin nothing


def test_bad_pid_or_lease_is_refused_at_create(tmp_path: Path) -> None:
    from rtenv_cli.core.errors import UsageError

    envs = Environments(Store(tmp_path / "store"))
    for pid, lease in (("abc", None), (1.5, None), (0, None), (-1, None), (2**80, None),
                       (True, None), (None, "abc"), (None, float("nan")), (None, -5)):
        with pytest.raises(UsageError):
            envs.get_or_create({"env_vars": {"A": "1"}}, holder="h", pid=pid, lease_s=lease)


def test_unreadable_manifest_is_quarantined_and_gc_goes_on(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    root = tmp_path / "store"
    _store_with_entries(root)
    name = "_ray_pkg_0123456789abcdef.zip"
    (root / "manifests" / f"{name}.json").write_text('{"uri": "gcs://x", "entr')  # torn
    monkeypatch.setenv("RTENV_UPLOAD_PIN_S", "0")
    store = Store(root)
    import hashlib
    import io

    store.put_blob(hashlib.sha256(b"b").hexdigest(), io.BytesIO(b"b"))
    store.blobs_in_use()  # what removing a blob asks: reads every manifest
    assert not store.has_package(name)
    assert any(p.name.startswith(f"{name}.json.") for p in (root / "quarantine").iterdir())
    result = LocalBackend(root).gc(dry_run=False, purge=True)
    assert sorted(e.kind for e in result.removed) == ["blob", "uv", "uv"]


def test_old_env_rows_with_secret_values_are_read_and_rewritten(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    envs = Environments(store)
    handle = envs.get_or_create({"env_vars": {"PASSWORD": "hunter2"}}, holder="h")
    spec = store.index.conn().execute("SELECT spec FROM envs").fetchone()[0]
    assert "hunter2" not in spec
    assert envs.list_envs()[0]["env_var_keys"] == ["PASSWORD"]
    with store.index.tx() as db:  # a row as older code wrote it: values included
        db.execute("UPDATE envs SET spec=?", (json.dumps(
            {"entries": [], "env_vars": {"PASSWORD": "hunter2"}}),))
        db.execute("INSERT INTO envs VALUES ('broken', '{not json', 0, 0)")
    assert [e["env_var_keys"] for e in envs.list_envs()] == [["PASSWORD"]]
    import time

    time.sleep(1.1)  # a hit rewrites the row at most once a second
    envs.get_or_create({"env_vars": {"PASSWORD": "hunter2"}}, holder="h2")
    rows = [r[0] for r in store.index.conn().execute("SELECT spec FROM envs")]
    assert not any("hunter2" in r for r in rows if r != "{not json")
    assert handle.env_vars == {"PASSWORD": "hunter2"}  # the caller still gets the values


def test_per_user_store_is_private(tmp_path: Path) -> None:
    store = Store()  # the default: under RTENV_HOME
    Environments(store).get_or_create({"env_vars": {"A": "1"}}, holder="h")
    assert store.root.stat().st_mode & 0o777 == 0o700
    for name in ("index.sqlite", "index.sqlite-wal", "index.sqlite.wlock", "owners.lock"):
        path = store.root / name
        assert path.stat().st_mode & 0o077 == 0, name
