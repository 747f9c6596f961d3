"""Slack to gateway and back, as pure functions: an Events API ``event_callback`` as a
:class:`MessageEvent`, and a long reply as messages Slack accepts.

Kept apart from the I/O so every rule is tested on plain data (the JSON Slack posts):

* only ``message`` events are messages for the agent (an ``app_mention`` is the same
  message again under another event id: answering both would answer it twice); edits,
  deletions, joins and other subtypes are not (a ``file_share`` and a
  ``thread_broadcast`` are);
* a message of a bot (``bot_id``, subtype ``bot_message``) and the bot's own messages
  (its user id, from ``auth.test``) are ignored, so the bot never answers itself;
* ``channel_type: im`` is a ``dm``; any other channel (public, private, a group DM) is a
  ``group``, one session per member, unless the message is in a thread: a ``thread_ts``
  makes a ``thread`` session (``thread_id`` = ``thread_ts``) shared by everyone in it, and
  the reply goes into that thread; a DM's thread keeps ``dm`` with its ``thread_id``;
* ``team_id`` is the source's ``scope_id``: Slack's session keys include the workspace
  (SPEC §3, §17.8);
* the payload's ``event_id`` is the ``message_id``, so the ingress key of a retry
  (``X-Slack-Retry-Num``, the same ``event_id``) is the first delivery's and the gateway's
  duplicate check applies;
* a leading mention of the bot (``<@U0BOT> hello``) is dropped from the text; files become
  ``PHOTO`` (images) or ``DOCUMENT`` with their ``url_private`` as the media URL.

:func:`split_message` cuts at :data:`MESSAGE_LIMIT` (4,000 characters, what Slack
recommends for ``chat.postMessage``'s ``text``), the same way the Telegram adapter does.
"""

from __future__ import annotations

import re
from typing import Any

from hermes_actors.adapters.split import split_message as _split
from hermes_actors.model.events import MessageEvent, MessageType
from hermes_actors.model.source import SessionSource

__all__ = ["MESSAGE_LIMIT", "message_event", "split_message"]

#: The most text one Slack message carries here, in characters.
MESSAGE_LIMIT = 4000
#: Message subtypes that are still a person's message for the agent.
_MESSAGE_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
_LEADING_MENTION = re.compile(r"^\s*<@([A-Z0-9]+)(?:\|[^>]*)?>[\s,:]*")


def message_event(payload: dict[str, Any], *, bot_user_id: str | None = None
                  ) -> MessageEvent | None:
    """The :class:`MessageEvent` of one ``event_callback`` payload, or ``None`` when it is
    nothing the agent answers (another event type, an edit, a bot's or this bot's own
    message, an empty message). Raises ``TypeError``/``ValueError`` on a payload of the
    wrong shape."""
    event = payload.get("event")
    if not isinstance(event, dict) or event.get("type") != "message":
        return None
    subtype = event.get("subtype")
    if subtype not in _MESSAGE_SUBTYPES or event.get("bot_id"):
        return None
    user = event.get("user")
    if not isinstance(user, str) or not user or (bot_user_id and user == bot_user_id):
        return None
    channel = event.get("channel")
    if not isinstance(channel, str) or not channel:
        raise ValueError("a message event without a channel")
    event_id = payload.get("event_id")
    if not isinstance(event_id, str) or not event_id:
        raise ValueError("an event_callback without an event_id")
    thread_ts = event.get("thread_ts")
    thread_id = str(thread_ts) if thread_ts else None
    if event.get("channel_type") == "im":
        chat_type = "dm"
    else:
        chat_type = "thread" if thread_id else "group"
    team = event.get("team") or payload.get("team_id")
    text = _strip_mention(str(event.get("text") or ""), bot_user_id)
    kind, media = _files(event.get("files"))
    if not text.strip() and not media:
        return None
    source = SessionSource(
        "slack",
        chat_id=channel,
        chat_type=chat_type,
        user_id=user,
        thread_id=thread_id,
        scope_id=str(team) if team else None,
        message_id=event_id,
    )
    metadata = {"slack": {"event_id": event_id, "ts": event.get("ts"), "team_id": team}}
    return MessageEvent(source=source, text=text, message_type=kind, media_urls=media,
                        metadata=metadata)


def _strip_mention(text: str, bot_user_id: str | None) -> str:
    """``<@U0BOT> hello`` → ``hello`` when ``U0BOT`` is this bot."""
    match = _LEADING_MENTION.match(text)
    if bot_user_id and match is not None and match.group(1) == bot_user_id:
        return text[match.end():]
    return text


def _files(files: Any) -> tuple[MessageType, tuple[str, ...]]:
    if not isinstance(files, list) or not files:
        return MessageType.TEXT, ()
    urls = tuple(str(f["url_private"]) for f in files
                 if isinstance(f, dict) and f.get("url_private"))
    if not urls:
        return MessageType.TEXT, ()
    images = all(str(f.get("mimetype", "")).startswith("image/") for f in files
                 if isinstance(f, dict))
    return (MessageType.PHOTO if images else MessageType.DOCUMENT), urls


def split_message(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """``text`` as messages of at most ``limit`` characters, in order, cut at a paragraph
    break, else a line break, else a space, else hard (as for Telegram)."""
    return _split(text, limit)
