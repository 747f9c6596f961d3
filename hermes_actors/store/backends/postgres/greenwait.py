"""``WriterConnection``: the committer's connection, which asks the hub only when it must wait.

Under gevent psycopg waits cooperatively: every time libpq wants the socket readable or
writable, psycopg polls it through gevent's patched ``select.poll``, i.e. the waiting
greenlet goes to the hub and comes back when the hub's loop gets to it, after every other
greenlet that was ready. The committer is one serial chain (a transaction's statements
out, its answers in, ``COMMIT`` out and in), and a wait on a socket that is already ready
(writable for a send, readable once the server has answered) only added a trip round the
hub to that chain. Measured when the writer still sent a statement at a time: ~290 µs a
statement, the committer the bound on throughput; later, with a group's statements sent
as one query (``batch``), p99 at 700 and 900 msg/s was 135 and 103 ms with psycopg's own
connection against 36 and 46 ms with this one.

This connection asks the operating system first, without blocking (the original, unpatched
``poll`` with a zero timeout); only when the socket is not ready yet (the server has not
answered) does it wait the usual way, on the hub. Every :data:`YIELD_EVERY` ready answers
in a row it also passes through the hub (a cooperative wait on a ready socket returns at
once), so that a long exchange cannot keep the other greenlets off the hub.

Without gevent there is nothing to gain (psycopg waits in C): :func:`connection_class`
gives psycopg's own ``Connection`` there.
"""

from __future__ import annotations

import select
import sys
from collections.abc import Callable, Generator
from typing import Any

import psycopg
from psycopg.waiting import Ready, Wait

__all__ = ["YIELD_EVERY", "WriterConnection", "connection_class"]

#: Ready sockets in a row after which the connection lets the hub run anyway.
YIELD_EVERY = 64

_EVENTS = {Wait.R: select.POLLIN, Wait.W: select.POLLOUT,
           Wait.RW: select.POLLIN | select.POLLOUT}


def _native_poll() -> Callable[[], Any]:
    """``select.poll`` as the operating system provides it (gevent's original)."""
    from gevent.monkey import get_original

    poll: Callable[[], Any] = get_original("select", "poll")
    return poll


def _ready_first(gen: Generator[Any, Any, Any], fileno: int,
                 poll_class: Callable[[], Any]) -> Generator[Any, Any, Any]:
    """``gen`` (a psycopg generator) that yields a wait to the caller (psycopg's cooperative
    wait) only when ``fileno`` is not ready now, or after :data:`YIELD_EVERY` ready ones."""
    poll = poll_class()
    registered = None
    in_a_row = 0
    try:
        state = next(gen)
        while True:
            ready: int = Ready.NONE
            if in_a_row < YIELD_EVERY:
                if state != registered:
                    if registered is not None:
                        poll.unregister(fileno)
                    poll.register(fileno, _EVENTS[state])
                    registered = state
                events = poll.poll(0)
                if events:
                    mask = events[0][1]
                    if mask & select.POLLIN:
                        ready |= Ready.R
                    if mask & select.POLLOUT:
                        ready |= Ready.W
            if ready:
                in_a_row += 1
            else:  # not ready (or an error: psycopg's wait sees to it), or time to yield
                in_a_row = 0
                ready = yield state
            state = gen.send(ready)
    except StopIteration as done:
        return done.value


class WriterConnection(psycopg.Connection[Any]):
    """A psycopg connection whose waits go to the hub only when the socket is not ready
    (module doc). Only for a process that gevent has patched."""

    _poll_class: Callable[[], Any] | None = None

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        poll_class = type(self)._poll_class
        if poll_class is None:
            poll_class = type(self)._poll_class = _native_poll()
        return super().wait(_ready_first(gen, self.pgconn.socket, poll_class),
                            interval=interval, timeout=timeout)


def connection_class() -> type[psycopg.Connection[Any]]:
    """:class:`WriterConnection` where gevent has patched ``select`` (the condition under
    which psycopg itself waits cooperatively), else psycopg's ``Connection``."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and monkey.is_module_patched("select"):
        return WriterConnection
    return psycopg.Connection
