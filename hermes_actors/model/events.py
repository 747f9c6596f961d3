"""``MessageEvent``: one inbound message, and the recognition of chat commands (§2)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from enum import Enum
from typing import Any

from hermes_actors.model.commands import COMMANDS, Command, parse_command
from hermes_actors.model.ids import new_id
from hermes_actors.model.jsontext import to_json
from hermes_actors.model.source import SessionSource
from hermes_actors.model.timeutil import isoformat, parse_timestamp, utc_now

__all__ = ["COMMANDS", "Command", "MessageEvent", "MessageType", "parse_command"]


class MessageType(str, Enum):
    """What kind of content an inbound message carries."""

    TEXT = "text"
    PHOTO = "photo"
    VOICE = "voice"
    DOCUMENT = "document"
    COMMAND = "command"


@dataclass(frozen=True)
class MessageEvent:
    """One inbound message. ``internal`` marks synthetic wake-ups (delegations, resume)."""

    source: SessionSource
    text: str = ""
    message_type: MessageType = MessageType.TEXT
    media_urls: tuple[str, ...] = ()
    internal: bool = False
    event_id: str = field(default_factory=new_id)
    received_at: datetime = field(default_factory=utc_now)
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.source, SessionSource):
            raise TypeError("MessageEvent.source must be a SessionSource")
        if self.text is None:
            object.__setattr__(self, "text", "")
        if not isinstance(self.text, str):
            raise TypeError("MessageEvent.text must be a string")
        if type(self.metadata) is not dict:
            if self.metadata is None:
                object.__setattr__(self, "metadata", {})
            elif isinstance(self.metadata, Mapping):
                object.__setattr__(self, "metadata", dict(self.metadata))
            else:
                raise TypeError("MessageEvent.metadata must be a dict")
        # (each normalisation skipped when the value is in its form already: every inbound
        # message passes here, most of them plain text just stamped by utc_now())
        if type(self.message_type) is not MessageType:
            object.__setattr__(self, "message_type", MessageType(self.message_type))
        if self.media_urls:
            if isinstance(self.media_urls, str):  # (its characters are no URLs)
                raise TypeError("MessageEvent.media_urls must be a sequence of URLs, "
                                "not one string")
            object.__setattr__(self, "media_urls", tuple(str(u) for u in self.media_urls))
        elif type(self.media_urls) is not tuple:
            object.__setattr__(self, "media_urls", ())
        received = self.received_at
        if type(received) is not datetime or received.tzinfo is not timezone.utc:
            object.__setattr__(self, "received_at", parse_timestamp(received) or utc_now())

    @property
    def command(self) -> Command | None:
        """The recognised command, or ``None`` (internal events are never commands)."""
        if self.internal:
            return None
        return parse_command(self.text)

    @property
    def ingress_key(self) -> str | None:
        """What names this message on its platform: the conversation (platform, chat id,
        thread id) and the platform's ``message_id``, as one text; ``None`` for a message
        without a ``message_id`` and for internal wake-ups. A repeat of an accepted key (a
        client's retry, a platform's redelivery) is not processed again."""
        source = self.source
        if self.internal or source.message_id is None:
            return None
        return to_json([source.platform, source.chat_id, source.thread_id, source.message_id])

    def with_text(self, text: str, **changes: Any) -> MessageEvent:
        """A copy with other text (and any other field changes); the id is kept."""
        return replace(self, text=text, **changes)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the durable inbox stores this)."""
        return {
            "source": self.source.to_dict(),
            "text": self.text,
            "message_type": self.message_type._value_,  # (.value is a Python property)
            "media_urls": list(self.media_urls),
            "internal": self.internal,
            "event_id": self.event_id,
            "received_at": isoformat(self.received_at),
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MessageEvent:
        """Rebuild from :meth:`to_dict` output."""
        return cls(
            source=SessionSource.from_dict(data["source"]),
            text=data.get("text") or "",
            message_type=MessageType(data.get("message_type", "text")),
            media_urls=tuple(data.get("media_urls") or ()),
            internal=bool(data.get("internal", False)),
            event_id=data.get("event_id") or new_id(),
            received_at=parse_timestamp(data.get("received_at")) or utc_now(),
            metadata=dict(data.get("metadata") or {}),
        )
