"""PII redaction of ids shown in the context prompt (§4, §17.10).

Ids are replaced by short stable hashes rather than removed: the model can still tell two
users or chats apart and refer to them consistently, but never sees the raw phone number or
account id. Redaction is decided per platform, because some platforms need raw ids in the
model's output (Discord mentions are ``<@id>``); those are never redacted. Only prompt text
goes through here: keys, routing and adapter calls always keep the raw values.
"""

from __future__ import annotations

import hashlib
import re

from hermes_actors.model.platform import is_pii_safe

__all__ = ["redact_chat_id", "redact_user_id", "should_redact", "short_hash"]

#: ``<prefix>:<rest>``: a name-like prefix (``telegram:``, ``lid:``) before the first colon.
_PREFIXED = re.compile(r"^(?P<prefix>[A-Za-z][A-Za-z0-9_.-]*):(?P<rest>.+)$", re.DOTALL)


def short_hash(value: str) -> str:
    """The first 12 hex digits of the SHA-256 of ``value`` (UTF-8)."""
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:12]


def should_redact(platform: str, redact_pii: bool) -> bool:
    """Whether ids of ``platform`` are hashed: only when asked and the platform is PII-safe."""
    return bool(redact_pii) and is_pii_safe(platform)


def redact_user_id(user_id: str) -> str:
    """``user_<12 hex>`` of a user id."""
    return f"user_{short_hash(user_id)}"


def redact_chat_id(chat_id: str) -> str:
    """``<prefix>:<12 hex of the rest>`` when the id has a ``prefix:`` form, else ``<12 hex>``.

    Keeping the prefix keeps what kind of chat it is (``telegram:``, ``lid:``) readable.
    """
    match = _PREFIXED.match(chat_id)
    if match is None:
        return short_hash(chat_id)
    return f"{match.group('prefix')}:{short_hash(match.group('rest'))}"
