"""Deleting conversations whole (``DeleteConversations``, issue 39): one key's routing row,
transcripts (and their search index rows), inbox, ledger and outbox rows go in one
transaction; every other key's stay."""

from __future__ import annotations

import json

from hermes_actors.store.ops import (
    AcceptEvent,
    DeleteConversations,
    EndSession,
    OutboxAppend,
)
from hermes_actors.store.protocol import DatabaseTools

from .ops import T0, message, put, record, session

OLD = "20231114_221320_00000001"  # the key's earlier session (before a /new)
NOW = "20231114_221320_00000002"
OTHER = "20231114_221320_00000003"


def accept(event_id: str, key: str) -> AcceptEvent:
    return AcceptEvent(event_id, key, json.dumps({"event_id": event_id}), False, T0, None)


def outbox(key: str, text: str) -> OutboxAppend:
    return OutboxAppend(key, "http", key, None, text, "reply", T0)


def _conversation(key: str, sids: tuple[str, ...], word: str) -> list:
    ops: list = [put(key, json.dumps({"session_id": sids[-1]}))]
    for sid in sids:
        ops += [session(sid, key), message(f"{word} said zanzibar", sid=sid),
                message(f"{word} heard", role="assistant", sid=sid)]
    return [*ops, EndSession(sids[0], "session_reset", T0), accept(f"{word}-e", key),
            record(f"{word}".ljust(24, "x"), key=key), outbox(key, f"{word} out")]


class TestDeleteConversations:
    def test_one_key_goes_whole_and_the_others_stay(self, backend):
        backend.apply(_conversation("k", (OLD, NOW), "gone"))
        backend.apply(_conversation("o", (OTHER,), "kept"))
        [counts] = backend.apply([DeleteConversations(("k",), (NOW,))])
        assert counts["routing"] == 1 and counts["inbox"] == 1
        assert counts["deliveries"] == 1 and counts["outbox"] == 1
        # the files backend has no sessions table: its transcripts are the key's files
        # named by id (the database finds the earlier session by its key)
        expect = 2 if backend.kind == "files" else 4
        assert counts["messages"] == expect
        assert list(backend.routing_keys()) == ["o"]
        assert backend.load_messages(NOW) == []
        assert [m["content"] for m in backend.load_messages(OTHER)] == [
            "kept said zanzibar", "kept heard"]
        assert [k for k, _ in backend.pending_inbox()] == ["o"]
        assert [r["session_key"] for r in backend.ledger_rows()] == ["o"]
        assert backend.outbox_read("http", "k", 0, 10) == []
        assert [r["text"] for r in backend.outbox_read("http", "o", 0, 10)] == ["kept out"]
        if backend.kind != "files":
            assert backend.load_messages(OLD) == []
            assert {r["id"] for r in backend.rows("sessions")} == {OTHER}
        if isinstance(backend, DatabaseTools):  # the search index lost the key's rows
            assert {hit["session_id"] for hit in backend.search("zanzibar")} == {OTHER}
            assert backend.check_fts() == "ok"

    def test_an_unknown_key_removes_nothing(self, backend):
        backend.apply(_conversation("o", (OTHER,), "kept"))
        [counts] = backend.apply([DeleteConversations(("nobody",), ())])
        assert set(counts.values()) == {0}
        assert list(backend.routing_keys()) == ["o"]

    def test_the_delete_is_durable(self, opened):
        opened.backend.apply(_conversation("k", (NOW,), "gone"))
        opened.backend.apply([DeleteConversations(("k",), (NOW,))])
        again = opened.reopen()
        assert dict(again.routing_keys()) == {}
        assert again.load_messages(NOW) == []
        assert again.pending_inbox() == [] and again.ledger_rows() == []
        assert again.outbox_read("http", "k", 0, 10) == []
