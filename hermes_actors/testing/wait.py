"""``wait_until``: poll a condition with a deadline, for what a test cannot be told.

A test waits on an event, a future or a fake clock where the code offers one. Where it
cannot (another process, a database, a socket), it asks again every ``interval`` seconds
until ``timeout`` passes: this helper, so that the polls of the suite all read the same
and all fail the same way, with one line naming what was awaited.

Under gevent with the standard library patched, ``time.sleep`` yields to the hub (it is
looked up at each call); without a patched ``time`` a greenlet passes
``sleep=gevent.sleep``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["wait_until"]

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.01,
               message: str = "the condition", *,
               sleep: Callable[[float], object] | None = None) -> T:
    """Call ``predicate`` until it returns something truthy, and return that value.

    It is asked at once, then every ``interval`` seconds; once ``timeout`` seconds have
    passed without a truthy answer it is asked a last time, then an ``AssertionError``
    says ``<message> did not hold within <timeout>s``. An exception raised by
    ``predicate`` is not caught. ``sleep`` defaults to ``time.sleep`` as it is at the call
    (patched by gevent or not)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            value = predicate()
            if value:
                return value
            raise AssertionError(f"{message} did not hold within {timeout:g}s")
        (time.sleep if sleep is None else sleep)(interval)
