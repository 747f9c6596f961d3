"""Degraded mode: without a usable state.db the store keeps serving from sessions.json + JSONL."""

from __future__ import annotations

import json
import logging
import os
import threading

import pytest

from hermes_actors.errors import StoreError, StoreRejectedError
from hermes_actors.model.events import MessageEvent
from hermes_actors.model.source import SessionSource
from hermes_actors.store import SessionDB, StoreUnavailableError
from hermes_actors.store.backends.files.mirror import DEGRADED_KEY

from .conftest import dm


def _break_as_directory(home):
    (home / "state.db").mkdir()


def _break_header(home):
    (home / "state.db").write_bytes(b"this is not a SQLite database\x00" * 200)


def _break_read_only(home):
    # The database would live on a filesystem nobody may create files on (root included).
    os.symlink("/proc/hermes-test-read-only/state.db", home / "state.db")


CAUSES = {
    "state.db is a directory": _break_as_directory,
    "corrupt header": _break_header,
    "read-only location": _break_read_only,
}


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "DEGRADED" in r.getMessage()]


def _mirror(home) -> dict:
    return json.loads((home / "sessions" / "sessions.json").read_text())


class TestOpenFailure:
    """Each cause of an unusable database gives one warning and a serving, durable store."""

    @pytest.mark.parametrize("cause", list(CAUSES))
    def test_serves_from_mirror_and_jsonl(self, make_store, home, caplog, cause):
        CAUSES[cause](home)
        with caplog.at_level(logging.WARNING, logger="hermes_actors"):
            store = make_store()
            assert store.degraded and store.db is None
            entry = store.get_or_create_session(dm())
            store.append_message(entry.session_id, {"role": "user", "content": "hello"})
            token = store.begin_turn(
                entry.session_key, entry.session_id, user_message={"role": "user", "content": "q"}
            )
            store.append_message(entry.session_id, {"role": "assistant", "content": "a"},
                                 turn_token=token, is_reply=True)  # fmt: skip
        assert len(_warnings(caplog)) == 1
        # the mirror is canonical: written on every change, no flush needed
        data = _mirror(home)
        assert list(data)[:2] == ["_README", DEGRADED_KEY]
        assert data[entry.session_key]["active_turn_token"] == token
        lines = (home / "sessions" / f"{entry.session_id}.jsonl").read_text().splitlines()
        assert len(lines) == 3
        assert [m["content"] for m in store.load_transcript(entry.session_id)] == [
            "hello", "q", "a",
        ]  # fmt: skip
        assert store.turn_reply(entry.session_id, token)["content"] == "a"
        assert store.clear_turn_active(entry.session_key, token)
        assert _mirror(home)[entry.session_key]["active_turn_token"] is None

    def test_a_first_turn_creates_the_session_in_degraded_mode(self, make_store, home):
        _break_as_directory(home)
        store = make_store()
        assert store.degraded
        key = store.session_key_for(dm())
        token, created = store.begin_first_turn(
            key, dm(), user_message={"role": "user", "content": "q"}, internal=True)
        marked = store.get(key)
        assert marked.session_id == created.session_id and marked.active_turn_token == token
        assert marked.active_turn_internal
        assert _mirror(home)[key]["active_turn_token"] == token
        assert [m["content"] for m in store.load_transcript(created.session_id)] == ["q"]

    def test_routing_survives_a_restart_in_degraded_mode(self, make_store, home):
        _break_as_directory(home)
        first = make_store()
        entry = first.get_or_create_session(dm())
        first.mark_resume_pending(entry.session_key, "restart_timeout")
        first.append_message(entry.session_id, {"role": "user", "content": "hello"})
        first.close()
        second = make_store()
        assert second.degraded
        assert second.get(entry.session_key).resume_reason == "restart_timeout"
        assert second.load_transcript(entry.session_id)[0]["content"] == "hello"

    def test_inbox_and_ledger_work_in_memory(self, make_store, home, caplog):
        _break_header(home)
        store = make_store()
        entry = store.get_or_create_session(dm())
        event = MessageEvent(source=dm(), text="hi")
        with caplog.at_level(logging.WARNING, logger="hermes_actors"):
            store.accept_event(entry.session_key, event)
            store.accept_event(entry.session_key, event)
            oid = store.ledger_record(session_key=entry.session_key, platform="telegram",
                                      chat_id="42", thread_id=None, content="x", kind="reply",
                                      token="t")  # fmt: skip
        assert [e.event_id for _, e in store.pending_inbox()] == [event.event_id]
        store.consume_events([event.event_id], "turn")
        assert store.pending_inbox() == []
        assert store.ledger_claim(oid)
        assert store.ledger_finish(oid, "delivered") == "delivered"
        assert sum("journaled in the home" in r.getMessage() for r in caplog.records) == 1

    def test_a_prune_in_degraded_mode_holds_across_a_degraded_restart(self, make_store, home,
                                                                        clock):
        _break_as_directory(home)
        store = make_store()
        entry = store.get_or_create_session(dm())
        event = MessageEvent(source=dm(), text="hi")
        store.accept_event(entry.session_key, event)
        store.consume_events([event.event_id], "turn")
        clock.advance(8 * 86400)
        assert store.inbox_prune(7) == 1
        store.close()
        again = make_store()  # still degraded: the journal is read back, its prune too
        assert again.degraded and again.backend.rows("inbox") == []

    def test_an_accepted_event_waits_across_degraded_and_healed_starts(self, make_store, home):
        _break_as_directory(home)
        first = make_store()
        entry = first.get_or_create_session(dm())
        kept, done = MessageEvent(source=dm(), text="kept"), MessageEvent(source=dm(), text="x")
        first.accept_event(entry.session_key, kept)
        first.accept_event(entry.session_key, done)
        first.consume_events([done.event_id], "turn")
        first.close()
        second = make_store()  # still degraded: the journal is read back
        assert second.degraded
        assert [e.event_id for _, e in second.pending_inbox()] == [kept.event_id]
        second.close()
        (home / "state.db").rmdir()
        healed = make_store()
        assert not healed.degraded
        assert [e.event_id for _, e in healed.pending_inbox()] == [kept.event_id]
        healed.consume_events([kept.event_id], "turn")
        healed.close()
        assert make_store().pending_inbox() == []  # imported once

    def test_outbox_rows_keep_their_cursors_across_degraded_and_healed_starts(
            self, make_store, home):
        def append(store, text):
            return store.outbox_append(session_key="k", platform="webhook", chat_id="42",
                                       thread_id=None, text=text, kind="reply",
                                       floor=store.outbox_head())

        _break_as_directory(home)
        first = make_store()
        one, two = append(first, "one"), append(first, "two")
        first.close()
        second = make_store()  # still degraded: the journal is read back
        assert [r["cursor"] for r in second.outbox_read("webhook", "42")] == [one, two]
        three = append(second, "three")
        assert three > two
        second.close()
        (home / "state.db").rmdir()
        healed = make_store()
        assert not healed.degraded
        rows = healed.outbox_read("webhook", "42")
        assert [(r["cursor"], r["text"]) for r in rows] == [(one, "one"), (two, "two"),
                                                             (three, "three")]
        assert append(healed, "four") > three
        healed.close()
        assert len(make_store().outbox_read("webhook", "42")) == 4  # imported once

    def test_a_reply_appended_with_its_outcome_is_imported_once(self, make_store, home):
        # The outbox's exactly-once append (the row and the ledger's delivered in one op)
        # is journaled as that one op; the import decides it as degraded mode did.
        _break_as_directory(home)
        degraded = make_store()
        oids = [degraded.ledger_record(session_key="k", platform="webhook", chat_id="42",
                                       thread_id=None, content=text, kind="reply", token=text,
                                       claim=True) for text in ("sent", "taken over")]
        assert degraded.ledger_claim(oids[1], owner=("other-node", "other-boot"))
        appended = [degraded.outbox_append(session_key="k", platform="webhook", chat_id="42",
                                           thread_id=None, text=text, kind="reply",
                                           obligation_id=oid)
                    for text, oid in zip(("sent", "taken over"), oids, strict=True)]
        assert appended[0] is not None and appended[1] is None
        degraded.close()
        (home / "state.db").rmdir()
        healed = make_store()
        assert not healed.degraded
        assert [(r["cursor"], r["text"]) for r in healed.outbox_read("webhook", "42")] == [
            (appended[0], "sent")]
        states = {r["obligation_id"]: (r["state"], r["owner_node"])
                  for r in healed.ledger_rows()}
        assert states[oids[0]][0] == "delivered"
        assert states[oids[1]] == ("attempting", "other-node")

    def test_a_retry_answered_in_degraded_mode_is_not_replayed_from_the_database(
            self, make_store, home):
        """A message accepted before the database failed (and never answered: a crash), sent
        again by its client with the same message_id and answered in degraded mode, is done
        with: the next start with the database does not replay the first copy."""
        healthy = make_store()
        key = healthy.session_key_for(dm())
        first = MessageEvent(source=dm(message_id="m1"), text="hello")
        healthy.accept_event(key, first)
        healthy.close()
        (home / "state.db").rename(home / "state.db.away")
        _break_as_directory(home)
        degraded = make_store()
        retry = MessageEvent(source=dm(message_id="m1"), text="hello")  # the client's retry
        assert degraded.accept_event(key, retry) == retry.event_id  # (it cannot see the first)
        degraded.consume_events([retry.event_id], "turn")  # answered in degraded mode
        degraded.close()
        (home / "state.db").rmdir()
        (home / "state.db.away").rename(home / "state.db")
        healed = make_store()
        assert not healed.degraded
        assert healed.pending_inbox() == []

    def test_recovery_imports_jsonl_and_mirror_into_a_working_database(self, make_store, home):
        _break_as_directory(home)
        degraded = make_store()
        entry = degraded.get_or_create_session(dm())
        degraded.append_message(entry.session_id, {"role": "user", "content": "from degraded"})
        degraded.mark_resume_pending(entry.session_key, "shutdown_timeout")
        degraded.close()
        (home / "state.db").rmdir()
        healed = make_store()
        assert not healed.degraded
        assert healed.get(entry.session_key).resume_reason == "shutdown_timeout"
        assert healed.load_transcript(entry.session_id)[0]["content"] == "from degraded"
        assert not (home / "sessions" / f"{entry.session_id}.jsonl").exists()
        assert {r.session_key for r in healed.db.routing_rows()} == {entry.session_key}
        healed.flush()
        assert DEGRADED_KEY not in _mirror(home)
        healed.close()
        assert len(make_store().load_transcript(entry.session_id)) == 1  # imported once


class TestDegradedEdges:
    def test_a_corrupt_mirror_found_by_a_degraded_start_is_kept_aside_with_its_time(
            self, make_store, home):
        import time

        _break_as_directory(home)
        (home / "sessions").mkdir()
        (home / "sessions" / "sessions.json").write_text("[1, 2")
        store = make_store()
        assert store.degraded
        [copy] = (home / "sessions").glob("sessions.json.corrupt-*")
        assert copy.name.startswith(f"sessions.json.corrupt-{time.gmtime().tm_year}"), copy.name

    def test_a_name_no_file_can_hold_is_refused_and_the_mirror_lives_on(self, make_store,
                                                                        home):
        _break_as_directory(home)
        store = make_store()
        assert store.degraded
        with pytest.raises(StoreError, match="write rejected"):
            store.get_or_create_session(SessionSource("telegram", chat_id="bad", user_id="7",
                                                      user_name="broken \ud83d"))
        entry = store.get_or_create_session(dm("good"))
        assert entry.session_key in _mirror(home)  # sessions.json is still written


class TestHistoryAcrossAFailOver:
    def test_a_turn_begun_before_the_switch_sees_only_what_came_before_it(self, make_store):
        store = make_store()
        entry = store.get_or_create_session(dm())
        store.append_message(entry.session_id, {"role": "user", "content": "earlier"})
        token = store.begin_turn(entry.session_key, entry.session_id,
                                 user_message={"role": "user", "content": "the question"})
        store.db.sql("PRAGMA query_only = 1")
        store.get_or_create_session(dm("99"))  # another session's write fails: degraded
        assert store.degraded
        store.append_message(entry.session_id, {"role": "assistant", "content": "a tool"},
                             turn_token=token)
        history = store.load_transcript(entry.session_id, before_turn=token)
        assert [m["content"] for m in history] == ["earlier"]

    def test_a_turn_begun_after_the_switch_sees_the_whole_earlier_transcript(self,
                                                                            make_store):
        store = make_store()
        entry = store.get_or_create_session(dm())
        store.append_message(entry.session_id, {"role": "user", "content": "earlier"})
        store.db.sql("PRAGMA query_only = 1")
        store.get_or_create_session(dm("99"))
        store.append_message(entry.session_id, {"role": "user", "content": "degraded"})
        token = store.begin_turn(entry.session_key, entry.session_id,
                                 user_message={"role": "user", "content": "the question"})
        history = store.load_transcript(entry.session_id, before_turn=token)
        assert [m["content"] for m in history] == ["earlier", "degraded"]


class TestBackFromDegradedMode:
    """At the first start with a working database the degraded mirror is imported once, and
    only what degraded mode changed wins over the database's rows."""

    @pytest.mark.parametrize("write_mirror", [True, False], ids=["mirror-on", "mirror-off"])
    def test_a_new_after_the_import_is_not_undone_by_a_later_start(self, make_store, home,
                                                                   write_mirror):
        from hermes_actors import load_config

        config = load_config({"write_sessions_json": write_mirror}, env={})
        _break_as_directory(home)
        degraded = make_store(config=config)
        old = degraded.get_or_create_session(dm())
        degraded.close()
        (home / "state.db").rmdir()
        healed = make_store(config=config)  # imports the degraded mirror
        assert not healed.degraded and healed.get(old.session_key) is not None
        mirror = home / "sessions" / "sessions.json"
        assert not mirror.exists() or DEGRADED_KEY not in json.loads(mirror.read_text())
        new = healed.reset_session(old.session_key)  # /new, in the database
        healed.close()
        assert make_store(config=config).get(old.session_key).session_id == new.session_id

    def test_an_entry_degraded_mode_did_not_change_loses_to_a_newer_row(self, make_store,
                                                                        home):
        store = make_store()
        old = store.get_or_create_session(dm())
        store.flush()
        mirror = home / "sessions" / "sessions.json"
        lagging = mirror.read_bytes()  # what the mirror held when the process died
        new = store.reset_session(old.session_key)  # committed to state.db
        store.close()
        mirror.write_bytes(lagging)  # (the crash came before the mirror's next write)
        (home / "state.db").rename(home / "state.db.away")
        _break_as_directory(home)
        degraded = make_store()  # seeded from the lagging mirror
        assert degraded.degraded
        other = degraded.get_or_create_session(dm("other"))  # only another chat talks
        degraded.close()
        (home / "state.db").rmdir()
        (home / "state.db.away").rename(home / "state.db")
        healed = make_store()
        assert healed.get(old.session_key).session_id == new.session_id  # /new kept
        assert healed.get(other.session_key).session_id == other.session_id  # imported


class TestSessionRowsAcrossDegradedMode:
    """What degraded mode changes in the ``sessions`` table (a session's end and reason, its
    successor, token counts) reaches the database at the next start, once."""

    @staticmethod
    def _sessions(store) -> dict[str, dict]:
        return {row["id"]: row for row in store.db.rows("sessions")}

    def _degraded_run(self, make_store, home):
        store = make_store()
        old = store.get_or_create_session(dm())
        store.update_session(old.session_key, input_tokens=3, output_tokens=4)
        store.close()
        (home / "state.db").rename(home / "state.db.away")
        _break_as_directory(home)
        degraded = make_store()
        assert degraded.degraded
        degraded.update_session(old.session_key, 17, input_tokens=10, output_tokens=20)
        new = degraded.reset_session(old.session_key)  # /new in degraded mode
        degraded.update_session(new.session_key, input_tokens=1, output_tokens=2)
        degraded.close()
        (home / "state.db").rmdir()
        (home / "state.db.away").rename(home / "state.db")
        return old, new

    def test_ends_successors_and_tokens_reach_the_database(self, make_store, home):
        old, new = self._degraded_run(make_store, home)
        rows = self._sessions(make_store())
        assert rows[old.session_id]["end_reason"] == "session_reset"
        assert rows[old.session_id]["ended_at"] is not None
        assert (rows[old.session_id]["input_tokens"], rows[old.session_id]["output_tokens"],
                rows[old.session_id]["last_prompt_tokens"]) == (13, 24, 17)
        assert rows[new.session_id]["parent_session_id"] == old.session_id
        assert (rows[new.session_id]["input_tokens"],
                rows[new.session_id]["output_tokens"]) == (1, 2)
        assert not (home / "degraded.journal").exists()

    def test_a_crash_before_the_journal_is_set_aside_adds_no_tokens_twice(self, make_store,
                                                                          home):
        old, _ = self._degraded_run(make_store, home)
        journal = home / "degraded.journal"
        kept = journal.read_bytes()
        make_store().close()  # applies the journal, then sets it aside
        journal.write_bytes(kept)  # as if the process died before the rename
        row = self._sessions(make_store())[old.session_id]
        assert (row["input_tokens"], row["output_tokens"]) == (13, 24)
        assert not journal.exists()

    def test_a_journal_torn_in_its_first_write_is_set_aside(self, make_store, home):
        journal = home / "degraded.journal"
        journal.write_bytes(b'{"jour')  # a crash tore the first write
        _break_as_directory(home)
        degraded = make_store()
        entry = degraded.get_or_create_session(dm())
        degraded.update_session(entry.session_key, input_tokens=5)
        degraded.close()
        (home / "state.db").rmdir()
        row = self._sessions(make_store())[entry.session_id]
        assert row["input_tokens"] == 5
        assert (home / "degraded.journal.torn").read_bytes() == b'{"jour'


class TestWriteFailureAfterOpen:
    """A database that stops accepting writes switches the store to degraded, losing nothing."""

    def test_switches_and_keeps_the_change(self, make_store, home, caplog):
        store = make_store()
        entry = store.get_or_create_session(dm())
        store.append_message(entry.session_id, {"role": "user", "content": "before"})
        db = store.db
        db.sql("PRAGMA query_only = 1")
        with caplog.at_level(logging.WARNING, logger="hermes_actors"):
            assert store.mark_resume_pending(entry.session_key, "restart_timeout")
            store.append_message(entry.session_id, {"role": "user", "content": "after"})
        assert store.degraded and store.db is None
        assert len(_warnings(caplog)) == 1
        assert _mirror(home)[entry.session_key]["resume_reason"] == "restart_timeout"
        assert [m["content"] for m in store.load_transcript(entry.session_id)] == [
            "before", "after",
        ]  # fmt: skip

    @pytest.mark.parametrize("message, turn_token", [
        ({"role": "user", "content": "hi"}, object()),  # a value no column can take
        ({"role": "user", "content": "a lone surrogate \ud83d"}, None),
        ({"role": "user", "content": "x", "token_count": 2**64}, None),  # over 64 bits
    ], ids=["unbindable", "unencodable", "overflow"])
    def test_a_write_of_a_bad_value_fails_alone(self, make_store, message, turn_token):
        # the list is rejected with StoreRejectedError (a retry is refused the same way);
        # the database stays in use (no failover: degraded mode would only fail the same way)
        store = make_store()
        entry = store.get_or_create_session(dm())
        with pytest.raises(StoreRejectedError) as raised:
            store.append_message(entry.session_id, message, turn_token=turn_token)
        assert not isinstance(raised.value, StoreUnavailableError)
        assert "write rejected" in str(raised.value)
        assert not store.degraded
        store.append_message(entry.session_id, {"role": "user", "content": "after"})
        assert [m["content"] for m in store.load_transcript(entry.session_id)] == ["after"]

    def test_entries_not_read_yet_are_kept_in_the_degraded_mirror(self, make_store, home):
        store = make_store()
        entries = [store.get_or_create_session(dm(str(n))) for n in range(5)]
        store.close()
        store = make_store()  # reopened: no entry read yet
        db = store.db
        db.sql("PRAGMA query_only = 1")
        assert store.mark_resume_pending(entries[0].session_key, "restart_timeout")
        assert store.degraded
        mirror = _mirror(home)
        assert {e.session_key for e in entries} <= mirror.keys()
        assert store.get(entries[3].session_key) == entries[3]
        assert mirror[entries[0].session_key]["resume_reason"] == "restart_timeout"

    def test_unreadable_database_falls_back_to_the_last_mirror(self, make_store, home,
                                                                monkeypatch):
        store = make_store()
        entries = [store.get_or_create_session(dm(str(n))) for n in range(3)]
        store.close()  # writes sessions.json
        store = make_store()
        db = store.db

        def unreadable():
            raise StoreError("disk I/O error")

        monkeypatch.setattr(db, "routing_rows", unreadable)
        db.sql("PRAGMA query_only = 1")
        assert store.mark_resume_pending(entries[0].session_key, "restart_timeout")
        assert store.degraded
        assert store.get(entries[2].session_key) == entries[2]
        assert {e.session_key for e in entries} <= _mirror(home).keys()

    def test_given_database_is_not_closed_by_the_store(self, make_store, home):
        db = SessionDB(home / "state.db")
        store = make_store(db=db)
        store.get_or_create_session(dm())
        store.close()
        assert db.counts()["sessions"] == 1
        db.close()


class TestLazyEntriesAcrossASwitch:
    """Entries not read yet survive every way the database can fail under them."""

    def _reopened(self, make_store, n=3):
        store = make_store()
        entries = [store.get_or_create_session(dm(str(i))) for i in range(n)]
        store.close()
        return make_store(), entries

    def test_a_read_during_the_switch_waits_for_it_and_loses_nothing(self, make_store):
        store, old = self._reopened(make_store)
        db = store.db
        inside, go = threading.Event(), threading.Event()
        real_load = db.routing_rows

        def slow_load():  # the failing database still reads, slowly
            inside.set()
            go.wait(10)
            return real_load()

        def broken(key):
            raise StoreUnavailableError("disk I/O error")

        db.routing_rows = slow_load
        db.routing_row = broken
        switcher = threading.Thread(target=store.get, args=(old[0].session_key,))
        switcher.start()
        assert inside.wait(10)
        seen: list = []
        reader = threading.Thread(target=lambda: seen.append(store.get(old[1].session_key)))
        reader.start()
        go.set()
        switcher.join(10)
        reader.join(10)
        assert store.degraded
        assert seen in ([old[1]], [None])  # it may read before or after the switch...
        assert store.get(old[1].session_key) == old[1]  # ...but the entry is never dropped
        assert store.get_or_create_session(dm("1")).session_id == old[1].session_id

    def test_a_failing_read_inside_the_mirror_flush_retries_later(self, make_store, caplog):
        store, old = self._reopened(make_store)
        store.get_or_create_session(dm("99"))  # the mirror is dirty
        db = store.db
        db.sql("ALTER TABLE routing RENAME TO gone")
        done = threading.Event()
        threading.Thread(target=lambda: (store.flush(), done.set()), daemon=True).start()
        assert done.wait(10), "the flush must not hang"
        assert not store.degraded  # a mirror write never switches modes
        assert store.statistics().mirror_dirty

    def test_a_failure_while_loading_keeps_every_entry(self, make_store, home, monkeypatch):
        store, old = self._reopened(make_store)
        store.close()
        # a hand-added mirror entry makes the next load commit (restore) to a failing db
        mirror = json.loads((home / "sessions" / "sessions.json").read_text())
        extra = dict(mirror[old[0].session_key], session_key="agent:main:telegram:dm:77",
                     session_id="20240101_000000_aaaa0077")
        mirror["agent:main:telegram:dm:77"] = extra
        (home / "sessions" / "sessions.json").write_text(json.dumps(mirror))
        real_apply = SessionDB.apply

        def failing_apply(self, ops):
            raise StoreUnavailableError("disk I/O error")

        monkeypatch.setattr(SessionDB, "apply", failing_apply)
        store = make_store()
        monkeypatch.setattr(SessionDB, "apply", real_apply)
        assert store.degraded
        assert [store.get(e.session_key) for e in old] == old
        assert {e.session_key for e in old} <= _mirror(home).keys()


class TestOutboxCursorsAcrossAFailOver:
    """A process that switches to degraded mode before it appended or read anything (a
    fresh start whose writer dies) still numbers its replies above the database's rows."""

    def test_a_reply_after_the_switch_gets_a_cursor_no_reader_saw(self, make_store):
        from hermes_actors.adapters.outbox import Outbox

        target = SessionSource("webhook", chat_id="42", user_id="7")
        earlier = make_store()
        cursors = [Outbox(lambda: earlier).append(target, f"r{n}") for n in range(3)]
        earlier.close()
        store = make_store()  # the next process: its Outbox has seen no cursor yet
        store.db.sql("PRAGMA query_only = 1")  # the database stops taking writes
        late = Outbox(lambda: store).append(target, "after the switch")
        assert store.degraded
        # a long-poll reader that had read up to the last cursor sees the new reply
        assert [r["text"] for r in store.outbox_read("webhook", "42", cursors[-1])] == [
            "after the switch"]
        assert late > cursors[-1]
        store.close()
        healed = make_store()
        assert not healed.degraded
        assert [r["text"] for r in healed.outbox_read("webhook", "42")] == [
            "r0", "r1", "r2", "after the switch"]


    def test_a_reply_of_a_start_that_could_not_read_the_database_keeps_its_cursor(
            self, make_store, home):
        # a start that never could read the database (degraded from the first moment)
        # numbers its replies above the clock, so above the database's rows: the import
        # keeps them. (Before issue 36, it numbered them from 1 and the import numbered them
        # anew, so a reader that read the reply read it again under its new cursor.)
        from hermes_actors.adapters.outbox import Outbox

        target = SessionSource("webhook", chat_id="42", user_id="7")
        earlier = make_store()
        cursors = [Outbox(lambda: earlier).append(target, f"r{n}") for n in range(3)]
        earlier.close()
        (home / "state.db").rename(home / "state.db.away")
        _break_as_directory(home)
        degraded = make_store()
        assert degraded.degraded
        late = Outbox(lambda: degraded).append(target, "from degraded mode")
        assert cursors[-1] < late < 2**53
        degraded.close()
        (home / "state.db").rmdir()
        (home / "state.db.away").rename(home / "state.db")
        rows = make_store().outbox_read("webhook", "42", cursors[-1])
        assert [(r["cursor"], r["text"]) for r in rows] == [(late, "from degraded mode")]


def _append(store, text: str, chat: str = "42") -> int:
    return store.outbox_append(session_key="k", platform="webhook", chat_id=chat,
                               thread_id=None, text=text, kind="reply")


def _read(store, after: int = 0, chat: str = "42") -> list[tuple[int, str]]:
    return [(r["cursor"], r["text"]) for r in store.outbox_read("webhook", chat, after)]


def _away(home) -> None:
    """Put the good database aside (state.db.away) and leave an unusable one in its place:
    a degraded start that cannot read the database at all."""
    os.replace(home / "state.db", home / "state.db.away")
    for suffix in ("-wal", "-shm"):
        if (home / f"state.db{suffix}").exists():
            os.replace(home / f"state.db{suffix}", home / f"state.db.away{suffix}")
    _break_header(home)


def _back(home) -> None:
    """The good database back in place."""
    os.replace(home / "state.db.away", home / "state.db")
    for suffix in ("-wal", "-shm"):
        if (home / f"state.db.away{suffix}").exists():
            os.replace(home / f"state.db.away{suffix}", home / f"state.db{suffix}")


class TestDegradedCursorsAreStable:
    """Issue 36, item 6: a reply a client read in degraded mode keeps its cursor once the
    database is back, so a client resuming ``after=c`` neither reads a reply again nor
    misses one; degraded cursors are drawn above the clock in microseconds, above every
    cursor a database handed out, even when the degraded run could not read it."""

    def test_replies_read_in_degraded_mode_keep_their_cursors_after_the_import(
            self, make_store, home):
        healthy = make_store()
        before = [_append(healthy, f"db{n}") for n in range(3)]
        assert _read(healthy) == [(c, f"db{n}") for n, c in enumerate(before)]
        healthy.close()
        _away(home)  # state.db unusable from the start of the degraded run
        degraded = make_store()
        assert degraded.degraded
        [_append(degraded, f"d{n}") for n in range(3)]
        read = _read(degraded, before[-1])  # what a client read, cursors c1..cn
        assert [t for _, t in read] == ["d0", "d1", "d2"]
        cursors = [c for c, _ in read]
        assert before[-1] < cursors[0] < cursors[1] < cursors[2] < 2**53
        degraded.close()
        _back(home)
        healed = make_store()
        assert not healed.degraded
        # the same rows under the same cursors, after the database's own
        assert _read(healed) == [(c, f"db{n}") for n, c in enumerate(before)] + read
        # a client resuming after cn reads nothing again, then only what comes after
        assert _read(healed, cursors[-1]) == []
        later = _append(healed, "after")
        assert later > cursors[-1]
        assert _read(healed, cursors[-1]) == [(later, "after")]
        # a client that read up to the database's last cursor before gets every degraded row
        assert _read(healed, before[-1]) == [*read, (later, "after")]
        assert _read(healed, cursors[0]) == [*read[1:], (later, "after")]
        healed.close()
        again = make_store()  # imported once; cursors go on above the imported ones
        assert _read(again) == [(c, f"db{n}") for n, c in enumerate(before)] + read + [
            (later, "after")]
        assert _append(again, "next") > later

    def test_the_database_holds_cursors_the_degraded_run_could_not_see(
            self, make_store, home, monkeypatch):
        # A first degraded run's replies are imported, but the start crashes before setting
        # the journal aside; that healed run goes on numbering replies above the imported
        # ones. The database then becomes unreadable: a second degraded run reads only the
        # journal back (its highest cursor is the first run's), while the database holds
        # higher cursors. Its replies must still be numbered above them and keep their
        # cursors at the next import.
        from hermes_actors.store.backends.files.journal import DegradedJournal

        make_store().close()
        _away(home)
        first = make_store()
        assert first.degraded
        d1 = _append(first, "degraded 1")
        first.close()
        _back(home)
        with monkeypatch.context() as patched:  # the journal is never set aside
            patched.setattr(DegradedJournal, "retire", lambda self: None)
            healed = make_store()
            assert not healed.degraded
            assert _read(healed) == [(d1, "degraded 1")]
            h = [_append(healed, f"healthy {n}") for n in range(3)]
            assert d1 < h[0] < h[1] < h[2]
            healed.close()
        assert (home / "degraded.journal").exists()
        _away(home)
        second = make_store()
        assert second.degraded
        assert second.outbox_head() == d1  # all it knows of
        d2 = _append(second, "degraded 2")
        assert d2 > h[-1]  # yet above what the database handed out meanwhile
        second.close()
        _back(home)
        final = make_store()
        assert not final.degraded
        assert _read(final) == [(d1, "degraded 1"), *((c, f"healthy {n}")
                                                      for n, c in enumerate(h)),
                                (d2, "degraded 2")]
        assert _read(final, h[-1]) == [(d2, "degraded 2")]
        assert _append(final, "last") > d2

    def test_a_fail_over_that_cannot_read_the_head_numbers_above_it(
            self, make_store, home, monkeypatch):
        # the database fails at run time and its outbox head cannot be read either: the
        # process has seen no cursor (its Outbox's floor is 0), yet the database holds many
        healthy = make_store()
        before = [_append(healthy, f"db{n}") for n in range(5)]
        healthy.close()
        store = make_store()

        def unreadable():
            raise StoreError("disk I/O error")

        monkeypatch.setattr(store.db, "outbox_head", unreadable)
        store.db.sql("PRAGMA query_only = 1")
        late = _append(store, "after the switch")
        assert store.degraded
        assert late > before[-1]
        store.close()
        monkeypatch.undo()
        healed = make_store()
        assert not healed.degraded
        assert _read(healed, before[-1]) == [(late, "after the switch")]

    def test_a_clock_set_back_is_reported_and_no_row_is_numbered_anew(
            self, make_store, home, monkeypatch, caplog):
        # the one way a degraded cursor can meet the database's: a clock set back before
        # the first cursor the database handed out. The import says so and keeps the
        # cursors as they are; one a row here already has fails the import (the journal
        # stays for the next start), rather than being numbered anew and read twice
        from hermes_actors.store.backends.files import memory

        healthy = make_store()
        before = [_append(healthy, f"db{n}") for n in range(3)]
        healthy.close()
        _away(home)
        monkeypatch.setattr(memory, "_wall_clock", lambda: 1e-6)  # 1 microsecond
        degraded = make_store()
        taken = _append(degraded, "degraded")
        assert taken == 2
        degraded.close()
        _back(home)
        with caplog.at_level(logging.WARNING, logger="hermes_actors"):
            healed = make_store()
        assert not healed.degraded
        assert any("was the clock set back" in r.getMessage() for r in caplog.records
                   if r.levelno == logging.ERROR)
        assert _read(healed) == [(c, f"db{n}") for n, c in enumerate(before)]
        assert (home / "degraded.journal").exists()

    def test_cursors_of_a_degraded_run_follow_the_clock_and_stay_json_safe(self, home,
                                                                         monkeypatch):
        from hermes_actors.store.backends.files import memory
        from hermes_actors.store.backends.files.backend import FilesBackend
        from hermes_actors.store.backends.files.jsonl import JsonlTranscripts
        from hermes_actors.store.ops import OutboxAppend

        (home / "sessions").mkdir()

        def cursor_at(now: float) -> int:
            monkeypatch.setattr(memory, "_wall_clock", lambda: now)
            backend = FilesBackend(home, JsonlTranscripts(home / "sessions"))
            [cursor] = backend.apply([OutboxAppend("k", "webhook", "42", None, "x", "reply",
                                                   1.0)])
            backend.close()
            return cursor

        assert cursor_at(1_700_000_000.0) == 1_700_000_000_000_001
        # a later run, even with the clock set back, goes on above the journal's rows
        assert cursor_at(1_600_000_000.0) == 1_700_000_000_000_002
        # a clock centuries ahead: cursors stay below 2**53 (exact in JavaScript)
        (home / "degraded.journal").unlink()
        assert cursor_at(1e12) == memory.CURSOR_FLOOR_MAX + 1 < 2**53


_KILLED_AFTER_THE_IMPORT = """
import os, signal, sys
from hermes_actors.store import SessionStore
from hermes_actors.store.backends.files.journal import DegradedJournal

def die(self):  # the import committed: SIGKILL before the journal is set aside
    os.kill(os.getpid(), signal.SIGKILL)

DegradedJournal.retire = die
SessionStore(sys.argv[1])
"""


class TestAJournalImportedButNotSetAside:
    """A crash after the journal's import committed, before the file was renamed, followed
    by another degraded run: what that run appended must reach the database too."""

    def test_a_later_degraded_runs_accepted_message_is_not_lost(self, make_store, home):
        import subprocess
        import sys

        _break_as_directory(home)
        first = make_store()
        entry = first.get_or_create_session(dm())
        one = MessageEvent(source=dm(), text="one")
        first.accept_event(entry.session_key, one)
        first.close()
        (home / "state.db").rmdir()
        child = subprocess.run([sys.executable, "-c", _KILLED_AFTER_THE_IMPORT,
                                str(home / "sessions")], timeout=60)
        assert child.returncode == -9
        assert (home / "degraded.journal").exists()  # imported, not set aside
        aside = home / "state.db.away"
        os.replace(home / "state.db", aside)
        _break_as_directory(home)  # the database is away again: a degraded run
        second = make_store()
        assert second.degraded
        two = MessageEvent(source=dm(), text="two")
        second.accept_event(entry.session_key, two)
        second.consume_events([one.event_id], "turn")
        second.close()
        (home / "state.db").rmdir()
        os.replace(aside, home / "state.db")
        healed = make_store()
        assert not healed.degraded
        assert [e.event_id for _, e in healed.pending_inbox()] == [two.event_id]


_KILLED_BETWEEN_THE_WRITES = """
import os, signal, sys
from hermes_actors.model.events import MessageEvent
from hermes_actors.model.source import SessionSource
from hermes_actors.store import SessionStore
from hermes_actors.store.backends.files.journal import DegradedJournal

store = SessionStore(sys.argv[1])
assert store.degraded
entry = store.get_or_create_session(SessionSource("telegram", chat_id="42", user_id="7"))
token = store.begin_turn(entry.session_key, entry.session_id,
                         user_message={"role": "user", "content": "hello"})
journal_append = DegradedJournal.append

def append(self, ops):  # the reply's list: SIGKILL between its two fsyncs
    if any(getattr(op, "is_reply", False) for op in ops):
        os.kill(os.getpid(), signal.SIGKILL)
    journal_append(self, ops)

DegradedJournal.append = append
store.ledger_record(session_key=entry.session_key, platform="telegram", chat_id="42",
                    thread_id=None, content="the answer", kind="reply", token=token,
                    clear_turn=True, claim=True,
                    reply=(entry.session_id, {"role": "assistant", "content": "the answer"}))
"""


class TestAReplyKilledBetweenItsWrites:
    """A degraded reply's transcript line is written before its journal line: killed
    between the two, the reply is in the transcript, so the next start delivers it once (the
    turn marker finds it) instead of running the turn again on top of a redelivery."""

    def test_the_reply_is_in_the_transcript(self, make_store, home):
        import subprocess
        import sys

        _break_as_directory(home)
        child = subprocess.run([sys.executable, "-c", _KILLED_BETWEEN_THE_WRITES,
                                str(home / "sessions")], timeout=60)
        assert child.returncode == -9
        (home / "state.db").rmdir()
        healed = make_store()
        [entry] = healed.stored_entries()
        assert [m["content"] for m in healed.load_transcript(entry.session_id)] == [
            "hello", "the answer"]
        assert healed.ledger_rows() == []  # nothing owed twice: the marker's recovery sends it


class TestDegradedOutboxOrder:
    """Degraded mode numbers and stores its outbox rows in one order: a long-poll reader
    that read up to a cursor never finds a lower one appearing after it."""

    def test_a_reader_misses_no_reply_appended_while_another_was_written(self, home,
                                                                        monkeypatch):
        from hermes_actors.store.backends.files.backend import FilesBackend
        from hermes_actors.store.backends.files.journal import DegradedJournal
        from hermes_actors.store.backends.files.jsonl import JsonlTranscripts
        from hermes_actors.store.ops import OutboxAppend

        (home / "sessions").mkdir()
        backend = FilesBackend(home, JsonlTranscripts(home / "sessions"))

        def append(text: str) -> None:
            backend.apply([OutboxAppend("k", "webhook", "42", None, text, "reply", 1.0)])

        seen: list[tuple[int, str]] = []
        after = 0

        def poll() -> None:
            nonlocal after
            rows = backend.outbox_read("webhook", "42", after, 100)
            seen.extend((r["cursor"], r["text"]) for r in rows)
            if rows:
                after = rows[-1]["cursor"]

        original = DegradedJournal.append
        second = threading.Thread(target=append, args=("second",))
        second_done = threading.Event()

        def journal_append(self, ops):
            ops = list(ops)
            if any(getattr(op, "text", None) == "first" for op in ops):
                # the first reply is being written when the second one comes
                second.start()
                second_done.wait(timeout=1.0)  # (it must wait for the first, if it can)
                poll()  # a reader polls meanwhile
            original(self, ops)
            if any(getattr(op, "text", None) == "second" for op in ops):
                second_done.set()

        monkeypatch.setattr(DegradedJournal, "append", journal_append)
        append("first")
        second.join(timeout=10)
        assert not second.is_alive()
        poll()
        assert sorted(text for _, text in seen) == ["first", "second"]
        assert [c for c, _ in seen] == sorted(c for c, _ in seen)
