"""``Inbox``: the durable inbox (§8): an accepted message is stored before it is
acknowledged and consumed in the transaction that starts its turn (or answers its command),
so ``kill -9`` at any moment loses no accepted message and answers none twice. A message
carrying a platform ``message_id`` is accepted once (its ``ingress_key`` is unique).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Container, Iterable
from typing import Any

from hermes_actors.cluster.shards import ShardSet
from hermes_actors.model.entry import validate_session_key
from hermes_actors.model.events import MessageEvent
from hermes_actors.model.jsontext import to_json
from hermes_actors.model.timeutil import epoch
from hermes_actors.store.core import StoreCore
from hermes_actors.store.ops import AcceptEvent, ConsumeEvents, Op, PruneInbox, WithdrawEvent
from hermes_actors.store.protocol import Backend, ShardReads

__all__ = ["Inbox"]

log = logging.getLogger("hermes_actors.store")

_DAY = 86400.0


def _payload(event: MessageEvent) -> str:
    try:
        return to_json(event.to_dict())
    except (TypeError, ValueError) as exc:
        raise ValueError(f"event {event.event_id} cannot be stored: {exc}") from None


class Inbox:
    """The inbox methods of the store (its facade delegates here)."""

    def __init__(self, core: StoreCore) -> None:
        self._core = core

    def accept_event(self, session_key: str, event: MessageEvent) -> str:
        """Persist an accepted inbound event before it is acknowledged (idempotent by id).

        Returns the event's own id, or, when an earlier event holds its
        ``MessageEvent.ingress_key`` (a retried or redelivered message), that event's id:
        then nothing was stored. The check and the insert are one transaction.
        """
        validate_session_key(session_key)
        op = AcceptEvent(event_id=event.event_id, session_key=session_key,
                         payload=_payload(event), internal=event.internal,
                         received_at=epoch(event.received_at), ingress_key=event.ingress_key)
        ops: list[Op] = [op]
        if self._core.announce is not None:  # a cluster node: wake the shard's owner
            ops.append(self._core.announce(session_key))
        return self._core.apply(ops)[0]

    def withdraw_event(self, event_id: str) -> bool:
        """Delete an unconsumed inbox event, leaving nothing of it (a message refused after
        it was made durable); False when it is unknown or already consumed."""
        return bool(self._core.apply([WithdrawEvent(event_id)])[0])

    def consume_events(self, event_ids: Iterable[str], reason: str) -> None:
        """Mark inbox events consumed (``turn``, ``command``, ``dropped``...); the first
        reason sticks."""
        ids = tuple(event_ids)
        if ids:
            self._core.apply([ConsumeEvents(ids, str(reason), self._core.ts())])

    def pending_inbox(self, shards: ShardSet | None = None) -> list[tuple[str, MessageEvent]]:
        """Unconsumed events as ``(session_key, event)`` in their original arrival order
        (of the sessions of ``shards`` only, when given: a cluster node).

        An event that no longer parses (e.g. its plugin platform is gone) is skipped with a
        warning and stays in the inbox.
        """
        def question(backend: Backend) -> list[tuple[str, dict]]:
            if shards is None:
                return backend.pending_inbox()
            if isinstance(backend, ShardReads):
                return backend.shard_pending_inbox(shards.total, sorted(shards.wanted))
            return [(k, p) for k, p in backend.pending_inbox() if shards(k)]

        out = []
        for key, payload in self._core.read(question):
            try:
                out.append((key, MessageEvent.from_dict(payload)))
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("inbox event for %s cannot be replayed: %s", key, exc)
        return out

    def pending_events(self, shards: ShardSet, known: Container[str]
                       ) -> list[tuple[str, str, MessageEvent | None]]:
        """:meth:`pending_inbox` of ``shards`` as ``(session_key, event_id, event)``, where
        ``event`` is ``None`` for the ids in ``known`` (not parsed: a cluster node's pass
        has dispatched them, and needs only to see that they are still unconsumed). An event
        that no longer parses is skipped with a warning, as there."""
        def question(backend: Backend) -> list[tuple[str, str, Any]]:
            rows = getattr(backend, "shard_pending_rows", None)  # ShardReads (a runtime
            if rows is not None:  # protocol's isinstance costs more than the read's parse)
                return rows(shards.total, sorted(shards.wanted))
            return [(k, str(p.get("event_id", "")), p) for k, p in backend.pending_inbox()
                    if shards(k)]

        out: list[tuple[str, str, MessageEvent | None]] = []
        for key, event_id, payload in self._core.read(question):
            if event_id in known:
                out.append((key, event_id, None))
                continue
            try:
                parsed = json.loads(payload) if isinstance(payload, str) else payload
                event = MessageEvent.from_dict(parsed)
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("inbox event for %s cannot be replayed: %s", key, exc)
                continue
            out.append((key, event.event_id, event))
        return out

    def inbox_prune(self, max_age_days: float = 7) -> int:
        """Delete inbox rows consumed more than ``max_age_days`` ago; returns the count."""
        return self._core.apply([PruneInbox(self._core.ts() - max_age_days * _DAY)])[0] or 0
