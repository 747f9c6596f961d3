"""WhatsApp Cloud API to gateway and back, as pure functions: the webhook's checks (the
subscription challenge, the body's signature), its messages as :class:`MessageEvent`\\ s, and a
long reply as messages WhatsApp accepts.

Kept apart from the I/O so every rule is tested on plain data (the JSON Meta posts):

* every ``entry[].changes[].value.messages[]`` is one message; ``statuses[]`` (sent,
  delivered, read receipts of the replies) are not messages for the agent, nor is a
  message from the business number itself (``metadata.display_phone_number``: its own
  message echoed back, which the gateway never answers);
* the sender (``from``) goes through :func:`canonical_whatsapp_identifier` (with the
  config's ``lid_aliases``): it is both the DM's ``chat_id`` and the ``user_id``; its name is
  the matching ``contacts[].profile.name``; the wamid (``id``) is the ``message_id``, so a
  redelivered message has the ingress key of the first and is not processed again;
* an image, a voice note or audio, a document or a video reaches the agent with
  ``whatsapp-media:<media id>`` as its media URL and the caption as the text; a button or
  list reply is the text of its title; anything else (reactions, locations, unsupported
  content) is not a message for the agent.

:func:`split_message` cuts at WhatsApp's limit of 4,096 characters, preferring a paragraph
break, then a line break, then a space.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

from hermes_actors.adapters import split
from hermes_actors.model.events import MessageEvent, MessageType
from hermes_actors.model.source import SessionSource
from hermes_actors.model.whatsapp import canonical_whatsapp_identifier

__all__ = ["MEDIA_SCHEME", "MESSAGE_LIMIT", "challenge_answer", "recipient", "signature_ok",
           "split_message", "webhook_events"]

#: The most text one WhatsApp text message may carry, in characters.
MESSAGE_LIMIT = 4096
#: How a media id is named in ``MessageEvent.media_urls``.
MEDIA_SCHEME = "whatsapp-media:"
_SIGNATURE_PREFIX = "sha256="
_MEDIA = {"image": MessageType.PHOTO, "audio": MessageType.VOICE,
          "document": MessageType.DOCUMENT, "video": MessageType.DOCUMENT,
          "sticker": MessageType.PHOTO}


def signature_ok(body: bytes, header: str | None, app_secret: str) -> bool:
    """Whether ``header`` (``X-Hub-Signature-256``) is ``sha256=`` and the HMAC-SHA256 of the
    raw ``body`` with the app secret, in hex (compared in constant time)."""
    if not header or not app_secret:
        return False
    header = header.strip()
    if not header.lower().startswith(_SIGNATURE_PREFIX):
        return False
    given = header[len(_SIGNATURE_PREFIX):].strip().lower()
    expected = hmac.new(app_secret.encode("utf-8"), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(given.encode("ascii", "replace"), expected.encode("ascii"))


def challenge_answer(query: Mapping[str, str], verify_token: str) -> str | None:
    """The ``hub.challenge`` to answer a subscription check with, or ``None`` (refused):
    ``hub.mode`` must be ``subscribe`` and ``hub.verify_token`` the configured one."""
    if query.get("hub.mode") != "subscribe" or not verify_token:
        return None
    given = query.get("hub.verify_token", "")
    if not hmac.compare_digest(given.encode("utf-8"), verify_token.encode("utf-8")):
        return None
    challenge = query.get("hub.challenge")
    return challenge if challenge else None


def recipient(chat_id: str) -> str:
    """The ``to`` of a reply: the chat id's digits (``+60123456789`` → ``60123456789``)."""
    return chat_id[1:] if chat_id.startswith("+") else chat_id


def webhook_events(payload: Any, *, aliases: Mapping[Any, Any] | None = None,
                   phone_number_id: str | None = None) -> tuple[list[MessageEvent], int]:
    """The messages of one webhook body, in order, and how many were skipped (content that
    is not for the agent, a message to another phone number of the app). Raises
    ``ValueError`` when the body is not a WhatsApp webhook."""
    if not isinstance(payload, Mapping) or not isinstance(payload.get("entry", []), list):
        raise ValueError("not a WhatsApp webhook body")
    events: list[MessageEvent] = []
    skipped = 0
    for entry in payload.get("entry") or []:
        for change in _dicts(entry.get("changes") if isinstance(entry, Mapping) else None):
            value = change.get("value")
            if not isinstance(value, Mapping):
                continue
            metadata = value.get("metadata")
            if not isinstance(metadata, Mapping):
                metadata = {}
            to_number = str(metadata.get("phone_number_id") or "") or None
            own = metadata.get("display_phone_number")
            own = canonical_whatsapp_identifier(own) if isinstance(own, str) and own else None
            names = _contact_names(value.get("contacts"), aliases)
            for message in _dicts(value.get("messages")):
                if phone_number_id and to_number and to_number != phone_number_id:
                    skipped += 1
                    continue
                event = message_event(message, names=names, aliases=aliases,
                                      phone_number_id=to_number)
                if event is None or (own is not None and event.source.user_id == own):
                    skipped += 1
                else:
                    events.append(event)
    return events, skipped


def message_event(message: Mapping[str, Any], *, names: Mapping[str, str] | None = None,
                  aliases: Mapping[Any, Any] | None = None,
                  phone_number_id: str | None = None) -> MessageEvent | None:
    """The :class:`MessageEvent` of one ``messages[]`` item, or ``None`` when it is nothing
    the agent answers (or has no sender or id)."""
    sender = canonical_whatsapp_identifier(message.get("from"), aliases)
    wamid = message.get("id")
    if not sender or not isinstance(wamid, str) or not wamid:
        return None
    content = _content(message)
    if content is None:
        return None
    text, kind, media = content
    source = SessionSource("whatsapp", chat_id=sender, chat_type="dm", user_id=sender,
                           user_name=(names or {}).get(sender), message_id=wamid)
    metadata = {"whatsapp": {"phone_number_id": phone_number_id}} if phone_number_id else {}
    return MessageEvent(source=source, text=text, message_type=kind, media_urls=media,
                        metadata=metadata)


def _dicts(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _contact_names(contacts: Any, aliases: Mapping[Any, Any] | None) -> dict[str, str]:
    names = {}
    for contact in _dicts(contacts):
        profile = contact.get("profile")
        name = profile.get("name") if isinstance(profile, Mapping) else None
        if isinstance(name, str) and name.strip():
            names[canonical_whatsapp_identifier(contact.get("wa_id"), aliases)] = name.strip()
    return names


def _content(message: Mapping[str, Any]) -> tuple[str, MessageType, tuple[str, ...]] | None:
    kind = message.get("type")
    body = message.get(kind) if isinstance(kind, str) else None
    if not isinstance(body, Mapping):
        return None
    if kind == "text":
        text = body.get("body")
        return (text, MessageType.TEXT, ()) if isinstance(text, str) and text else None
    if kind in _MEDIA:
        media_id = body.get("id")
        if not isinstance(media_id, str) or not media_id:
            return None
        caption = body.get("caption")
        return (caption if isinstance(caption, str) else "", _MEDIA[kind],
                (MEDIA_SCHEME + media_id,))
    if kind == "button":
        text = body.get("text")
        return (text, MessageType.TEXT, ()) if isinstance(text, str) and text else None
    if kind == "interactive":
        for reply in ("button_reply", "list_reply"):
            chosen = body.get(reply)
            if isinstance(chosen, Mapping) and isinstance(chosen.get("title"), str):
                return chosen["title"], MessageType.TEXT, ()
    return None


def split_message(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """``text`` as messages of at most ``limit`` characters, in order (the shared splitter:
    paragraph, line or space breaks; it counts UTF-16 units, stricter than characters)."""
    return split.split_message(text, limit)
