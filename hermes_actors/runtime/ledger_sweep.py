"""``sweep_ledger``: deliver the replies and notices the delivery ledger still owes (§7).

A plain function, not an actor's method: its sends go through the adapters, which may be
slow (a rate-limited platform, a network timeout), and no mailbox may wait on them. The
supervisor runs it inside its recovery (startup, a gained shard), where it is one step of
an ordered sequence; housekeeping runs it in its own greenlet. Two sweeps at once are safe:
a row this very boot is sending is refused by the other sweep's claim.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hermes_actors.adapters.base import Outgoing
from hermes_actors.errors import UnknownPlatformError
from hermes_actors.model.source import SessionSource
from hermes_actors.runtime.delivery import RECOVERED_PREFIX
from hermes_actors.runtime.recovery_rules import redelivery_answers_resume
from hermes_actors.store import ledger

__all__ = ["sweep_ledger"]


def sweep_ledger(store: Any, delivery: Any,
                 belongs: Callable[[str], bool] | None = None) -> int:
    """Deliver owed rows: ``pending`` plainly, uncertain or recovered ones prefixed; only
    those of the sessions ``belongs`` picks, when given (a cluster node's shards). A
    delivered reply clears its session's resume flag when it answers the turn to resume.
    Returns how many were delivered."""
    # A row this very boot is sending is refused by the claim (owner node AND boot), so
    # only rows of earlier boots, uncertain after a crash, are taken up again. In a
    # cluster only the shard's owner sweeps its rows: a row another node was attempting
    # is then one of a tenure that has ended (its writes are fenced from then on).
    batch, replies = [], {}
    for row in store.ledger_rows(("pending", "attempting", "failed")):
        if belongs is not None and not belongs(row["session_key"]):
            continue
        try:
            target = SessionSource(row["platform"], chat_id=row["chat_id"],
                                   thread_id=row["thread_id"])
        except (UnknownPlatformError, ValueError, TypeError):
            continue
        kind = row["kind"]
        uncertain = row["state"] in ("attempting", "failed") or kind == "recovered"
        text = (RECOVERED_PREFIX + row["content"]) if uncertain else row["content"]
        answers = tuple((row.get("in_reply_to") or "").split())
        # an answer sent again after an uncertain attempt goes out as ``recovered`` (the
        # events it answers kept); a notice stays a notice
        batch.append((row["obligation_id"],
                      Outgoing(target, text, ledger.redelivery_kind(kind, uncertain), answers)))
        if kind in ledger.REPLY_KINDS:
            replies[row["obligation_id"]] = (row["session_key"], float(row["created_at"]))
    # claims, sends and outcomes batched: three commits for the whole sweep
    sent = delivery.attempt_many(batch)
    store.clear_resume_pending_many(replies[oid][0] for oid in sent
                                    if oid in replies and _answers_resume(store, *replies[oid]))
    return len(sent)


def _answers_resume(store: Any, session_key: str, created_at: float) -> bool:
    """Whether a redelivered reply recorded at ``created_at`` answers the turn its session
    is flagged to resume (not an earlier turn's reply that waited meanwhile)."""
    entry = store.get(session_key)
    if entry is None or not entry.resume_pending:
        return False  # nothing to clear
    transcript = store.load_transcript(entry.session_id)
    last_user = next((m.get("timestamp") for m in reversed(transcript)
                      if m.get("role") == "user"), None)
    return redelivery_answers_resume(created_at, last_user)
