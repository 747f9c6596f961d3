"""``SessionEntry``: the routing record of one session key (§2), and path safety.

Entries are immutable values: the store replaces an entry with ``dataclasses.replace`` and
hands copies to actors, so no two actors ever share a mutable record.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from hermes_actors._green import brief_lock
from hermes_actors.model.source import SessionSource
from hermes_actors.model.timeutil import isoformat, parse_timestamp, utc_now

__all__ = [
    "SessionEntry",
    "new_session_id",
    "validate_session_id",
    "validate_session_key",
]

_DRIVE = re.compile(r"^[A-Za-z]:")
_SESSION_ID_TIME = "%Y%m%d_%H%M%S"


class _Suffixes:
    """The 8-hex suffix: a random 16-bit process prefix and a 16-bit counter.

    Purely random 32 bits collide (birthday bound) about once in a hundred bursts of 10,000
    sessions created within one second; a per-process counter cannot collide inside the
    process, and the random prefix keeps processes (and restarts) apart.
    """

    def __init__(self) -> None:
        self.lock = brief_lock()  # (a few statements; under gevent a native lock: a C call)
        self.prefix = secrets.randbits(16)
        self.counter = secrets.randbits(16)

    def next(self) -> str:
        with self.lock:
            self.counter = (self.counter + 1) & 0xFFFF
            if self.counter == 0:  # a wrap starts a fresh random prefix
                self.prefix = secrets.randbits(16)
            return f"{self.prefix:04x}{self.counter:04x}"


_suffixes = _Suffixes()


def new_session_id(now: datetime | None = None) -> str:
    """A fresh session id, ``YYYYMMDD_HHMMSS_<8 hex>`` in UTC, unique within the process."""
    now = now or utc_now()
    return f"{now.strftime(_SESSION_ID_TIME)}_{_suffixes.next()}"


def validate_session_id(session_id: object) -> str:
    """Return ``session_id`` or raise ``ValueError`` when it could escape a directory."""
    if not isinstance(session_id, str) or not session_id:
        raise ValueError(f"invalid session_id {session_id!r}: must be a non-empty string")
    if ".." in session_id or "/" in session_id or "\\" in session_id or "\x00" in session_id:
        raise ValueError(f"unsafe session_id {session_id!r}: path separators or '..'")
    if _DRIVE.match(session_id):
        raise ValueError(f"unsafe session_id {session_id!r}: drive prefix")
    return session_id


def validate_session_key(session_key: object) -> str:
    """Return ``session_key`` or raise ``ValueError``; interior ``/`` is allowed."""
    if not isinstance(session_key, str) or not session_key:
        raise ValueError(f"invalid session_key {session_key!r}: must be a non-empty string")
    if ".." in session_key or "\x00" in session_key:
        raise ValueError(f"unsafe session_key {session_key!r}: contains '..'")
    if session_key[0] in "/\\" or _DRIVE.match(session_key):
        raise ValueError(f"unsafe session_key {session_key!r}: absolute path or drive prefix")
    return session_key


_TIME_FIELDS = ("created_at", "updated_at", "last_resume_marked_at", "active_turn_started_at")


@dataclass(frozen=True)
class SessionEntry:
    """Which ``session_id`` a session key currently routes to, plus its lifecycle flags."""

    session_key: str
    session_id: str
    created_at: datetime | None = None
    updated_at: datetime | None = None
    origin: SessionSource | None = None
    display_name: str | None = None
    platform: str | None = None
    chat_type: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    last_prompt_tokens: int = 0
    #: The next access rotates to a new session id (hard clear).
    suspended: bool = False
    #: Keep the session id and auto-continue after a restart (soft recovery).
    resume_pending: bool = False
    resume_reason: str | None = None
    last_resume_marked_at: datetime | None = None
    #: Durable in-flight turn marker: token, start time, whether the turn was internal.
    active_turn_token: str | None = None
    active_turn_started_at: datetime | None = None
    active_turn_internal: bool = False
    #: The inbound events the marked turn answers (its own, and the owed ones it took up);
    #: meaningful while ``active_turn_token`` is set.
    active_turn_events: tuple[str, ...] = ()
    #: Accepted events whose turn ended without an answer (interrupted by a follow-up, a
    #: drain, a crash): the session's next turn answers them too, or a final notice does.
    owed_events: tuple[str, ...] = ()
    was_auto_reset: bool = False
    auto_reset_reason: str | None = None
    prev_session_id: str | None = None
    is_fresh_reset: bool = False
    #: A historical boundary from old data; honoured by recovery, never written by timers.
    expiry_finalized: bool = False

    def __post_init__(self) -> None:
        validate_session_key(self.session_key)
        validate_session_id(self.session_id)
        if self.prev_session_id is not None:
            validate_session_id(self.prev_session_id)

    def evolve(self, **changes: Any) -> SessionEntry:
        """``dataclasses.replace`` for the hot path: flags, times and the turn marker only.

        Skips ``__post_init__`` (ids and keys cannot change here, so nothing needs
        re-validating): a turn replaces its entry twice, and ``replace`` re-runs every
        field's default handling and validation each time. Other fields raise ``TypeError``.
        """
        unknown = changes.keys() - _EVOLVABLE
        if unknown:
            raise TypeError(f"evolve() cannot change {', '.join(sorted(unknown))}")
        new = object.__new__(SessionEntry)
        state = new.__dict__
        state.update(self.__dict__)
        state.update(changes)
        return new

    @property
    def has_active_turn(self) -> bool:
        """Whether a durable in-flight turn marker is set."""
        return self.active_turn_token is not None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict in field order; datetimes as ISO 8601 with offset."""
        # The instance dict holds exactly the fields, in field order (``__init__`` sets them
        # in order, ``evolve`` copies it): copied whole, then the few non-JSON values are
        # converted (half the time of a getattr per field; every routing write runs this).
        out = dict(self.__dict__)
        for name in _TIME_FIELDS:
            if out[name] is not None:
                out[name] = isoformat(out[name])
        if out["origin"] is not None:
            out["origin"] = out["origin"].to_dict()
        out["metadata"] = dict(out["metadata"])
        out["active_turn_events"] = list(out["active_turn_events"])
        out["owed_events"] = list(out["owed_events"])
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionEntry:
        """Rebuild tolerantly: missing fields take defaults, malformed times become ``None``,
        a malformed active-turn pair is dropped as a pair. Unsafe ids raise ``ValueError``.
        """
        if not isinstance(data, dict):
            raise ValueError("a session entry must be a JSON object")
        known = _FIELD_SET
        kwargs: dict[str, Any] = {k: v for k, v in data.items() if k in known}
        for name in ("session_key", "session_id"):
            if name not in kwargs:
                raise ValueError(f"session entry lacks {name!r}")
        for name in _TIME_FIELDS:
            if name in kwargs:
                kwargs[name] = parse_timestamp(kwargs[name])
        token = kwargs.get("active_turn_token")
        started = kwargs.get("active_turn_started_at")
        if not (isinstance(token, str) and token and started is not None):
            kwargs["active_turn_token"] = None
            kwargs["active_turn_started_at"] = None
            kwargs["active_turn_internal"] = False
            kwargs["active_turn_events"] = ()
        for name in ("active_turn_events", "owed_events"):
            kwargs[name] = _event_ids(kwargs.get(name))
        origin = kwargs.get("origin")
        if isinstance(origin, dict):
            try:
                kwargs["origin"] = SessionSource.from_dict(origin)
            except (TypeError, ValueError):
                # e.g. a plugin platform no longer registered: keep the session routable
                kwargs["origin"] = None
        elif not isinstance(origin, SessionSource):
            kwargs["origin"] = None
        if not isinstance(kwargs.get("metadata"), dict):
            kwargs["metadata"] = {}
        try:
            kwargs["last_prompt_tokens"] = int(kwargs.get("last_prompt_tokens") or 0)
        except (TypeError, ValueError):
            kwargs["last_prompt_tokens"] = 0
        for name in (
            "suspended",
            "resume_pending",
            "active_turn_internal",
            "was_auto_reset",
            "is_fresh_reset",
            "expiry_finalized",
        ):
            if name in kwargs:
                kwargs[name] = bool(kwargs[name])
        for name in ("resume_reason", "auto_reset_reason", "display_name", "platform",
                     "chat_type", "prev_session_id"):
            if name in kwargs and kwargs[name] is not None and not isinstance(kwargs[name], str):
                kwargs[name] = str(kwargs[name])
        return cls(**kwargs)


def _event_ids(value: Any) -> tuple[str, ...]:
    """A stored list of event ids as a tuple (anything malformed is left out)."""
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(v for v in value if isinstance(v, str) and v)


#: Field names, computed once: ``dataclasses.fields()`` on every (de)serialisation showed up
#: as a fifth of the hub's time per turn in profiles.
_FIELD_NAMES = tuple(f.name for f in fields(SessionEntry))
_FIELD_SET = frozenset(_FIELD_NAMES)
#: What :meth:`SessionEntry.evolve` may change.
_EVOLVABLE = frozenset({
    "updated_at", "suspended", "resume_pending", "resume_reason", "last_resume_marked_at",
    "active_turn_token", "active_turn_started_at", "active_turn_internal",
    "active_turn_events", "owed_events",
})
