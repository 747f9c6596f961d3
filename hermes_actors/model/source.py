"""``SessionSource``: the immutable record of where a message came from (§2)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from hermes_actors.model.platform import normalize_platform

__all__ = ["CHAT_TYPES", "SessionSource", "origin_of"]

#: The chat types the key builder and the prompt know by name.
CHAT_TYPES = ("dm", "group", "channel", "thread")



def _coerce_optional_str(name: str, value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise TypeError(f"SessionSource.{name} must be a string, got a boolean")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    raise TypeError(f"SessionSource.{name} must be a string, got {type(value).__name__}")


@dataclass(frozen=True)
class SessionSource:
    """Where a message came from: platform, chat, thread and sender.

    Numbers given for ids are coerced to strings. ``message_id`` identifies one message and
    never influences the session key or the system prompt.
    """

    platform: str
    chat_id: str | None = None
    chat_type: str = "dm"
    chat_name: str | None = None
    user_id: str | None = None
    user_name: str | None = None
    thread_id: str | None = None
    chat_topic: str | None = None
    user_id_alt: str | None = None
    chat_id_alt: str | None = None
    scope_id: str | None = None
    parent_chat_id: str | None = None
    message_id: str | None = None
    profile: str | None = None
    is_bot: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "platform", normalize_platform(self.platform))
        for name in _TEXT_FIELDS:
            value = getattr(self, name)
            coerced = value if value is None or type(value) is str else _coerce_optional_str(
                name, value)
            if name == "chat_type":
                coerced = (coerced or "dm").strip().lower() or "dm"
            if coerced is not value:
                object.__setattr__(self, name, coerced)
        object.__setattr__(self, "is_bot", bool(self.is_bot))

    @property
    def participant_id(self) -> str | None:
        """The sender's stable id: ``user_id_alt`` when present, else ``user_id``."""
        return self.user_id_alt or self.user_id

    @property
    def description(self) -> str:
        """A human summary: ``"DM with Alice"``, ``"group: My Group, thread: 12345"``."""
        if self.platform == "local":
            return "CLI terminal"
        if self.chat_type == "dm":
            text = f"DM with {self.user_name or self.user_id or 'user'}"
        elif self.chat_type in ("group", "channel"):
            text = f"{self.chat_type}: {self.chat_name or self.chat_id}"
        else:
            text = str(self.chat_name or self.chat_id)
        if self.thread_id:
            text += f", thread: {self.thread_id}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict in field order; ``None`` fields are omitted."""
        # the instance dict holds exactly the fields, in field order (__init__ sets them in
        # that order and __post_init__ only replaces values): one pass, no getattr a field
        return {name: value for name, value in self.__dict__.items() if value is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionSource:
        """Rebuild from :meth:`to_dict` output; unknown keys are ignored."""
        if not isinstance(data, dict):
            raise TypeError("SessionSource.from_dict expects a dict")
        if "platform" not in data:
            raise ValueError("SessionSource needs a 'platform'")
        known = _FIELD_SET
        return cls(**{k: v for k, v in data.items() if k in known})


_FIELD_NAMES = tuple(f.name for f in fields(SessionSource))
_FIELD_SET = frozenset(_FIELD_NAMES)
_TEXT_FIELDS = tuple(n for n in _FIELD_NAMES if n not in ("platform", "is_bot"))


def origin_of(source: SessionSource) -> SessionSource:
    """The delivery origin recorded for a source: ``message_id`` names one message, not a
    place, so it is dropped (entries then change only when the place does)."""
    return replace(source, message_id=None) if source.message_id is not None else source
