"""``call_agent``: run agent code inside an actor without letting it take the actor down.

pykka stops *every* actor of the process when a handler lets a ``BaseException`` escape, so
a ``SystemExit`` or a leaked timeout from agent code must stop at the call. Only
``GreenletExit`` (gevent killing this very greenlet) passes through.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

__all__ = ["call_agent", "call_optional", "is_greenlet_exit"]

log = logging.getLogger("hermes_actors.agent")


def is_greenlet_exit(exc: BaseException) -> bool:
    """Whether ``exc`` is gevent killing the current greenlet (it must pass through)."""
    return type(exc).__name__ == "GreenletExit"


def call_agent(what: str, session_key: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``; any failure is logged with ``what`` and the key, and gives ``None``."""
    try:
        return fn(*args)
    except BaseException as exc:  # noqa: BLE001 - see the module docstring
        if is_greenlet_exit(exc):
            raise
        log.exception("%s failed session_key=%s", what, session_key)
        return None


def call_optional(what: str, session_key: str, agent: Any, name: str, *args: Any) -> Any:
    """:func:`call_agent` of ``agent.<name>(*args)`` when the agent has that method (``close``,
    ``interrupt`` and ``release_clients`` are optional: an agent may have only
    ``run_turn``); ``None`` without calling anything when it has not."""
    fn = getattr(agent, name, None)
    if not callable(fn):
        return None
    return call_agent(what, session_key, fn, *args)
