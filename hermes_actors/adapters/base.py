"""The ``PlatformAdapter`` protocol and ``SendResult`` (§1.1), and two optional extras: the
richer ``deliver`` of an adapter that wants to know what it sends
(:class:`DeliveryAwareAdapter`) and the "typing…" indicator of a platform that shows one
while a turn runs (:class:`TypingAwareAdapter`). The gateway checks for each once, so a
plain adapter needs neither."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

from hermes_actors.model.source import SessionSource

__all__ = ["DeliveryAwareAdapter", "MaskingFilter", "Outgoing", "PlatformAdapter", "SendResult", "Typing",
           "TypingAwareAdapter"]


@dataclass(frozen=True)
class SendResult:
    """The outcome of one send."""

    success: bool
    message_id: str | None = None
    error: str | None = None
    #: A failed send the platform asked to retry after this many seconds (a rate limit):
    #: the gateway waits and tries again while the ledger's attempts last.
    retry_after: float | None = None
    #: When only the first part of a split text went out: the rest, which a retry sends.
    unsent: str | None = None
    #: A refusal for good (Telegram's 403: the bot was blocked or removed from the chat):
    #: the obligation is abandoned at once and never sent again, not retried by sweeps.
    permanent: bool = False
    #: The adapter committed the obligation's outcome itself, with the send (the durable
    #: outbox appends a reply and marks its ledger row ``delivered`` in one transaction,
    #: or appends nothing when the row is no longer this sender's): the gateway records
    #: no outcome of its own for this attempt.
    recorded: bool = False


@runtime_checkable
class PlatformAdapter(Protocol):
    """A chat platform connection the gateway sends replies through."""

    #: The platform name this adapter serves (``"telegram"``, a plugin name, ...).
    platform: str
    #: Whether sends can be attempted now; delivery attempts are spent only when True.
    connected: bool

    def send(self, target: SessionSource, text: str) -> SendResult:
        """Send ``text`` to the chat (and thread) named by ``target``."""
        ...


class Outgoing(NamedTuple):
    """One text the gateway delivers, with what the delivery ledger knows about it."""

    #: The chat (and thread) it goes to.
    target: SessionSource
    #: The text, as sent (a redelivery carries the recovered prefix).
    text: str
    #: One of the ledger's kinds (:data:`hermes_actors.store.ledger.KINDS`): ``reply``,
    #: ``recovered``, ``notice``, ...
    kind: str
    #: The ids of the inbound events it answers (empty when unknown: a recovered reply).
    in_reply_to: tuple[str, ...] = ()
    #: The delivery ledger's row it settles (``None``: not recorded, the ledger is off).
    #: An adapter that can commit the outcome with the send itself (the durable outbox)
    #: does so and answers with ``SendResult.recorded``.
    obligation_id: str | None = None


@runtime_checkable
class DeliveryAwareAdapter(Protocol):
    """An adapter that takes the whole :class:`Outgoing` record: the gateway then calls
    ``deliver`` instead of ``send`` (the HTTP outbox keeps the kind and the event ids)."""

    def deliver(self, outgoing: Outgoing) -> SendResult:
        """Deliver ``outgoing``."""
        ...


class Typing(Protocol):
    """A running "typing…" indicator."""

    def stop(self) -> None:
        """Stop showing it (idempotent)."""
        ...


@runtime_checkable
class TypingAwareAdapter(Protocol):
    """An adapter that shows the chat that the agent is working: the gateway starts the
    indicator when a turn's agent starts and stops it before the answer is sent."""

    def start_typing(self, target: SessionSource) -> Typing:
        """Start showing "typing…" in ``target``'s chat (and thread); never raises."""
        ...


class MaskingFilter(logging.Filter):
    """Rewrites log records through ``mask`` (a platform library's debug lines may carry its
    token or secret); a record ``mask`` leaves as it is passes unchanged."""

    def __init__(self, mask: Callable[[str], str]) -> None:
        super().__init__()
        self._mask = mask

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is left to logging
            return True
        masked = self._mask(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True
