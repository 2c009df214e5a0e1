"""One way for integration tests to wait for a cluster to get somewhere."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# Long enough for elections, rebalances and retention sweeps on a busy 2-core machine.
WAIT_S = 40.0


def wait_until(
    check: Callable[[], T],
    what: str = "the condition",
    *,
    timeout: float = WAIT_S,
    every: float = 0.2,
    done: Callable[[T], bool] = bool,
    tolerate: tuple[type[BaseException], ...] = (),
    step: Callable[[], object] | None = None,
) -> T:
    """Poll `check` until `done` says its value is reached (by default: a true value),
    and return that value. Exceptions of the `tolerate` types count as not yet. Between
    polls, `step` runs (a client's poll, say) instead of a sleep of `every` seconds.
    AssertionError after `timeout` seconds, naming `what` and the last value or error."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = check()
            if done(value):
                return value
            last = value
        except tolerate as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {timeout}s (last seen: {last!r})")
        if step is None:
            time.sleep(every)
        else:
            step()
