"""What every group commit of the store shares: the size of a group, and how a waiterless
write hears of its outcome.

Three committers group callers' op lists into one transaction each: the SQLite executor
(:mod:`~hermes_actors.store.backends.sqlite.executor`), the SQLite writer process
(:mod:`~hermes_actors.store.backends.sqlite.writer_process`) and the PostgreSQL committer
(:mod:`~hermes_actors.store.backends.postgres.committer`). They wait and hand off in
different ways (a native thread beside the gevent hub, a pipe to a child process, a thread
that is a greenlet under gevent), so only these two things are one here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_GROUP", "call_back"]

log = logging.getLogger("hermes_actors.store")

#: Most op lists (or grouped payloads) in one transaction.
MAX_GROUP = 256


def call_back(callback: Callable[[bool, Any], None], ok: bool, value: Any) -> None:
    """``callback(ok, value)`` for a write nobody waits for; a failing callback is logged
    (it must not stop the others)."""
    try:
        callback(ok, value)
    except Exception:  # noqa: BLE001
        log.exception("a database write's completion callback failed")
