"""The small choices code comments used to justify with a number: each measured here, the choice
beside its plain alternative (an `ablation:` row) in one run, so a comment names its row instead
of a figure that goes stale. tests/test_benchmark_refs.py checks every row a comment names is in
benchmarks/results/fastpaths.json.

Imports are timed in fresh processes (median, bytecode cached, as on an install); the rest in
this process on 10,000 items, the size of the packages the comments speak of.
"""

from __future__ import annotations

import dataclasses
import json
import marshal
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import Row, bytecode_env

N = 10_000


def _median(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _import_cost(statement: str, repeat: int, setup: str = "") -> float:
    """Seconds a fresh interpreter spends on STATEMENT (its start-up and SETUP excluded)."""
    code = (setup + "\nimport time\nt = time.perf_counter()\n" + statement +
            "\nprint(time.perf_counter() - t)")
    env = {**os.environ, **bytecode_env()}
    times = []
    for i in range(repeat + 1):
        out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                             capture_output=True, text=True).stdout
        if i:  # the first run fills the bytecode cache
            times.append(float(out.split()[-1]))
    return statistics.median(times)


def _row(metric: str, seconds: float, notes: str, *, ablation_of: float | None = None) -> Row:
    if ablation_of is None:
        return Row("fastpaths", metric, "s", seconds, None, notes=notes)
    return Row("fastpaths", metric, "s", seconds, None,
               f"slower than the choice ({ablation_of:.4f} s)", seconds > ablation_of, notes)


def _imports(repeat: int) -> list[Row]:
    every = "[build(name) for name in COMMANDS]"
    setup = "import rtenv_cli.cli\nfrom rtenv_cli.cli.commands import COMMANDS, build"
    return [
        _row("build every command", _import_cost(every, repeat, setup),
             "what cli/commands.py's lazy table saves each run (after `import rtenv_cli.cli`)"),
        _row("import pathspec", _import_cost("import pathspec", repeat),
             "what packaging/ignore.py's translation cache saves a re-push"),
        _row("import platformdirs", _import_cost("import platformdirs", repeat),
             "what core/config.py's own XDG lookup saves every command"),
        _row("import pynvml", _import_cost("import pynvml", repeat),
             "what explain/nvml.py saves by not importing it without a driver"),
        _row("import importlib.metadata", _import_cost("import importlib.metadata", repeat),
             "what lint/rules/requirements.py's directory listing saves"),
        _row("import filelock", _import_cost("import filelock", repeat),
             "what packaging/digest_cache.py's flock saves each cold build (its fold)"),
        _row("import concurrent.futures.process",
             _import_cost("import concurrent.futures.process", repeat,
                          "import concurrent.futures.thread"),
             "what packaging/pool.py saves when threads do a zip's work (the thread pool's "
             "modules imported already)"),
    ]


def _digests() -> list[bytes]:
    import hashlib

    return [hashlib.sha1(str(i).encode()).digest() for i in range(N)]  # noqa: S324 - Ray's


def _fold_rows(repeat: int) -> list[Row]:
    from rtenv_cli.core.packaging.hashing import EMPTY_ACC, acc_of, fold

    digests = _digests()

    def by_bytes() -> bytes:
        acc = EMPTY_ACC
        for d in digests:
            acc = fold(acc, d)
        return acc

    assert acc_of(digests) == by_bytes()
    xor = _median(lambda: acc_of(digests), repeat)
    return [_row("fold 10,000 digests as one integer XOR", xor, "hashing.acc_of, store.delta"),
            _row("ablation: fold 10,000 digests over bytes", _median(by_bytes, repeat),
                 "hashing.fold per digest, as Ray does", ablation_of=xor)]


def _entry_rows(repeat: int) -> list[Row]:
    from rtenv_cli.core.packaging.walk import Entry

    @dataclasses.dataclass(frozen=True)
    class AsDataclass:
        relpath: str
        fspath: str
        is_dir: bool
        size: int
        mode: int
        mtime_ns: int = 0
        ino: int = 0
        in_zip: bool = True
        special: bool = False

    names = [(f"d/m{i}.py", f"/src/d/m{i}.py") for i in range(N)]
    tup = _median(lambda: [Entry(r, f, False, 10, 0o644, 1, 2) for r, f in names], repeat)
    return [
        _row("build 10,000 walk entries as NamedTuples", tup, "packaging.walk.Entry"),
        _row("ablation: build 10,000 walk entries as dataclasses",
             _median(lambda: [AsDataclass(r, f, False, 10, 0o644, 1, 2) for r, f in names],
                     repeat), "a frozen dataclass of the same fields", ablation_of=tup),
        _row("ablation: build 10,000 walk entries with Path objects",
             _median(lambda: [Entry(r, Path(f), False, 10, 0o644, 1, 2)  # type: ignore[arg-type]
                              for r, f in names], repeat),
             "Entry.fspath as a Path instead of a str", ablation_of=tup),
    ]


def _cache_rows(repeat: int, tmp: Path) -> list[Row]:
    """The digest cache's base and the zip sidecar: marshal, beside SQLite and JSON."""
    rows = {f"/src/d/m{i}.py": (100 + i, 1_700_000_000_000_000_000 + i, 1000 + i, 0o100644,
                                os.urandom(20), os.urandom(32).hex()) for i in range(N)}
    base = tmp / "base.marshal"
    base.write_bytes(marshal.dumps(rows))
    db = tmp / "digests.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE d (path TEXT PRIMARY KEY, size INT, mtime INT, ino INT, "
                     "mode INT, sha1 BLOB, sha256 TEXT)")
        conn.executemany("INSERT INTO d VALUES (?,?,?,?,?,?,?)",
                         [(k, *v) for k, v in rows.items()])

    def scan() -> dict[str, tuple[object, ...]]:
        with sqlite3.connect(db) as conn:
            return {r[0]: r[1:] for r in conn.execute("SELECT * FROM d")}

    members = {f"d/m{i}.py": (i * 100, i * 100 + 90, os.urandom(20)) for i in range(N)}
    sidecar = tmp / "sidecar.marshal"
    sidecar.write_bytes(marshal.dumps((1, (1, 2), (os.urandom(20), members), {})))
    as_json = tmp / "sidecar.json"
    as_json.write_text(json.dumps({k: [a, b, c.hex()] for k, (a, b, c) in members.items()}))

    loaded = _median(lambda: marshal.loads(base.read_bytes()), repeat)  # noqa: S302 - ours
    side = _median(lambda: marshal.loads(sidecar.read_bytes()), repeat)  # noqa: S302 - ours
    return [
        _row("load a digest cache of 10,000 files (marshal)", loaded,
             "packaging/digest_cache.py's base file"),
        _row("ablation: load a digest cache of 10,000 files (SQLite scan)", _median(scan, repeat),
             "the same rows from one SQLite table", ablation_of=loaded),
        _row("load a zip sidecar of 10,000 members (marshal)", side,
             "packaging/zipreuse.py's .state file"),
        _row("ablation: load a zip sidecar of 10,000 members (JSON)",
             _median(lambda: json.loads(as_json.read_text()), repeat),
             "the same members as JSON", ablation_of=side),
    ]


def _zip_rows(repeat: int, tmp: Path) -> list[Row]:
    from rtenv_cli.core.packaging.zipreuse import ZipIndex

    path = tmp / "p.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for i in range(N):
            zf.writestr(f"d/m{i}.py", b"x")
    first = ZipIndex.read(path)
    assert first is not None
    known = (first.cd_digest, {n: (m.start, m.end, m.record) for n, m in first.members.items()})
    first.close()

    def index(k: object = None) -> None:
        got = ZipIndex.read(path, k)  # type: ignore[arg-type]
        assert got is not None
        got.close()

    def by_zipfile() -> None:
        with zipfile.ZipFile(path) as zf:
            zf.infolist()

    ours = _median(index, repeat)
    again = _median(lambda: index(known), repeat)
    return [
        _row("index a zip of 10,000 members (zipreuse.ZipIndex)", ours,
             "one struct per central-directory record"),
        _row("ablation: index a zip of 10,000 members (zipfile.ZipFile)",
             _median(by_zipfile, repeat), "a ZipInfo object per member", ablation_of=ours),
        _row("index a zip of 10,000 members again (digest known)", again,
             "a re-push: the central directory's digest matches the sidecar's"),
    ]


def _pool_rows(repeat: int) -> list[Row]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    def pool() -> None:
        with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as ex:
            ex.submit(int, "1").result()

    return [_row("start a process pool and run one task", _median(pool, repeat),
                 "what packaging/pool.py saves with threads below PROCESS_MIN_FILES")]


def _listener_rows(repeat: int) -> list[Row]:
    import socket

    from rtenv_cli.core.transport import listeners

    def diag() -> object:
        return [*listeners._diag(socket.AF_INET), *listeners._diag(socket.AF_INET6)]

    ours = _median(diag, repeat)
    return [_row("find the owners of listening sockets (sock_diag)", ours,
                 "transport/listeners.py: the listening table only, as `ss -ltn`"),
            _row("ablation: find the owners of listening sockets (/proc/net/tcp)",
                 _median(listeners._tables, repeat), "every connection of the machine, printed",
                 ablation_of=ours)]


def run(quick: bool) -> list[Row]:
    repeat = 3 if quick else 15
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="rtenv-bench-fast-") as tmp:
        rows = [*_imports(repeat), *_fold_rows(repeat), *_entry_rows(repeat),
                *_cache_rows(repeat, Path(tmp)), *_zip_rows(repeat, Path(tmp)),
                *_pool_rows(repeat), *_listener_rows(repeat)]
    for row in rows:
        row.notes += (f"; median of {repeat}; load avg {load:.2f} -> {os.getloadavg()[0]:.2f} "
                      f"on {os.cpu_count()} cores")
    return rows
