"""The ``PlatformAdapter`` protocol and ``SendResult`` (§1.1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from hermes_actors.model.source import SessionSource

__all__ = ["PlatformAdapter", "SendResult"]


@dataclass(frozen=True)
class SendResult:
    """The outcome of one send."""

    success: bool
    message_id: str | None = None
    error: str | None = None


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
