"""The workers the zip writer (packaging/build.py) hands its small files to: forked processes
for many small files, threads for fewer, none for a few.

Deflating many small files holds the GIL most of the time (zlib's per-stream set-up), so threads
give no speed-up there; forked processes do. A stored package's files only need a read, crc32
and the hashes, which release the GIL, but the per-file Python work does not: threads cost less
CPU there and lose time only on very many small files (build.py: `stored_by_forks`).
Starting a process pool costs more than it saves on fewer files (benchmarks/results/
fastpaths.json: "start a process pool and run one task"), and a re-push's one or two changed
files are not worth any pool (its start and the concurrent.futures import cost more than the
work).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

INLINE_FILES = 4  # this many small files or fewer: no pool, each call runs at once
PROCESS_MIN_FILES = 512  # fewer small files: threads, not processes


class Inline:
    """An executor that runs each call at once (see the module doc)."""

    def __enter__(self) -> Inline:
        return self

    def __exit__(self, *_exc: object) -> None:
        pass

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        return Done(fn(*args))


@dataclass
class Done:
    """A finished call of `Inline`, with the part of a Future's interface the writer uses."""

    value: Any

    def done(self) -> bool:
        return True

    def result(self) -> Any:
        return self.value


def forks(small_files: int, processes: bool = True) -> bool:
    """Whether `workers_for` gives forked processes for `small_files` files."""
    if not processes or small_files < PROCESS_MIN_FILES or small_files <= INLINE_FILES:
        return False
    import multiprocessing

    return "fork" in multiprocessing.get_all_start_methods()


def workers_for(small_files: int, processes: bool = True) -> Any:
    """An executor (a context manager with `submit`) for `small_files` files: processes for
    many, threads for fewer, `Inline` for a few (module doc). `processes=False`: never fork
    (a server's threads may hold locks a forked child would wait on forever). The process
    pool's modules are imported only for one (fastpaths.json:
    "import concurrent.futures.process")."""
    if small_files <= INLINE_FILES:
        return Inline()
    workers = max(2, os.cpu_count() or 2)
    if forks(small_files, processes):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(workers)


__all__ = ["INLINE_FILES", "PROCESS_MIN_FILES", "Done", "Inline", "forks", "workers_for"]
