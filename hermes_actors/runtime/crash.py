"""Crash points: ``HERMES_ACTORS_CRASHPOINT=<name>`` makes the process exit abruptly there.

Reliability tests run a real process with the variable set, let it die at the named point
(``os._exit(137)``, like a SIGKILL: no ``finally``, no atexit, no flush) and start it again.
The variable is read once, when this module is imported (a turn passes four points, and
an environment lookup that misses costs a microsecond): arm it in the environment of the
process to start.
"""

from __future__ import annotations

import os
import sys

__all__ = ["CRASH_POINTS", "DELETE_CRASH_POINTS", "INGRESS_CRASH_POINTS", "STORE_CRASH_POINTS",
           "crashpoint"]

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

#: The database writer child's own point (``store/backends/sqlite/writer_child.py``, which
#: reads the same variable): after a COMMIT, before the parent hears of it.
STORE_CRASH_POINTS = ("db_writer_after_commit",)

#: Points on the way in: a message is durable but its sender has not been answered yet (a
#: client then retries it; exactly-once ingress must recognise the retry), or a platform
#: has handed updates over that nothing has taken yet (they come again; Discord's Gateway
#: does not send a message again to a new connection: one at ``discord_message_received``
#: is not seen again).
INGRESS_CRASH_POINTS = ("after_message_accepted", "telegram_update_received",
                        "discord_message_received")

#: A conversation's delete (``runtime/deletion``): after ``sessions.json`` lost the key and
#: before the transaction (nothing is deleted), and after the transaction (all of it is).
DELETE_CRASH_POINTS = ("delete_before_commit", "delete_after_commit")

_ENV = "HERMES_ACTORS_CRASHPOINT"
_ARMED = os.environ.get(_ENV) or None


def crashpoint(name: str) -> None:
    """Exit the process at once with status 137 when ``name`` is the armed crash point."""
    if _ARMED is not None and _ARMED == name:
        sys.stderr.write(f"hermes_actors: crash point {name} reached, exiting\n")
        sys.stderr.flush()
        os._exit(137)
