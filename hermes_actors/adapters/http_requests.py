"""Validation of HTTP requests, as pure functions (§12, §17.31–§17.34, §17.50).

Everything a client sends is checked here, before anything reaches the gateway, so a bad
request is refused whole and nothing is half-written. Each function takes plain data
(bytes, a query string, a header value) and returns a record or raises
:class:`RequestError` carrying the HTTP status and a message a client developer can act on.
The WSGI plumbing in :mod:`hermes_actors.adapters.http` only moves bytes.

Status codes: 400 when the request cannot be read at all (malformed JSON, invalid UTF-8, a
body that is not an object, a bad Content-Length), 422 when it reads but says something
invalid (a missing or mistyped field, an unknown or unserved platform), 401, 404, 405, 413
as usual.
"""

from __future__ import annotations

import hmac
import json
import math
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hermes_actors.errors import HermesActorsError
from hermes_actors.model.events import MessageEvent, MessageType
from hermes_actors.model.source import CHAT_TYPES, SessionSource

__all__ = [
    "MAX_CURSOR",
    "MAX_ID_LENGTH",
    "MAX_WAIT",
    "InboundMessage",
    "OutboxQuery",
    "RequestError",
    "check_bearer",
    "decode_path",
    "decode_json_body",
    "is_authorized",
    "log_field",
    "parse_content_length",
    "unreadable_request",
    "parse_count",
    "parse_cursor",
    "parse_message",
    "parse_outbox_query",
    "parse_query",
]

#: The longest long-poll, in seconds (§17.50: larger values are clamped).
MAX_WAIT = 60.0
#: The longest id (chat, user, thread, message) accepted, in characters.
MAX_ID_LENGTH = 256
#: The longest chat or user name accepted, in characters.
MAX_NAME_LENGTH = 1024
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ID_FIELDS = ("chat_id", "user_id", "thread_id", "message_id")
_NAME_FIELDS = ("user_name", "chat_name")
_CHALLENGE = (("WWW-Authenticate", 'Bearer realm="hermes-actors"'),)
_MESSAGE_TYPES = tuple(t.value for t in MessageType if t is not MessageType.COMMAND)


class RequestError(HermesActorsError):
    """A request that is refused: ``status`` is the HTTP status, the message the error."""

    def __init__(self, status: int, message: str,
                 headers: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(message)
        #: The HTTP status code to answer with.
        self.status = status
        #: The text of the ``{"error": ...}`` body.
        self.message = message
        #: Extra response headers (``Allow``, ``WWW-Authenticate``).
        self.headers = tuple(headers)


# -- transport -----------------------------------------------------------------------------


def parse_content_length(value: str | None, max_body: int) -> int | None:
    """The declared body length, ``None`` when absent; 413 above ``max_body``, 400 if bad."""
    if value is None or value.strip() == "":
        return None
    text = value.strip()
    if not text.isdigit():
        raise RequestError(400, f"invalid Content-Length header {value!r}")
    length = int(text)
    if length > max_body:
        raise RequestError(413, f"request body too large: {length} bytes (limit {max_body})")
    return length


def unreadable_request(content_length: str | None) -> str:
    """The error text for a request the HTTP server could not parse (its request line or a
    header), given the request's ``Content-Length`` header when it had one."""
    try:
        parse_content_length(content_length, max_body=2**63)
    except RequestError as exc:
        return exc.message
    return "malformed HTTP request: its request line or a header cannot be read"


def check_bearer(header: str | None, token: str | None) -> None:
    """Pass when no token is configured or ``Authorization: Bearer <token>`` matches; 401
    otherwise (compared in constant time)."""
    if not token:
        return
    scheme, _, given = (header or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise RequestError(401, "missing bearer token: send 'Authorization: Bearer <token>'",
                           _CHALLENGE)
    expected = token.encode("utf-8")
    given = given.strip()
    if not (hmac.compare_digest(_header_bytes(given), expected)
            or hmac.compare_digest(given.encode("utf-8"), expected)):
        raise RequestError(401, "invalid bearer token", _CHALLENGE)


def is_authorized(header: str | None, token: str | None) -> bool:
    """Whether :func:`check_bearer` passes (no token configured, or the right one sent)."""
    try:
        check_bearer(header, token)
    except RequestError:
        return False
    return True


def _header_bytes(value: str) -> bytes:
    """The bytes a header value came as: a WSGI server decodes them as latin-1 (PEP 3333),
    so a token with non-ASCII characters, sent as UTF-8 (curl, ``send``), is matched."""
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:  # not from a WSGI server: the text itself
        return value.encode("utf-8")


def decode_json_body(raw: bytes) -> dict[str, Any]:
    """The JSON object in ``raw``; 400 for invalid UTF-8, malformed JSON or a non-object."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(400, f"request body is not valid UTF-8 (byte {exc.start})") from None
    if not text.strip():
        raise RequestError(400, "request body is empty: send a JSON object")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestError(
            400, f"malformed JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise RequestError(400, "malformed JSON: nested too deeply") from None
    except ValueError:  # an integer beyond Python's digit limit (4,300 by default)
        raise RequestError(400, "malformed JSON: a number has too many digits") from None
    if not isinstance(data, dict):
        raise RequestError(400, f"request body must be a JSON object, not {_json_type(data)}")
    if "\\u" in text and not _encodable(data):  # (only escapes can make a lone surrogate)
        raise RequestError(400, "malformed JSON: a \\u escape names half of a surrogate pair")
    return data


def _encodable(data: Any) -> bool:
    """Whether every string in ``data`` can be written as UTF-8."""
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


# -- POST /v1/messages ---------------------------------------------------------------------


@dataclass(frozen=True)
class InboundMessage:
    """A validated ``POST /v1/messages`` body."""

    platform: str
    chat_id: str
    text: str
    chat_type: str = "dm"
    user_id: str | None = None
    user_name: str | None = None
    thread_id: str | None = None
    chat_name: str | None = None
    message_id: str | None = None
    media_urls: tuple[str, ...] = ()
    message_type: str = "text"
    extra: dict[str, Any] = field(default_factory=dict)

    def source(self) -> SessionSource:
        """The :class:`SessionSource` the message came from."""
        return SessionSource(
            self.platform,
            chat_id=self.chat_id,
            chat_type=self.chat_type,
            chat_name=self.chat_name,
            user_id=self.user_id,
            user_name=self.user_name,
            thread_id=self.thread_id,
            message_id=self.message_id,
        )

    def to_event(self) -> MessageEvent:
        """The :class:`MessageEvent` to submit (a new event id, received now)."""
        return MessageEvent(
            source=self.source(),
            text=self.text,
            message_type=MessageType(self.message_type),
            media_urls=self.media_urls,
        )


def _required_id(data: Mapping[str, Any], name: str) -> str:
    """:func:`_id` of a field that must be given."""
    value = _id(data, name, required=True)
    assert value is not None  # required: missing or empty raised
    return value


def _id(data: Mapping[str, Any], name: str, *, required: bool = False) -> str | None:
    """An id given as a string or a JSON integer (coerced, §17.50)."""
    if name not in data or data[name] is None:
        if required:
            raise RequestError(422, f"missing required field {name!r}")
        return None
    value = data[name]
    if isinstance(value, bool):
        raise RequestError(422, f"field {name!r} must be a string or a number, not a boolean")
    if isinstance(value, int):
        value = str(value)
    elif isinstance(value, float):
        if not (math.isfinite(value) and value.is_integer()):
            raise RequestError(422, f"field {name!r} must be a string or an integer")
        value = str(int(value))
    elif not isinstance(value, str):
        raise RequestError(
            422, f"field {name!r} must be a string or a number, not {_json_type(value)}"
        )
    value = value.strip()
    if not value:
        if required:
            raise RequestError(422, f"field {name!r} must not be empty")
        return None
    if len(value) > MAX_ID_LENGTH:
        raise RequestError(422, f"field {name!r} is longer than {MAX_ID_LENGTH} characters")
    if _CONTROL.search(value) or ".." in value:
        raise RequestError(422, f"field {name!r} contains control characters or '..'")
    return value


def _string(data: Mapping[str, Any], name: str, limit: int | None = None) -> str | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise RequestError(422, f"field {name!r} must be a string, not {_json_type(value)}")
    if limit is not None and len(value) > limit:
        raise RequestError(422, f"field {name!r} is longer than {limit} characters")
    return value


def _given(data: Mapping[str, Any], name: str, default: str) -> Any:
    """An optional field's value; absent or ``null``, its default (as for every optional
    field: many clients send ``null`` for what they did not set)."""
    value = data.get(name)
    return default if value is None else value


def _platform(value: Any, platforms: Sequence[str]) -> str:
    served = ", ".join(platforms)
    if not isinstance(value, str):
        raise RequestError(422, f"field 'platform' must be a string, not {_json_type(value)}")
    name = value.strip().lower()
    if name not in platforms:
        raise RequestError(
            422, f"platform {value!r} is not served by the HTTP adapter (served: {served})"
        )
    return name


def parse_message(data: Mapping[str, Any], *, platforms: Sequence[str]) -> InboundMessage:
    """Validate a decoded ``POST /v1/messages`` body (§17.31, §17.50).

    Required: ``chat_id`` (string or integer) and ``text`` (string; empty only with
    ``media_urls``). Optional: ``platform`` (default ``webhook``; one of ``platforms``),
    ``chat_type`` (``dm``, ``group``, ``channel``, ``thread``), ``user_id``, ``user_name``,
    ``thread_id``, ``chat_name``, ``message_id``, ``media_urls`` (list of strings),
    ``message_type`` (``text``, ``photo``, ``voice``, ``document``). An optional field given
    as ``null`` takes its default. Other keys are ignored.
    """
    chat_id = _required_id(data, "chat_id")
    if "text" not in data or data["text"] is None:
        raise RequestError(422, "missing required field 'text'")
    text = data["text"]
    if not isinstance(text, str):
        raise RequestError(422, f"field 'text' must be a string, not {_json_type(text)}")
    media = data.get("media_urls")
    if media is None:
        media = []
    if not isinstance(media, list) or not all(isinstance(u, str) and u.strip() for u in media):
        raise RequestError(422, "field 'media_urls' must be a list of non-empty strings")
    if not text.strip() and not media:
        raise RequestError(422, "field 'text' must not be empty (unless media_urls are given)")
    platform = _platform(_given(data, "platform", "webhook"), platforms)
    chat_type = _given(data, "chat_type", "dm")
    if not isinstance(chat_type, str) or chat_type.strip().lower() not in CHAT_TYPES:
        raise RequestError(
            422, f"field 'chat_type' must be one of {', '.join(CHAT_TYPES)}; got {chat_type!r}"
        )
    message_type = _given(data, "message_type", "text")
    if not isinstance(message_type, str) or message_type.strip().lower() not in _MESSAGE_TYPES:
        raise RequestError(
            422, f"field 'message_type' must be one of {', '.join(_MESSAGE_TYPES)}; "
            f"got {message_type!r}",
        )
    return InboundMessage(
        platform=platform,
        chat_id=chat_id,
        text=text,
        chat_type=chat_type.strip().lower(),
        user_id=_id(data, "user_id"),
        user_name=_string(data, "user_name", MAX_NAME_LENGTH),
        thread_id=_id(data, "thread_id"),
        chat_name=_string(data, "chat_name", MAX_NAME_LENGTH),
        message_id=_id(data, "message_id"),
        media_urls=tuple(u.strip() for u in media),
        message_type=message_type.strip().lower(),
    )


# -- GET /v1/outbox ------------------------------------------------------------------------


@dataclass(frozen=True)
class OutboxQuery:
    """A validated ``GET /v1/outbox`` query."""

    platform: str
    chat_id: str
    #: Return rows with a cursor above this; ``None`` means "the current end" (``latest``).
    after: int | None
    #: Seconds to wait when nothing is there yet (0 to 60).
    wait: float
    limit: int


def parse_query(query: str) -> dict[str, str]:
    """The parameters of a query string (a repeated one: the last wins); 400 if not UTF-8."""
    try:
        pairs = urllib.parse.parse_qsl(
            query, keep_blank_values=True, strict_parsing=False, errors="strict"
        )
    except UnicodeDecodeError:
        raise RequestError(400, "query string is not valid UTF-8") from None
    return dict(pairs)


#: The largest cursor a database stores (a signed 64-bit integer).
MAX_CURSOR = 2**63 - 1


def _is_digits(text: str) -> bool:
    """Only ASCII digits (``str.isdigit`` also takes ``²`` and other digits ``int`` refuses)."""
    return text.isascii() and text.isdigit()


def parse_cursor(text: str, what: str, alternative: str = "") -> int:
    """An outbox cursor from ``text`` (an integer from 0 to :data:`MAX_CURSOR`), or 422
    naming ``what`` (and ``alternative`` forms it may take) in the text §17 pins."""
    if not _is_digits(text) or int(text) > MAX_CURSOR:
        raise RequestError(422, f"{what} must be a cursor (an integer >= 0){alternative}")
    return int(text)


def parse_count(params: Mapping[str, str], name: str = "limit", *, default: int = 100,
                minimum: int = 1, maximum: int = 1000) -> int:
    """The integer parameter ``name`` between ``minimum`` and ``maximum`` (422 otherwise)."""
    raw = params.get(name, "").strip()
    if not raw:
        return default
    if not _is_digits(raw) or not minimum <= int(raw) <= maximum:
        raise RequestError(
            422, f"parameter {name!r} must be an integer from {minimum} to {maximum}"
        )
    return int(raw)


def parse_outbox_query(query: str, *, platforms: Sequence[str]) -> OutboxQuery:
    """Validate ``chat_id`` (required), ``platform`` (default ``webhook``), ``after``
    (a cursor, default 0, or ``latest``), ``wait`` (seconds, clamped to 0..60) and
    ``limit`` (1..1000, default 100)."""
    params = parse_query(query)
    chat_id = _required_id(params, "chat_id")
    platform = _platform(params.get("platform") or "webhook", platforms)
    raw_after = params.get("after", "").strip()
    if raw_after.lower() == "latest":
        after = None
    elif not raw_after:
        after = 0
    else:
        after = parse_cursor(raw_after, "parameter 'after'", " or 'latest'")
    raw_wait = params.get("wait", "").strip()
    try:
        wait = float(raw_wait) if raw_wait else 0.0
    except ValueError:
        wait = math.nan
    if not math.isfinite(wait) or wait < 0:
        raise RequestError(422, "parameter 'wait' must be a number of seconds >= 0")
    return OutboxQuery(platform, chat_id, after, min(wait, MAX_WAIT), parse_count(params))


# -- paths ---------------------------------------------------------------------------------


def decode_path(path_info: str) -> str:
    """The request path as text. WSGI servers percent-decode the path and hand it over as
    latin-1 characters, one per byte (PEP 3333); a session key may hold any UTF-8 text, so
    the bytes are decoded again as UTF-8 (400 when they are not)."""
    try:
        return path_info.encode("latin-1").decode("utf-8")
    except UnicodeEncodeError:
        return path_info  # already text (a server that decodes UTF-8 itself)
    except UnicodeDecodeError:
        raise RequestError(400, "request path is not valid UTF-8") from None


# -- logging --------------------------------------------------------------------------------

#: Characters written as escapes in a logged field besides the non-printable ones: a space
#: would end the ``key=value`` field, a backslash starts an escape, a quote could be taken
#: for one.
_LOG_ESCAPED = frozenset(' \\"')


def log_field(value: object) -> str:
    """``value`` as one ``key=value`` field of a log line, whatever a client put in it: every
    control character (newlines, carriage returns, ESC ...), other unprintable one (U+2028,
    C1 controls), space, backslash and double quote becomes a backslash escape (``\\n``,
    ``\\x1b``, ``\\x20``, ``\\\\``), so a request cannot start a log line of its own or
    forge a field (``GET /v1/x%0Amethod=FORGED``)."""
    text = str(value)
    if text.isprintable() and not _LOG_ESCAPED.intersection(text):
        return text
    return "".join(ch if ch.isprintable() and ch not in _LOG_ESCAPED else _escape_char(ch)
                   for ch in text)


_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\", '"': '\\"'}


def _escape_char(ch: str) -> str:
    short = _SHORT_ESCAPES.get(ch)
    if short is not None:
        return short
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"
