"""Unique ids for events and turn tokens: a random per-process prefix and a counter.

``uuid4()`` costs a system call per id, and under gevent ``os.urandom`` releases the GIL,
so the hub then waits for the SQLite writer thread to give it back: measured at ~50 µs of
wall time per id inside a busy gateway. Random ids also scatter the inbox's unique index.
An id here is 32 hex digits, like ``uuid4().hex``: 64 random bits drawn once per process
(and again in a forked child) followed by a 64-bit counter, so ids never repeat within a
process, processes are kept apart by the prefix, and consecutive ids sort together.
"""

from __future__ import annotations

import itertools
import os
import secrets

__all__ = ["new_id"]


class _Ids:
    def __init__(self) -> None:
        self.reseed()

    def reseed(self) -> None:
        self.prefix = f"{secrets.randbits(64):016x}"
        self.counter = itertools.count(secrets.randbits(32))  # next() is atomic in CPython


_ids = _Ids()
os.register_at_fork(after_in_child=_ids.reseed)


def new_id() -> str:
    """A fresh 32-hex-digit id, unique across processes (see the module docstring)."""
    return f"{_ids.prefix}{next(_ids.counter):016x}"
