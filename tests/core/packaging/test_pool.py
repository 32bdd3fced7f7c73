from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import pytest

from rtenv_cli.core.packaging.pool import (
    INLINE_FILES,
    PROCESS_MIN_FILES,
    Inline,
    forks,
    workers_for,
)


def _pid() -> int:
    return os.getpid()


def test_a_few_files_run_inline_in_the_caller() -> None:
    with workers_for(INLINE_FILES) as pool:
        assert isinstance(pool, Inline)
        fut = pool.submit(_pid)
        assert fut.done()
        assert fut.result() == os.getpid()


def test_inline_raises_the_call_s_error_at_submit() -> None:
    with pytest.raises(ValueError, match="invalid literal"), Inline() as pool:
        pool.submit(int, "x")


def test_fewer_than_process_min_files_use_threads() -> None:
    with workers_for(INLINE_FILES + 1) as pool:
        assert isinstance(pool, ThreadPoolExecutor)
        assert pool.submit(_pid).result() == os.getpid()
    with workers_for(PROCESS_MIN_FILES - 1) as pool:
        assert isinstance(pool, ThreadPoolExecutor)


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                    reason="forked worker processes need the fork start method")
def test_many_files_use_forked_processes_unless_told_not_to() -> None:
    with workers_for(PROCESS_MIN_FILES) as pool:
        assert isinstance(pool, ProcessPoolExecutor)
        assert pool.submit(_pid).result() != os.getpid()
    with workers_for(PROCESS_MIN_FILES, processes=False) as pool:
        assert isinstance(pool, ThreadPoolExecutor)


@pytest.mark.parametrize("files", [INLINE_FILES, INLINE_FILES + 1, PROCESS_MIN_FILES - 1,
                                   PROCESS_MIN_FILES])
@pytest.mark.parametrize("processes", [True, False])
def test_forks_says_what_workers_for_gives(files: int, processes: bool) -> None:
    """The zip writer decides on batch files from `forks` before it has the pool."""
    with workers_for(files, processes) as pool:
        assert forks(files, processes) == isinstance(pool, ProcessPoolExecutor)
