"""Small builders of operation records for the conformance tests."""

from __future__ import annotations

from hermes_actors.store.ops import (
    AppendMessage,
    CreateSession,
    LedgerRecord,
    PutRouting,
    SetRoutingFlags,
)
from hermes_actors.store.routing import NO_FLAGS, RoutingFlags

T0 = 1_700_000_000.0
SID = "20231114_221320_00000001"


def put(key: str, text: str = '{"session_id": "20231114_221320_00000001"}',
        flags: RoutingFlags = NO_FLAGS) -> PutRouting:
    return PutRouting(key, text, *flags)


def flags(key: str, flags: RoutingFlags) -> SetRoutingFlags:
    return SetRoutingFlags(key, *flags)


def marked(token: str = "t" * 32, started: float = T0, updated: float = T0) -> RoutingFlags:
    return NO_FLAGS._replace(active_turn_token=token, active_turn_started_at=started,
                             updated_at=updated)


def session(sid: str = SID, key: str = "k") -> CreateSession:
    return CreateSession(sid, key, None, T0)


def message(content: str, role: str = "user", sid: str = SID, ts: float = T0,
            token: str | None = None, reply: bool = False, **extra) -> AppendMessage:
    return AppendMessage(sid, {"role": role, "content": content, "timestamp": ts, **extra},
                         token, reply)


def record(oid: str = "o" * 24, key: str = "k", content: str = "hi", at: float = T0,
           kind: str = "reply") -> LedgerRecord:
    return LedgerRecord(oid, key, "telegram", "42", None, content, kind, at, "e1 e2")
