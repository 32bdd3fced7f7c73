"""The tests' one waiter: poll a condition until it holds.

A test waits on a condition, never on a sleep: `until` checks PREDICATE every `interval` and
returns as soon as it holds. The deadline is generous on purpose, a bound that only a broken
build reaches (a loaded CI box is slow, not wrong), and reaching it fails the test with what it
was waiting for.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

TIMEOUT = 120.0  # seconds; a bound for a failure, not the expected wait


def until(predicate: Callable[[], T], *, what: str | Callable[[], str],
          timeout: float = TIMEOUT, interval: float = 0.05,
          retry_on: tuple[type[BaseException], ...] = ()) -> T:
    """PREDICATE's first truthy result, polled every INTERVAL seconds. An exception of a type in
    RETRY_ON counts as "not yet". Past TIMEOUT, fails with WHAT (a string, or a function that
    describes the state at that moment) and the last exception retried, if any."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = predicate()
        except retry_on as exc:
            last = exc
        else:
            if value:
                return value
        if time.monotonic() >= deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"waited {timeout:g} s for {said}"
                                 + (f" (last: {last!r})" if last is not None else ""))
        time.sleep(interval)


def described(predicate: Callable[[], object]) -> str:
    """The source line of PREDICATE (a lambda), for a `what` nobody wrote."""
    try:
        return inspect.getsource(predicate).strip()
    except (OSError, TypeError):
        return repr(predicate)
