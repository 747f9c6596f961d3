"""Session keys: the deterministic name of one conversation lane (§3, §4, §17.8, §17.38).

``agent:<ns>:<platform>:<chat_type>[:<scope_id>][:<chat_id>][:<thread_id>][:<participant>]``

A key is a pure function of where a message came from and two config switches, so every
actor, the store and the recovery code agree on it without talking to each other. Only the
identifying fields take part: ``message_id``, names and topics never do, or one chat would
fork into a new session with every message or rename. Raw ids are used as given (the prompt
may redact them; keys never are), except WhatsApp people, whose aliases are folded into one
canonical form so a bridge switching between JID and LID does not split the conversation.

A source counts as threaded when it has a ``thread_id`` or its chat type is ``thread``: the
key builder and :func:`is_shared_multi_user_session` share that one definition, so a session
is reported as shared exactly when its key carries no participant by design.
"""

from __future__ import annotations

from collections.abc import Mapping

from hermes_actors.model.source import SessionSource
from hermes_actors.model.whatsapp import canonical_whatsapp_identifier

__all__ = ["build_session_key", "is_shared_multi_user_session", "is_threaded", "key_namespace"]

#: The namespace of sources without a profile.
DEFAULT_NAMESPACE = "main"


def key_namespace(profile: str | None) -> str:
    """``main`` without a profile, else the profile; a profile named ``main`` maps to ``main~``.

    The escape keeps a profile literally called ``main`` from sharing the default lanes.
    """
    name = (profile or "").strip()
    if not name:
        return DEFAULT_NAMESPACE
    if name == DEFAULT_NAMESPACE:
        return DEFAULT_NAMESPACE + "~"
    return name


def is_threaded(source: SessionSource) -> bool:
    """Whether ``source`` is a thread: it has a ``thread_id`` or its chat type is ``thread``."""
    return bool(source.thread_id) or source.chat_type == "thread"


def _person(value: str | None, source: SessionSource, aliases: Mapping | None) -> str | None:
    """A person-like id as it goes into a key (WhatsApp ids canonicalised)."""
    if not value:
        return None
    if source.platform == "whatsapp":
        return canonical_whatsapp_identifier(value, aliases) or None
    return value


def _dm_tail(source: SessionSource, participant: str | None, aliases: Mapping | None) -> list:
    """``chat_id`` (or the participant standing in for it), then the thread when set."""
    anchor = _person(source.chat_id, source, aliases) or participant
    return [part for part in (anchor, source.thread_id) if part]


def _multi_user_tail(
    source: SessionSource,
    participant: str | None,
    *,
    group_sessions_per_user: bool,
    thread_sessions_per_user: bool,
) -> list:
    """Parent chat, thread, then the participant when this lane is per user."""
    per_user = thread_sessions_per_user if is_threaded(source) else group_sessions_per_user
    tail = [source.chat_id, source.thread_id, participant if per_user else None]
    return [part for part in tail if part]


def build_session_key(
    source: SessionSource,
    *,
    group_sessions_per_user: bool = True,
    thread_sessions_per_user: bool = False,
    whatsapp_aliases: Mapping | None = None,
) -> str:
    """The session key of ``source``.

    DMs use ``chat_id`` (plus ``thread_id``), else the participant (``user_id_alt`` before
    ``user_id``), else nothing (one shared DM lane per platform). Groups, channels and
    threads use ``chat_id`` and ``thread_id`` and append the participant when
    ``group_sessions_per_user`` (unthreaded) or ``thread_sessions_per_user`` (threaded) is
    set. Slack adds ``scope_id`` after the chat type. ``whatsapp_aliases`` maps LID digits
    to phone numbers (see :func:`canonical_whatsapp_identifier`).
    """
    parts = ["agent", key_namespace(source.profile), source.platform, source.chat_type]
    if source.platform == "slack" and source.scope_id:
        parts.append(source.scope_id)
    participant = _person(source.participant_id, source, whatsapp_aliases)
    if source.chat_type == "dm":
        parts += _dm_tail(source, participant, whatsapp_aliases)
    else:
        parts += _multi_user_tail(
            source,
            participant,
            group_sessions_per_user=group_sessions_per_user,
            thread_sessions_per_user=thread_sessions_per_user,
        )
    return ":".join(parts)


def is_shared_multi_user_session(
    source: SessionSource,
    *,
    group_sessions_per_user: bool = True,
    thread_sessions_per_user: bool = False,
) -> bool:
    """Whether several users share this session: never for a DM; for a thread, unless
    ``thread_sessions_per_user``; otherwise unless ``group_sessions_per_user``.
    """
    if source.chat_type == "dm":
        return False
    if is_threaded(source):
        return not thread_sessions_per_user
    return not group_sessions_per_user
