"""Deleting a conversation (issue 39): ``DELETE /v1/admin/sessions/<key>`` on a real gateway
(called as a WSGI application, through ``tests/wsgi_api.py``), and retention's sweep of idle
conversations driven by the gateway's fake clock."""

from __future__ import annotations

import logging
import threading
import zlib

import pytest
from wsgi_api import ADMIN, TOKEN, admin_api, admin_call, admin_path

from hermes_actors.runtime.deletion import RETENTION_BATCH, ConversationBusy
from hermes_actors.runtime.session_core import NOTHING_TO_STOP

DAY = 86400.0


def _rows(h, table: str, key: str) -> list[dict]:
    return [row for row in h.gw.store.db.rows(table) if row.get("session_key") == key]


def _messages(h, session_id: str) -> list[str]:
    return [m["content"] for m in h.gw.store.load_transcript(session_id)]


def _with_an_outbox_row(h, key: str) -> None:
    h.gw.store.outbox_append(session_key=key, platform="telegram", chat_id="42",
                             thread_id=None, text="for the outbox", kind="reply")


class TestDelete:
    def test_everything_of_the_conversation_goes_and_the_next_message_starts_afresh(
            self, make_harness):
        h = make_harness()
        api = admin_api(h.gw)
        h.send("hello zanzibar")
        h.send("kept zanzibar", chat_id="1")
        h.idle()
        h.gw.store.reset_session(h.key())  # an earlier session of the key goes too
        h.send("again zanzibar")
        h.idle()
        h.hold("g", command="wait")  # a running turn ...
        h.send("/queue later")  # ... and a queued message, still in the inbox
        h.handled()
        _with_an_outbox_row(h, h.key())
        entry = h.gw.store.get(h.key())
        old = entry.prev_session_id
        assert _rows(h, "inbox", h.key()) and _rows(h, "deliveries", h.key())

        status, body = admin_call(api, admin_path(h.key()), method="DELETE")
        assert status == 200, body
        assert (body["session_key"], body["session_id"]) == (h.key(), entry.session_id)
        deleted = body["deleted"]
        assert deleted["routing"] == 1 and deleted["sessions"] == 2
        assert deleted["messages"] >= 5 and deleted["outbox"] == 1
        assert deleted["inbox"] >= 4 and deleted["deliveries"] >= 2

        store = h.gw.store
        assert store.get(h.key()) is None
        assert _messages(h, entry.session_id) == [] and _messages(h, old) == []
        assert {hit["session_id"] for hit in store.db.search("zanzibar")} == {
            store.get(h.key("1")).session_id}
        for table in ("inbox", "deliveries", "outbox", "routing"):
            assert _rows(h, table, h.key()) == [], table
        assert {row["id"] for row in store.db.rows("sessions")} == {
            store.get(h.key("1")).session_id}
        assert admin_call(api, admin_path(h.key()))[0] == 404
        assert admin_call(api, admin_path(h.key()), method="DELETE")[0] == 404
        assert "later" not in " ".join(h.texts())  # the queued message died unanswered

        h.gates.open_all()  # (the stopped turn's gate: nothing waits on it any more)
        h.send("fresh start")
        h.idle()
        fresh = store.get(h.key())
        assert fresh.session_id not in (entry.session_id, old)
        assert _messages(h, fresh.session_id) == ["fresh start", "echo: fresh start"]
        assert h.gw.session_statistics(h.key()).turns == 1  # a new actor: no stale state

    def test_a_running_turn_is_stopped_first(self, make_harness):
        h = make_harness()
        api = admin_api(h.gw)
        h.hold("g", command="wait")
        agent = h.agents[-1]
        assert h.gw.session_statistics(h.key()).running
        status, _ = admin_call(api, admin_path(h.key()), method="DELETE")
        assert status == 200
        assert agent._interrupted.is_set()  # stopped as /stop does, then deleted
        assert agent.closed  # the cached agent is discarded
        assert h.gw.session_statistics(h.key()) is None  # its actor is gone
        h.idle()
        assert h.gw.store.get(h.key()) is None
        assert h.gw.store.db.rows("deliveries") == []  # nothing owed is left to send

    def test_wrong_ingress_and_missing_tokens_delete_nothing(self, make_harness):
        h = make_harness()
        api = admin_api(h.gw)
        h.send("hello")
        h.idle()
        for token in ("wrong", TOKEN, None):
            assert admin_call(api, admin_path(h.key()), method="DELETE", token=token)[0] == 401
        assert h.gw.store.get(h.key()) is not None
        assert admin_call(admin_api(h.gw, admin=None), admin_path(h.key()), method="DELETE",
                          token=ADMIN)[0] == 404  # the routes are off
        assert admin_call(api, admin_path("agent:main:telegram:dm:nobody"),
                          method="DELETE")[0] == 404
        assert admin_call(api, admin_path(h.key()), method="PUT")[0] == 405


class TestWhileDeleting:
    def test_a_message_arriving_meanwhile_goes_with_the_conversation(self, make_harness,
                                                                      caplog):
        h = make_harness()
        h.hold("g")  # a "hold" turn ends only when its gate opens
        agent = h.agents[-1]
        deleted: list = []
        deleting = threading.Thread(target=lambda: deleted.append(
            h.gw.delete_session(h.key())))
        deleting.start()
        assert agent._interrupted.wait(10)  # the delete stopped the turn and waits for it
        with caplog.at_level(logging.INFO, logger="hermes_actors.gateway"):
            during = h.send("during")
        assert "event=dropped_with_deleted_conversation" in caplog.text
        h.gates.open_all()
        deleting.join(10)
        assert deleted and deleted[0]["inbox"] == 2  # the held turn's message and this one
        h.send("after")
        h.idle()
        assert h.texts() == ["echo: after"]  # "during" was never answered
        assert during not in [row["event_id"] for row in h.gw.store.db.rows("inbox")]
        assert _messages(h, h.gw.store.get(h.key()).session_id) == ["after", "echo: after"]


class TestDeleteRacingNew:
    """A ``/new`` whose worker is still resetting when the delete comes: the delete waits
    for it, so the reset cannot write the deleted routing entry back afterwards."""

    @staticmethod
    def _slow_reset(h) -> tuple[threading.Event, threading.Event]:
        resetting, release, reset = threading.Event(), threading.Event(), h.gw.store.reset_session

        def slow(key):
            resetting.set()
            assert release.wait(10)
            return reset(key)

        h.gw.store.reset_session = slow
        return resetting, release

    def test_the_delete_waits_for_the_reset_and_nothing_comes_back(self, make_harness):
        h = make_harness()
        h.send("hi")
        h.idle()
        resetting, release = self._slow_reset(h)
        h.send("/new")
        assert resetting.wait(10)
        deleted: list = []
        deleting = threading.Thread(target=lambda: deleted.append(
            h.gw.delete_session(h.key())))
        deleting.start()
        release.set()
        deleting.join(20)
        assert deleted and deleted[0]["routing"] == 1
        h.idle()
        store = h.gw.store
        assert store.get(h.key()) is None  # (the reset's new entry went with the rest)
        for table in ("routing", "deliveries", "inbox"):
            assert _rows(h, table, h.key()) == [], table

    def test_a_reset_that_does_not_end_in_time_keeps_everything(self, make_harness):
        h = make_harness()
        h.send("hi")
        h.idle()
        resetting, release = self._slow_reset(h)
        h.send("/new")
        assert resetting.wait(10)
        with pytest.raises(ConversationBusy):
            h.gw._deleter.delete([h.key()], turn_timeout=0.05)
        assert h.gw.store.get(h.key()) is not None  # nothing was deleted ...
        release.set()
        h.idle()
        entry = h.gw.store.get(h.key())  # ... and the /new went through
        assert entry is not None and entry.prev_session_id is not None


class TestDeleteAfterQueuedNotices:
    def test_a_notice_queued_before_the_delete_is_recorded_before_it(self, make_harness):
        """A notice the session's actor queued (here ``/stop``'s answer, behind a slow one
        of another chat on the same notice actor) would record its ledger row after the
        delete: the delete waits for it, or deletes nothing."""
        h = make_harness()
        pool = h.gw.services.notices
        bucket = zlib.crc32(h.key().encode()) % len(pool._refs)
        other = next(c for c in map(str, range(1000))
                     if c != "42" and zlib.crc32(h.key(c).encode()) % len(pool._refs) == bucket)
        h.send("hi")
        h.idle()
        sending, release = h.slow_send(NOTHING_TO_STOP)
        h.send("/stop", chat_id=other)
        assert sending.wait(10)  # the notice actor is busy with the other chat's answer
        h.send("/stop")  # this chat's answer waits behind it
        with pytest.raises(ConversationBusy):
            h.gw._deleter.delete([h.key()], turn_timeout=0.05)
        assert h.gw.store.get(h.key()) is not None  # nothing was deleted
        release.set()
        h.idle()
        assert h.gw.delete_session(h.key())["routing"] == 1  # the retry
        h.idle()
        assert _rows(h, "deliveries", h.key()) == []


class TestRetention:
    def test_idle_conversations_are_deleted_by_age_in_batches(self, make_harness, caplog):
        h = make_harness(retention={"days": 30})
        for chat in ("old1", "old2"):
            h.send("hi", chat_id=chat)
        h.idle()
        gone = h.gw.store.get(h.key("old1")).session_id
        h.clock.advance(20 * DAY)
        h.send("hi", chat_id="recent")
        h.idle()
        h.gw.store.suspend_session(h.key("old2"))  # pending: kept whatever its age
        h.clock.advance(11 * DAY)  # old1/old2 idle 31 days, recent 11
        with caplog.at_level(logging.INFO, logger="hermes_actors.retention"):
            h.gw.housekeeping_tick()
        keys = {e.session_key for e in h.gw.store.list_sessions()}
        assert keys == {h.key("old2"), h.key("recent")}
        assert _messages(h, gone) == []
        assert _messages(h, h.gw.store.get(h.key("recent")).session_id) == ["hi", "echo: hi"]
        [line] = [r.getMessage() for r in caplog.records if "retention" in r.getMessage()]
        assert "deleted=1" in line

    def test_a_batch_is_bounded_and_null_keeps_everything(self, make_harness):
        h = make_harness(retention={"days": 1})
        for n in range(3):  # 0 is the oldest
            h.send("hi", chat_id=str(n))
            h.idle()
            h.clock.advance(60)
        h.clock.advance(2 * DAY)
        assert h.gw._deleter.sweep(1, batch=2) == 2  # the oldest two
        assert [e.session_key for e in h.gw.store.list_sessions()] == [h.key("2")]
        assert RETENTION_BATCH == 100
        keep = make_harness(session_store_max_age_days=0)  # retention.days: null (default)
        keep.send("hi")
        keep.idle()
        kept = keep.gw.store.get(keep.key()).session_id
        keep.clock.advance(10_000 * DAY)
        keep.gw.housekeeping_tick()
        assert keep.gw.store.get(keep.key()).session_id == kept
        assert _messages(keep, kept) == ["hi", "echo: hi"]


    def test_a_pass_reads_a_bounded_number_of_the_longest_idle(self, make_harness,
                                                                monkeypatch):
        from hermes_actors.store import sessions

        monkeypatch.setattr(sessions, "_IDLE_READ_FLOOR", 2)  # 2 rows read a pass of 1
        h = make_harness(retention={"days": 1})
        for n in range(4):  # 0 is the oldest
            h.send("hi", chat_id=str(n))
            h.idle()
            h.clock.advance(60)
        h.clock.advance(2 * DAY)
        assert h.gw.store.idle_session_keys(1, 1) == [h.key("0")]
        for left in (["0", "1", "2", "3"], ["1", "2", "3"], ["2", "3"], ["3"], []):
            assert sorted(e.session_key for e in h.gw.store.list_sessions()) == [
                h.key(n) for n in left]
            assert h.gw._deleter.sweep(1, batch=1) == (1 if left else 0)


class TestRetentionRacingAMessage:
    """A message for a conversation retention has picked keeps it (retention never drops
    what a user sends, unlike an operator's delete)."""

    @staticmethod
    def _old_conversation(h) -> str:
        h.send("hi")
        h.idle()
        h.clock.advance(2 * DAY)
        return h.gw.store.get(h.key()).session_id

    @staticmethod
    def _after_picking(h, act) -> None:
        """Run ``act`` once retention has picked its keys (before it deletes any)."""
        pick, acted = h.gw.store.idle_session_keys, []

        def picked(days, limit):
            keys = pick(days, limit)
            if not acted:
                acted.append(act())
            return keys

        h.gw.store.idle_session_keys = picked

    def test_a_turn_begun_since_keeps_it_and_later_messages_are_answered(self, make_harness):
        h = make_harness(retention={"days": 1})
        kept = self._old_conversation(h)
        self._after_picking(h, lambda: h.hold("g"))
        assert h.gw._deleter.sweep(1) == 0
        h.gates.open_all()
        h.idle()
        h.send("after")
        h.idle()
        assert h.texts()[-1] == "echo: after"  # (the key was left marked as being deleted)
        assert h.gw.store.get(h.key()).session_id == kept

    def test_a_turn_ended_since_keeps_it(self, make_harness):
        h = make_harness(retention={"days": 1})
        kept = self._old_conversation(h)
        self._after_picking(h, lambda: (h.send("quick"), h.idle()))
        assert h.gw._deleter.sweep(1) == 0
        assert _messages(h, kept)[-2:] == ["quick", "echo: quick"]

    def test_a_message_arriving_while_it_is_being_deleted_spares_it(self, make_harness):
        h = make_harness(retention={"days": 1})
        kept = self._old_conversation(h)
        deleter, forget = h.gw._deleter, h.gw._deleter._forget_actor

        def message_first(key, timeout, only_idle):
            h.send("during")  # (the key is marked as being deleted by now)
            return forget(key, timeout, only_idle)

        deleter._forget_actor = message_first
        assert deleter.sweep(1) == 0
        h.idle()
        assert h.texts()[-1] == "echo: during"
        assert _messages(h, kept)[-2:] == ["during", "echo: during"]


class TestDeleteOnEveryBackend:
    """The same delete through a gateway on each store backend (PostgreSQL: its tsvector
    index loses the rows with their messages)."""

    @pytest.fixture
    def harness_store(self, every_backend):
        return every_backend

    def test_the_conversation_goes_and_the_others_stay(self, make_harness):
        h = make_harness()
        h.send("hello zanzibar")
        h.send("kept zanzibar", chat_id="1")
        h.idle()
        _with_an_outbox_row(h, h.key())
        gone = h.gw.store.get(h.key()).session_id
        status, body = admin_call(admin_api(h.gw), admin_path(h.key()), method="DELETE")
        assert status == 200 and body["deleted"]["messages"] == 2
        store = h.gw.store
        kept = store.get(h.key("1")).session_id
        assert store.get(h.key()) is None and _messages(h, gone) == []
        assert {hit["session_id"] for hit in store.db.search("zanzibar")} == {kept}
        for table in ("inbox", "deliveries", "outbox"):
            assert _rows(h, table, h.key()) == [], table
        assert _rows(h, "deliveries", h.key("1"))


class TestBusy:
    def test_a_turn_that_does_not_stop_in_time_leaves_everything(self, make_harness):
        h = make_harness()
        h.hold("g")  # a "hold" turn ignores interrupts until its gate opens
        entry = h.gw.store.get(h.key())
        with pytest.raises(ConversationBusy, match="nothing was deleted"):
            h.gw._deleter.delete([h.key()], turn_timeout=0.05)
        h.gates.open_all()
        h.idle()  # the stopped turn has ended (its actor, out of the router, waited for it)
        assert h.gw.store.get(h.key()).session_id == entry.session_id
        assert _messages(h, entry.session_id) == ["hold g"]  # stopped: no reply
        h.send("next")  # a new actor serves the key
        h.idle()
        assert _messages(h, entry.session_id)[-1] == "echo: next"
