"""Crash points: ``HERMES_ACTORS_CRASHPOINT=<name>`` makes the process exit abruptly there.

Reliability tests run a real process with the variable set, let it die at the named point
(``os._exit(137)``, like a SIGKILL: no ``finally``, no atexit, no flush) and start it again.
The variable is read on every call, so a test can arm a point in an embedded process too.
"""

from __future__ import annotations

import os
import sys

__all__ = ["CRASH_POINTS", "crashpoint"]

#: The named points of §15 (more may exist; unknown names are simply never reached).
CRASH_POINTS = (
    "after_turn_marked",
    "after_user_persisted",
    "after_reply_persisted",
    "after_ledger_recorded",
    "after_send_before_delivered",
    "during_drain",
    "during_recovery",
)

_ENV = "HERMES_ACTORS_CRASHPOINT"


def crashpoint(name: str) -> None:
    """Exit the process at once with status 137 when ``name`` is the armed crash point."""
    armed = os.environ.get(_ENV)
    if armed and armed == name:
        sys.stderr.write(f"hermes_actors: crash point {name} reached, exiting\n")
        sys.stderr.flush()
        os._exit(137)
