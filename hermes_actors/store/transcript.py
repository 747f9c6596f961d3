"""The transcript message shape (§17.13), checked once at the store's door.

A message is a dict: ``role`` (``user``, ``assistant``, ``tool``, ``system``), ``content``
(str), optional ``tool_name`` and ``tool_calls``, and ``timestamp`` (epoch float, filled in
from the store's clock when missing). Anything else a caller passes is dropped rather than
stored, so every backend persists and returns the same shape.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from hermes_actors.model.timeutil import parse_timestamp

__all__ = [
    "LAST_ROW_COLUMNS",
    "ROLES",
    "normalize_message",
    "public_message",
    "reply_after_last_row",
    "reply_after_marker",
]

#: The roles a transcript message may have.
ROLES = ("user", "assistant", "tool", "system")


def _timestamp(value: Any, now: float) -> float:
    if value is None:
        return float(now)
    if isinstance(value, bool):
        raise ValueError("message timestamp must be epoch seconds, not a boolean")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, (str, datetime)):
        parsed = parse_timestamp(value)
        if parsed is not None:
            return parsed.timestamp()
    raise ValueError(f"message timestamp must be epoch seconds, got {value!r}")


def normalize_message(message: Mapping[str, Any], now: float) -> dict[str, Any]:
    """Validate ``message`` and return it in the stored shape.

    Raises ``ValueError`` for a role outside :data:`ROLES`, non-string content, a non-string
    tool name, tool calls that are not JSON-serialisable, or a malformed timestamp.
    """
    if type(message) is not dict and not isinstance(message, Mapping):  # (a dict: no ABC)
        raise ValueError(f"a transcript message must be a dict, got {type(message).__name__}")
    role = message.get("role")
    if role not in ROLES:
        raise ValueError(f"message role must be one of {', '.join(ROLES)}; got {role!r}")
    content = message.get("content")
    if not isinstance(content, str):
        raise ValueError(f"message content must be a string, got {type(content).__name__}")
    out: dict[str, Any] = {"role": role, "content": content}
    tool_name = message.get("tool_name")
    if tool_name is not None:
        if not isinstance(tool_name, str):
            raise ValueError("message tool_name must be a string")
        out["tool_name"] = tool_name
    tool_calls = message.get("tool_calls")
    if tool_calls is not None:
        try:
            json.dumps(tool_calls)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"message tool_calls must be JSON-serialisable: {exc}") from None
        out["tool_calls"] = tool_calls
    token_count = message.get("token_count")
    if token_count is not None:
        if isinstance(token_count, bool) or not isinstance(token_count, int):
            raise ValueError("message token_count must be an integer")
        out["token_count"] = token_count
    stamp = message.get("timestamp")
    out["timestamp"] = float(now) if stamp is None else _timestamp(stamp, now)
    return out


def public_message(
    role: str,
    content: str,
    tool_name: str | None,
    tool_calls: Any,
    timestamp: float,
    token_count: int | None = None,
) -> dict[str, Any]:
    """A stored message rebuilt in the §17.13 shape (optional keys only when set)."""
    out: dict[str, Any] = {"role": role, "content": content}
    if tool_name is not None:
        out["tool_name"] = tool_name
    if tool_calls is not None:
        out["tool_calls"] = tool_calls
    out["timestamp"] = float(timestamp)
    if token_count is not None:
        out["token_count"] = token_count
    return out


def reply_after_marker(last: Mapping[str, Any] | None, token: str,
                       started: float | None) -> str | None:
    """The reply of an interrupted turn found in its transcript without the gateway's own
    reply row (§7 step 2, §17.55): an agent that writes its own transcript rows, or a store
    migrated from the reference gateway, leaves the answer as the session's last message.

    ``last`` is that message as stored (with its ``turn_token``, ``None`` for rows written
    outside a turn); it counts as the turn's reply when it is an assistant answer (text, no
    tool calls), written by this turn or by no turn, and not older than the marker's start
    (``started``, epoch seconds: a previous turn's reply is never adopted).
    """
    if last is None or started is None or last.get("role") != "assistant":
        return None
    content = last.get("content")
    if not isinstance(content, str) or not content.strip() or last.get("tool_calls"):
        return None
    if last.get("turn_token") not in (None, token):
        return None
    timestamp = last.get("timestamp")
    if not isinstance(timestamp, (int, float)) or timestamp < started:
        return None
    return content


#: The columns of a session's last message that :func:`reply_after_last_row` reads, in order.
LAST_ROW_COLUMNS = ("role", "content", "tool_calls", "timestamp", "turn_token")


def reply_after_last_row(row: tuple[Any, ...] | None, token: str,
                         started: float | None) -> str | None:
    """:func:`reply_after_marker` of a stored row holding :data:`LAST_ROW_COLUMNS` (what
    the backends read for it), or ``None`` for no row."""
    if row is None:
        return None
    return reply_after_marker(dict(zip(LAST_ROW_COLUMNS, row, strict=True)), token, started)
