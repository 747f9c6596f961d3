"""The runtime-facing store methods: durable inbox, atomic turn start, reply lookup, ledger."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from hermes_actors.errors import ConfigError, StoreError
from hermes_actors.model.events import MessageEvent
from hermes_actors.model.source import SessionSource
from hermes_actors.store.ledger import claim_allowed, finish_state, obligation_id
from hermes_actors.store.ops import LedgerRecord
from hermes_actors.store.store import SessionStore
from hermes_actors.store.turns import SessionExistsError

from .conftest import T0, dm

HOUR = 3600.0


def _event(text: str, chat: str = "42", **kwargs) -> MessageEvent:
    return MessageEvent(source=dm(chat), text=text, **kwargs)


def _sql(store, sql: str) -> list:
    db = store.db
    return db.sql(sql)


class TestInbox:
    """Accepted events persist in arrival order, once each, until consumed."""

    def test_order_idempotency_and_consumption(self, store):
        key = store.get_or_create_session(dm()).session_key
        events = [_event(f"m{n}") for n in range(5)]
        for event in events:
            store.accept_event(key, event)
        store.accept_event(key, events[1])
        pending = store.pending_inbox()
        assert [e.text for _, e in pending] == ["m0", "m1", "m2", "m3", "m4"]
        assert all(k == key for k, _ in pending) and pending[0][1] == events[0]
        store.consume_events([events[0].event_id, events[3].event_id], "command")
        store.consume_events([events[0].event_id], "dropped")
        assert [e.text for _, e in store.pending_inbox()] == ["m1", "m2", "m4"]
        reasons = dict(_sql(store, "SELECT event_id, consumed_reason FROM inbox"))
        assert reasons[events[0].event_id] == "command"

    def test_inbox_survives_a_reopen(self, make_store):
        first = make_store()
        key = first.get_or_create_session(dm()).session_key
        event = _event("queued", internal=True, metadata={"delegation": {"id": "d1"}})
        first.accept_event(key, event)
        first.close()
        [(got_key, got)] = make_store().pending_inbox()
        assert got_key == key and got == event

    def test_prune_drops_old_consumed_rows_only(self, store, clock):
        key = store.get_or_create_session(dm()).session_key
        old, kept = _event("old"), _event("unconsumed")
        store.accept_event(key, old)
        store.accept_event(key, kept)
        store.consume_events([old.event_id], "turn")
        clock.advance(8 * 24 * HOUR)
        assert store.inbox_prune(7) == 1
        assert [e.text for _, e in store.pending_inbox()] == ["unconsumed"]


class TestBeginTurn:
    """A turn start is one transaction: marker, user message and consumption, or none."""

    def test_all_three_together_and_durable(self, make_store):
        store = make_store()
        entry = store.get_or_create_session(dm())
        event = _event("hello")
        store.accept_event(entry.session_key, event)
        token = store.begin_turn(entry.session_key, entry.session_id,
                                 user_message={"role": "user", "content": "hello"},
                                 event_ids=[event.event_id])  # fmt: skip
        store.close()
        reopened = make_store()
        marked = reopened.get(entry.session_key)
        assert marked.active_turn_token == token and not marked.active_turn_internal
        assert reopened.load_transcript(entry.session_id) == [
            {"role": "user", "content": "hello", "timestamp": T0}
        ]
        assert reopened.pending_inbox() == []
        rows = _sql(reopened, "SELECT turn_token, is_reply FROM messages")
        assert rows == [(token, 0)]

    def test_failure_writes_nothing(self, store):
        entry = store.get_or_create_session(dm())
        event = _event("hello")
        store.accept_event(entry.session_key, event)
        _sql(store, "CREATE TRIGGER refuse BEFORE UPDATE ON inbox BEGIN "
                    "SELECT RAISE(ABORT, 'refused'); END")  # fmt: skip
        with pytest.raises(StoreError):
            store.begin_turn(entry.session_key, entry.session_id,
                             user_message={"role": "user", "content": "hello"},
                             event_ids=[event.event_id])  # fmt: skip
        assert store.get(entry.session_key).active_turn_token is None
        [stored] = [r for r in store.rows("routing") if r["session_key"] == entry.session_key]
        assert stored["active_turn_token"] is None
        assert store.load_transcript(entry.session_id) == []
        assert len(store.pending_inbox()) == 1

    def test_internal_turn_without_message(self, store):
        entry = store.get_or_create_session(dm())
        token = store.begin_turn(entry.session_key, entry.session_id, internal=True)
        assert store.get(entry.session_key).active_turn_internal
        assert store.clear_turn_active(entry.session_key, token)

    def test_unknown_key_and_bad_message(self, store):
        entry = store.get_or_create_session(dm())
        with pytest.raises(StoreError):
            store.begin_turn("agent:main:x:dm", entry.session_id)
        with pytest.raises(ValueError):
            store.begin_turn(entry.session_key, entry.session_id, user_message={"role": "x"})
        assert store.get(entry.session_key).active_turn_token is None


class TestBeginFirstTurn:
    """A session's first message: the session is created in the turn's start transaction."""

    def test_session_marker_message_and_consumption_together_and_durable(self, make_store):
        store = make_store()
        key = store.session_key_for(dm())
        event = _event("hello")
        store.accept_event(key, event)
        token, created = store.begin_first_turn(
            key, dm(), user_message={"role": "user", "content": "hello"},
            event_ids=[event.event_id], touch_activity=True)
        assert created.session_key == key and created.active_turn_token is None
        assert created.origin.chat_id == "42"
        store.close()
        reopened = make_store()
        marked = reopened.get(key)
        assert marked.session_id == created.session_id
        assert marked.active_turn_token == token and not marked.active_turn_internal
        assert marked.created_at == created.created_at
        assert reopened.load_transcript(created.session_id) == [
            {"role": "user", "content": "hello", "timestamp": T0}
        ]
        assert reopened.pending_inbox() == []
        assert _sql(reopened, "SELECT id, session_key, message_count FROM sessions") == [
            (created.session_id, key, 1)]

    def test_failure_writes_nothing(self, store):
        key = store.session_key_for(dm())
        event = _event("hello")
        store.accept_event(key, event)
        _sql(store, "CREATE TRIGGER refuse BEFORE UPDATE ON inbox BEGIN "
                    "SELECT RAISE(ABORT, 'refused'); END")  # fmt: skip
        with pytest.raises(StoreError):
            store.begin_first_turn(key, dm(), user_message={"role": "user", "content": "hi"},
                                   event_ids=[event.event_id])
        assert store.get(key) is None and key not in store.db.routing_keys()
        assert _sql(store, "SELECT count(*) FROM sessions") == [(0,)]
        assert _sql(store, "SELECT count(*) FROM messages") == [(0,)]
        assert len(store.pending_inbox()) == 1

    def test_an_existing_entry_is_refused_and_nothing_written(self, store):
        entry = store.get_or_create_session(dm())
        with pytest.raises(SessionExistsError):
            store.begin_first_turn(entry.session_key, dm(),
                                   user_message={"role": "user", "content": "hi"})
        assert store.get(entry.session_key) == entry
        assert _sql(store, "SELECT count(*) FROM sessions") == [(1,)]
        assert store.load_transcript(entry.session_id) == []


class TestTurnReply:
    """Crash recovery finds a turn's persisted final reply by its token."""

    def test_reply_of_the_turn(self, store):
        entry = store.get_or_create_session(dm())
        token = store.begin_turn(entry.session_key, entry.session_id,
                                 user_message={"role": "user", "content": "q"})  # fmt: skip
        assert store.turn_reply(entry.session_id, token) is None
        store.append_message(entry.session_id, {"role": "assistant", "content": "tool use"},
                             turn_token=token)  # fmt: skip
        assert store.turn_reply(entry.session_id, token) is None
        store.append_message(entry.session_id, {"role": "assistant", "content": "answer"},
                             turn_token=token, is_reply=True)  # fmt: skip
        assert store.turn_reply(entry.session_id, token)["content"] == "answer"
        assert store.turn_reply(entry.session_id, "other") is None


    def test_reply_recorded_with_its_obligation(self, store):
        """``ledger_record(reply=...)``: the reply, its obligation and the marker's clearing
        are one transaction; a malformed reply writes none of them."""
        entry = store.get_or_create_session(dm())
        key, sid = entry.session_key, entry.session_id
        token = store.begin_turn(key, sid, user_message={"role": "user", "content": "q"})

        def record(message):
            return store.ledger_record(session_key=key, platform="telegram", chat_id="42",
                                       thread_id=None, content="answer", kind="reply",
                                       token=token, clear_turn=True, reply=(sid, message))

        with pytest.raises(ValueError):
            record({"role": None, "content": "answer"})
        assert store.turn_reply(sid, token) is None
        assert store.ledger_rows() == [] and store.get(key).has_active_turn
        handlers = store.db._ops._handlers  # the obligation fails after the reply's insert

        def broken(op):
            raise sqlite3.OperationalError("disk I/O error")

        real, handlers[LedgerRecord] = handlers[LedgerRecord], broken
        try:
            with pytest.raises(Exception):  # noqa: B017 - whatever the store makes of it
                record({"role": "assistant", "content": "answer"})
        finally:
            handlers[LedgerRecord] = real
        assert not store.degraded
        assert store.turn_reply(sid, token) is None, "the reply outlived its failed obligation"
        assert store.ledger_rows() == [] and store.get(key).has_active_turn
        oid = record({"role": "assistant", "content": "answer"})
        assert store.turn_reply(sid, token)["content"] == "answer"
        assert [r["obligation_id"] for r in store.ledger_rows()] == [oid]
        assert not store.get(key).has_active_turn


def _record(store, content: str = "reply text", token: str = "t1", kind: str = "reply") -> str:
    return store.ledger_record(session_key="agent:main:telegram:dm:42", platform="telegram",
                               chat_id="42", thread_id=None, content=content, kind=kind,
                               token=token)  # fmt: skip


class TestLedger:
    """Obligations move pending → attempting → delivered/failed/abandoned, one row each."""

    def test_id_and_idempotency(self, store):
        oid = _record(store)
        assert oid == obligation_id("agent:main:telegram:dm:42", "t1", "reply text")
        assert len(oid) == 24
        assert _record(store) == oid
        [row] = store.ledger_rows()
        assert (row["state"], row["attempts"], row["created_at"]) == ("pending", 0, T0)
        assert set(row) >= {
            "obligation_id",
            "session_key",
            "platform",
            "chat_id",
            "thread_id",
            "content",
            "kind",
            "state",
            "attempts",
            "owner_node",
            "owner_boot",
            "created_at",
            "updated_at",
            "last_error",
        }

    def test_happy_path(self, store, clock):
        oid = _record(store)
        assert store.ledger_claim(oid)
        row = store.ledger_rows("attempting")[0]
        assert (row["attempts"], row["owner_node"], row["owner_boot"]) == (
            1, *store.ledger_owner)
        clock.advance(1)
        assert store.ledger_finish(oid, "delivered") == "delivered"
        assert not store.ledger_claim(oid)
        assert store.ledger_rows(["delivered"])[0]["updated_at"] == T0 + 1

    def test_a_boot_never_claims_what_it_is_sending(self, store):
        oid = _record(store)
        assert store.ledger_claim(oid)
        assert not store.ledger_claim(oid)
        assert store.ledger_rows()[0]["attempts"] == 1

    def test_an_earlier_boots_attempt_is_claimable(self, store):
        oid = _record(store)
        node, _ = store.ledger_owner
        assert store.ledger_claim(oid, owner=(node, "an earlier boot"))  # then it crashed
        assert store.ledger_claim(oid)
        assert store.ledger_rows()[0]["attempts"] == 2
        assert store.ledger_rows()[0]["owner_boot"] == store.boot_id

    def test_abandoned_after_three_attempts(self, store):
        oid = _record(store)
        for attempt in (1, 2):
            assert store.ledger_claim(oid)
            assert store.ledger_finish(oid, "failed", error=f"boom {attempt}") == "failed"
        assert store.ledger_claim(oid)
        assert store.ledger_finish(oid, "failed", error="boom 3") == "abandoned"
        assert store.ledger_rows()[0]["last_error"] == "boom 3"
        assert not store.ledger_claim(oid)

    def test_abandoned_after_a_day(self, store, clock):
        oid = _record(store)
        store.ledger_claim(oid)
        clock.advance(25 * HOUR)
        assert store.ledger_finish(oid, "failed") == "abandoned"

    def test_filters_unknown_ids_and_bad_input(self, store):
        a = _record(store, "a")
        _record(store, "b", kind="notice")
        assert [r["obligation_id"] for r in store.ledger_rows("pending")] != []
        assert store.ledger_rows(session_key="other") == []
        assert not store.ledger_claim("0" * 24)
        assert store.ledger_finish("0" * 24, "delivered") is None
        with pytest.raises(ValueError):
            store.ledger_finish(a, "attempting")
        with pytest.raises(ValueError):
            _record(store, kind="shout")

    def test_prune_final_rows_after_a_week(self, store, clock):
        delivered, pending = _record(store, "a"), _record(store, "b")
        store.ledger_claim(delivered)
        store.ledger_finish(delivered, "delivered")
        clock.advance(6 * 24 * HOUR)
        assert store.ledger_prune() == 0
        clock.advance(2 * 24 * HOUR)
        assert store.ledger_prune() == 1
        assert [r["obligation_id"] for r in store.ledger_rows()] == [pending]


class TestLedgerRules:
    """The pure claim/finish rules."""

    def test_claim_rules(self):
        me = {"claimer_node": "n1", "claimer_boot": "b2"}
        assert claim_allowed("pending", None, None, **me)
        assert claim_allowed("attempting", "n1", "b1", **me)  # an earlier boot: gone
        assert not claim_allowed("attempting", "n1", "b2", **me)  # this boot sends it now
        assert claim_allowed("failed", "n1", "b2", **me)  # a retry of its own failure
        assert claim_allowed("failed", "n1", "b1", **me)
        for final in ("delivered", "abandoned"):
            assert not claim_allowed(final, None, None, **me)

    def test_finish_rules(self):
        assert finish_state("failed", attempts=2, created_at=0, now=10) == "failed"
        assert finish_state("failed", attempts=3, created_at=0, now=10) == "abandoned"
        assert finish_state("delivered", attempts=9, created_at=0, now=10**9) == "delivered"


class TestHistoryBeforeTurn:
    """load_transcript(before_turn=token) returns exactly what preceded that turn."""

    def test_excludes_the_turn_and_later(self, store):
        entry = store.get_or_create_session(SessionSource("telegram", chat_id="42"))
        sid = entry.session_id
        store.append_message(sid, {"role": "user", "content": "before"})
        token = store.begin_turn(entry.session_key, sid,
                                 user_message={"role": "user", "content": "now"})
        store.append_message(sid, {"role": "tool", "content": "emitted"}, turn_token=token)
        history = store.load_transcript(sid, before_turn=token)
        assert [m["content"] for m in history] == ["before"]
        assert len(store.load_transcript(sid)) == 3


class TestDeferredFinish:
    """``ledger_finish_later``: the sender does not wait; ``on_done`` once it is durable."""

    def _owed(self, store) -> str:
        return store.ledger_record(session_key="agent:main:telegram:dm:1", platform="telegram",
                                   chat_id="1", thread_id=None, content="hi", kind="reply",
                                   token="t1")

    def test_done_once_durable(self, store):
        oid = self._owed(store)
        done = threading.Event()
        store.ledger_finish_later(oid, "delivered", on_done=done.set)
        assert done.wait(10)
        assert [r["state"] for r in store.ledger_rows()] == ["delivered"]

    def test_a_database_gone_bad_falls_back_to_degraded_mode(self, store):
        oid = self._owed(store)
        db = store.db
        db.sql("PRAGMA query_only = 1")
        done = threading.Event()
        store.ledger_finish_later(oid, "delivered", on_done=done.set)
        assert done.wait(10)
        assert store.degraded

    def test_bad_state_is_refused_at_once(self, store):
        with pytest.raises(ValueError):
            store.ledger_finish_later("x", "attempting", on_done=lambda: None)


class TestIngressKeys:
    """An event whose ingress key an earlier event holds is not stored: its first holder's
    id comes back. A withdrawn event leaves nothing, so its key is free again."""

    @pytest.fixture(params=["sqlite", "degraded"])
    def any_store(self, request, make_store, home):
        if request.param == "degraded":
            (home / "state.db").write_bytes(b"this is not a SQLite database\x00" * 200)
        store = make_store()
        assert store.degraded == (request.param == "degraded")
        return store

    def test_repeat_returns_the_first_holder(self, any_store):
        key = any_store.get_or_create_session(dm()).session_key
        first = MessageEvent(source=dm("42", message_id="m1"), text="hi")
        repeat = MessageEvent(source=dm("42", message_id="m1"), text="hi again")
        assert any_store.accept_event(key, first) == first.event_id
        assert any_store.accept_event(key, repeat) == first.event_id
        assert [e.event_id for _, e in any_store.pending_inbox()] == [first.event_id]
        any_store.consume_events([first.event_id], "turn")
        assert any_store.accept_event(key, repeat) == first.event_id  # consumed: still known

    def test_withdraw_frees_the_key(self, any_store):
        key = any_store.get_or_create_session(dm()).session_key
        refused = MessageEvent(source=dm("42", message_id="m1"), text="hi")
        any_store.accept_event(key, refused)
        assert any_store.withdraw_event(refused.event_id)
        assert any_store.pending_inbox() == []
        retry = MessageEvent(source=dm("42", message_id="m1"), text="hi")
        assert any_store.accept_event(key, retry) == retry.event_id
        any_store.consume_events([retry.event_id], "turn")
        assert not any_store.withdraw_event(retry.event_id)  # consumed rows stay

    def test_keys_survive_a_reopen(self, make_store):
        first = make_store()
        key = first.get_or_create_session(dm()).session_key
        event = MessageEvent(source=dm("42", message_id="m1"), text="hi")
        first.accept_event(key, event)
        first.close()
        repeat = MessageEvent(source=dm("42", message_id="m1"), text="hi")
        assert make_store().accept_event(key, repeat) == event.event_id


class TestTurnPathDelegations:
    """The facade's turn-path methods are bound straight to the parts that do the work:
    the same signatures as the documented methods, and the same behaviour."""

    NAMES = ("get", "session_key_for", "clear_resume_pending", "begin_turn",
             "begin_first_turn", "accept_event", "ledger_record", "ledger_finish_later")

    @pytest.mark.parametrize("name", NAMES)
    def test_same_signature_as_the_method(self, store, name):
        import inspect

        from hermes_actors.store.store import SessionStore

        documented = inspect.signature(getattr(SessionStore, name))
        bound = inspect.signature(getattr(store, name))
        assert list(bound.parameters.values()) == list(documented.parameters.values())[1:]

    def test_a_turn_through_them(self, store):
        source = dm("7")
        key = store.session_key_for(source)
        event = _event("hi", chat="7")
        assert store.accept_event(key, event) == event.event_id
        token, entry = store.begin_first_turn(key, source, user_message={
            "role": "user", "content": "hi"}, event_ids=[event.event_id])
        assert store.get(key).session_id == entry.session_id
        assert store.get(key).active_turn_token == token
        oid = store.ledger_record(session_key=key, platform="telegram", chat_id="7",
                                  thread_id=None, content="hello", kind="reply",
                                  token=token, clear_turn=True, claim=True)
        assert store.get(key).active_turn_token is None
        done = threading.Event()
        store.ledger_finish_later(oid, "delivered", on_done=done.set)
        assert done.wait(5)
        assert [row["state"] for row in store.ledger_rows(session_key=key)] == ["delivered"]
        assert store.pending_inbox() == []


class TestStoreClock:
    """``ts()`` and ``now()`` read the store's clock: a fake one in tests, the system's by
    default (then as C calls)."""

    def test_a_fake_clock(self, store, clock):
        assert store._core.ts() == clock.time()
        assert store._core.now().timestamp() == clock.time()
        assert store._core.now().tzinfo is not None

    def test_the_system_clock(self, make_store):
        import time

        store = make_store(clock=None)
        before = time.time()
        ts, now = store._core.ts(), store._core.now()
        after = time.time()
        assert before <= ts <= after
        assert before <= now.timestamp() <= after
        assert now.utcoffset().total_seconds() == 0


class TestConfigArgument:
    """``SessionStore(dir, config)`` takes a GatewayConfig (or None): a mapping given where
    ``load_config(...)`` was meant is refused at once, naming load_config, before anything
    is opened."""

    @pytest.mark.parametrize("config", [{"queue_max": 3}, "config.yaml"])
    def test_not_a_gateway_config(self, tmp_path, config):
        with pytest.raises(ConfigError, match=r"SessionStore\(config=...\).*load_config"):
            SessionStore(tmp_path / "sessions", config)
        assert list(tmp_path.iterdir()) == []
