"""The delivery ledger's rules (§7), as pure functions every backend shares.

A reply is an *obligation* from the moment it is recorded until it is delivered or given
up. Its id is derived from what is owed (session, turn, text), so recording the same reply
twice, e.g. once live and once by crash recovery, yields one row and one delivery.

States: ``pending`` → ``attempting`` → ``delivered`` | ``failed``; a failed row is
``abandoned`` after :data:`MAX_ATTEMPTS` attempts or :data:`MAX_AGE_SECONDS` of age. A row
is owned by the gateway boot attempting it: a node id (stable per home) and a boot id (new
at every start). A boot never claims a row it is attempting itself (that would be a second
send); a row another boot was attempting is claimable: on one home only one gateway runs at
a time (the home lock), so that boot is gone and its send is uncertain (redelivered once,
prefixed). A boot that claimed a row and sent nothing (its adapter dropped in between)
hands the claim back (:func:`released_state`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

__all__ = [
    "CLAIMABLE_STATES",
    "FINAL_KINDS",
    "FINAL_STATES",
    "KINDS",
    "MAX_AGE_SECONDS",
    "MAX_ATTEMPTS",
    "OUTCOMES",
    "REPLY_KINDS",
    "STATES",
    "claim_allowed",
    "finish_state",
    "is_final",
    "obligation_id",
    "redelivery_kind",
    "released_state",
]

#: What an obligation carries: a turn's reply, a reply found by crash recovery, a notice
#: (a final one: a command's answer, the agent failed, cancelled, refused), an
#: acknowledgement ("Queued for the next turn.": the events it names get their answer later).
KINDS = ("reply", "recovered", "notice", "ack")
#: The kinds that are the final answer of every event they name (all but acknowledgements).
FINAL_KINDS = frozenset({"reply", "recovered", "notice"})
#: The kinds that are an agent's answer to a turn: redelivered after an uncertain attempt
#: as ``recovered`` (:func:`redelivery_kind`); every other kind keeps its own.
REPLY_KINDS = ("reply", "recovered")
#: Every ledger state.
STATES = ("pending", "attempting", "delivered", "failed", "abandoned")
#: States a sender may claim (``attempting`` only when its owner is dead).
CLAIMABLE_STATES = ("pending", "attempting", "failed")
#: States that are never sent again (pruned after a week).
FINAL_STATES = ("delivered", "abandoned")
#: The states an operator's retry (``LedgerReopen``) puts back to ``pending``.
REOPENABLE_STATES = ("failed", "abandoned")
#: How an attempt may end: sent, failed (tried again while attempts last), or refused for
#: good by the platform (abandoned at once).
OUTCOMES = ("delivered", "failed", "abandoned")
#: A failed obligation is abandoned after this many attempts...
MAX_ATTEMPTS = 3
#: ...or when it is older than this (24 h).
MAX_AGE_SECONDS = 24 * 3600.0


def is_final(message: Mapping[str, Any]) -> bool:
    """Whether an outbox message or ledger row is the final answer of every event it names:
    its ``final`` flag where it has one (an HTTP message), else its kind (all but ``ack``)."""
    if "final" in message:
        return bool(message["final"])
    return message.get("kind") in FINAL_KINDS


def obligation_id(session_key: str, token: str | None, content: str) -> str:
    """24 hex of sha256 over ``session_key``, turn ``token`` and ``content``, NUL-separated."""
    raw = "\x00".join((session_key, token or "", content))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:24]


def claim_allowed(
    state: str,
    owner_node: str | None,
    owner_boot: str | None,
    *,
    claimer_node: str,
    claimer_boot: str,
) -> bool:
    """Whether a sender (a gateway boot) may move a row to ``attempting`` now.

    Refused: final states, and a row the claimer is already attempting (a second send from
    the same owner would be a duplicate). A row of another boot is claimable (see the
    module docstring).
    """
    if state not in CLAIMABLE_STATES:
        return False
    if owner_node == claimer_node and owner_boot == claimer_boot:
        return state != "attempting"
    return True


def released_state(attempts: int) -> str:
    """The state of an ``attempting`` row whose claim is handed back unused, ``attempts``
    counting that claim: ``pending`` when it was the first (the sweep sends it plainly),
    else ``failed`` (it was tried before, so its sending stays uncertain: prefixed)."""
    return "pending" if attempts <= 1 else "failed"


def finish_state(state: str, *, attempts: int, created_at: float, now: float) -> str:
    """The stored state after an attempt ends: ``delivered``, ``failed`` or ``abandoned``."""
    if state not in OUTCOMES:
        raise ValueError(f"an attempt ends {', '.join(map(repr, OUTCOMES))}, not {state!r}")
    if state == "failed" and (attempts >= MAX_ATTEMPTS or now - created_at > MAX_AGE_SECONDS):
        return "abandoned"
    return state


def redelivery_kind(kind: str, uncertain: bool) -> str:
    """The kind a row of ``kind`` is sent with by a ledger sweep: ``recovered`` for an
    answer (:data:`REPLY_KINDS`) whose earlier attempt is ``uncertain`` (an ``attempting``
    or ``failed`` row, or one recovery recorded), so a reader of the durable outbox can
    tell the recovered copy; any other row keeps its kind (a notice stays a notice)."""
    return "recovered" if uncertain and kind in REPLY_KINDS else kind
