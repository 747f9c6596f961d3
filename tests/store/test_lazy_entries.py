"""Routing entries are parsed on first use; recovery's work list is found without parsing all.

Also the batched store calls recovery and the ledger sweep use: ``settle_markers`` (one
transaction for every marker), ``turn_replies``, ``ledger_claim_many``/``ledger_finish_many``
and ``clear_resume_pending_many``.
"""

from __future__ import annotations

import json
import logging
import sqlite3

from hermes_actors.model.entry import SessionEntry
from hermes_actors.store.entrymap import EntryMap
from hermes_actors.store.routing import RoutingRow, entry_text, flags_of
from hermes_actors.store.turns import MarkerSettlement

from .conftest import dm


def _reopen(make_store, store):
    store.close()
    return make_store()


def _raw_routing(home, key: str, entry: dict, *, token: str | None = None) -> None:
    """Write a routing row as another tool might: the entry text as given, and a turn
    marker (``token``) in the flag columns only."""
    conn = sqlite3.connect(home / "state.db")
    with conn:
        conn.execute("INSERT OR REPLACE INTO routing (session_key, entry, updated_at,"
                     " active_turn_token, active_turn_started_at) VALUES (?, ?, 0, ?, ?)",
                     (key, json.dumps(entry), token, 1_700_000_000.0 if token else None))
    conn.close()


def _marked_and_closed(make_store) -> SessionEntry:
    """A session with a turn marker, in a store closed again; the marked entry."""
    store = make_store()
    entry = store.get_or_create_session(dm("1"))
    store.mark_turn_active(entry.session_key)
    marked = store.get(entry.session_key)
    store.close()
    return marked


class TestLazyLoading:
    def test_reopen_parses_nothing_until_used(self, make_store):
        store = make_store()
        entries = [store.get_or_create_session(dm(str(n))) for n in range(20)]
        store = _reopen(make_store, store)
        assert store.statistics().sessions == 20
        assert store.statistics().entries_parsed == 0
        assert store.get(entries[3].session_key) == entries[3]
        assert store.statistics().entries_parsed == 1
        assert sorted(e.session_key for e in store.list_sessions()) == sorted(
            e.session_key for e in entries)
        assert store.statistics().entries_parsed == 20

    def test_flagged_sessions_parse_only_marked_and_resumable(self, make_store):
        store = make_store()
        keys = [store.get_or_create_session(dm(str(n))).session_key for n in range(30)]
        store.mark_turn_active(keys[4])
        store.mark_resume_pending(keys[9], "restart_timeout")
        store = _reopen(make_store, store)
        flagged = store.flagged_sessions()
        assert [e.session_key for e in flagged] == [keys[4], keys[9]]
        assert flagged[0].active_turn_token is not None and flagged[1].resume_pending
        assert store.statistics().entries_parsed == 2

    def test_recovery_pass_finds_markers_without_parsing_everything(self, make_store, clock):
        store = make_store()
        keys = [store.get_or_create_session(dm(str(n))).session_key for n in range(30)]
        store.mark_turn_active(keys[7])
        store = _reopen(make_store, store)
        assert store.recover_interrupted_turns(3600) == 1
        assert store.get(keys[7]).resume_pending
        assert store.statistics().entries_parsed == 1

    def test_the_columns_decide_whatever_the_text_says(self, make_store, home):
        marked = _marked_and_closed(make_store)
        # the text claims no marker (and hides decoys in metadata); the columns hold one
        data = {**marked.to_dict(), "active_turn_token": None,
                "metadata": {"active_turn_token": None, "resume_pending": False}}
        _raw_routing(home, marked.session_key, data, token="t" * 32)
        store = make_store()
        assert [e.active_turn_token for e in store.flagged_sessions()] == ["t" * 32]

    def test_a_marker_only_in_the_text_is_not_one(self, make_store, home):
        marked = _marked_and_closed(make_store)
        _raw_routing(home, marked.session_key, marked.to_dict())  # no marker in the columns
        store = make_store()
        assert store.flagged_sessions() == []
        assert store.get(marked.session_key).active_turn_token is None

    def test_unusable_row_is_skipped_at_first_use_with_one_warning(self, make_store, home,
                                                                   caplog):
        store = make_store()
        good = store.get_or_create_session(dm("1"))
        store.close()
        bad_key = "agent:main:telegram:dm:666"
        _raw_routing(home, bad_key, {"session_key": bad_key, "session_id": "../../etc"})
        store = make_store()
        with caplog.at_level(logging.WARNING, logger="hermes_actors"):
            assert store.get(bad_key) is None
            assert store.get(bad_key) is None
            assert [e.session_key for e in store.list_sessions()] == [good.session_key]
        hits = [r for r in caplog.records if "skipping session entry" in r.getMessage()]
        assert len(hits) == 1 and bad_key in hits[0].getMessage()
        assert store.statistics().sessions == 1
        # the key is usable again: its next message creates a fresh session
        fresh = store.get_or_create_session(dm("666"))
        assert fresh.session_key == bad_key and fresh.session_id != "../../etc"


def _row(entry: SessionEntry) -> RoutingRow:
    return RoutingRow(entry.session_key, entry_text(entry), flags_of(entry))


class TestEntryMap:
    KEY = "agent:main:telegram:dm:1"

    def _entry(self, sid: str, **flags) -> SessionEntry:
        return SessionEntry(session_key=self.KEY, session_id=sid, **flags)

    def test_a_commit_during_a_lazy_fetch_wins(self):
        old = self._entry("20240101_000000_aaaa0001")
        new = self._entry("20240101_000000_aaaa0002")
        entries: EntryMap

        def fetch(key):
            entries.put(key, new, entry_text(new), flags_of(new))  # a commit lands meanwhile
            return _row(old)

        entries = EntryMap(fetch)
        entries.load({self.KEY: None}, [])
        assert entries.get(self.KEY) == new
        assert entries.get(self.KEY) == new

    def test_flags_follow_commits(self):
        entries = EntryMap()
        plain = self._entry("20240101_000000_aaaa0001")
        entries.load({}, [_row(plain)])
        assert entries.flagged() == []
        marked = self._entry("20240101_000000_aaaa0001", resume_pending=True)
        entries.put(self.KEY, marked, entry_text(marked), flags_of(marked))
        assert entries.flagged() == [marked]
        entries.put(self.KEY, plain, entry_text(plain), flags_of(plain))
        assert entries.flagged() == []
        entries.pop(self.KEY)
        assert len(entries) == 0 and entries.get(self.KEY) is None

    def test_rows_not_in_memory_are_fetched_once_on_first_use(self):
        rows = {f"agent:main:telegram:dm:{n}": _row(SessionEntry(
            session_key=f"agent:main:telegram:dm:{n}",
            session_id=f"20240101_000000_aaaa000{n}")) for n in range(3)}
        fetched = []

        def fetch(key):
            fetched.append(key)
            return rows.get(key)

        entries = EntryMap(fetch, lambda: list(rows.values()))
        entries.load(dict.fromkeys([*rows, "agent:main:telegram:dm:9"]), [])
        first = "agent:main:telegram:dm:0"
        assert entries.get(first).session_id == "20240101_000000_aaaa0000"
        assert entries.get(first) is entries.get(first) and fetched == [first]
        # a key whose row vanished is forgotten
        assert entries.get("agent:main:telegram:dm:9") is None
        assert len(entries) == 3
        # the mirror's view reads the rest in one pass, without parsing it
        assert entries.rows() == {k: (r.entry, r.flags) for k, r in rows.items()}
        assert entries.parsed == 1
        # a bulk pass needs no read per key
        assert len(entries.values()) == 3 and len(fetched) == 2

    def test_fill_never_overwrites_a_newer_row(self):
        entries = EntryMap()
        newer = self._entry("20240101_000000_aaaa0002")
        entries.load(dict.fromkeys([self.KEY, "agent:main:telegram:dm:2"]), [])
        entries.put(self.KEY, newer, entry_text(newer), flags_of(newer))
        stale = _row(self._entry("20240101_000000_aaaa0001"))
        assert entries.fill([stale]) == 1  # dm:2 still has no row
        assert entries.get(self.KEY) == newer
        assert entries.rows()[self.KEY] == (entry_text(newer), flags_of(newer))


class TestBatchedRecoveryCalls:
    def test_settle_markers_is_one_transaction(self, store):
        keys = [store.get_or_create_session(dm(str(n))).session_key for n in range(4)]
        tokens = [store.mark_turn_active(k) for k in keys]
        store.suspend_session(keys[3])
        before = store.db.statistics().group_calls
        owed = (dm("1"), "the reply", "recovered")
        settled = store.settle_markers([
            MarkerSettlement(keys[0], tokens[0], "restart_interrupted"),
            MarkerSettlement(keys[1], tokens[1], None, owed),
            MarkerSettlement(keys[2], "not-the-token", "restart_interrupted"),
            MarkerSettlement(keys[3], tokens[3], "restart_interrupted"),
        ])
        assert settled == 3
        assert store.db.statistics().group_calls == before + 1
        first, second, third, fourth = (store.get(k) for k in keys)
        assert first.resume_pending and first.resume_reason == "restart_interrupted"
        assert first.active_turn_token is None
        assert second.active_turn_token is None and not second.resume_pending
        assert third.active_turn_token == tokens[2]  # compare-and-swap refused
        assert fourth.active_turn_token is None and not fourth.resume_pending  # suspended
        rows = store.ledger_rows("pending")
        assert [(r["session_key"], r["content"], r["kind"]) for r in rows] == [
            (keys[1], "the reply", "recovered")]

    def test_settle_without_ledger_records_nothing(self, store):
        key = store.get_or_create_session(dm("1")).session_key
        token = store.mark_turn_active(key)
        store.settle_markers([MarkerSettlement(key, token, None, (dm("1"), "x", "recovered"))],
                             ledger_on=False)
        assert store.ledger_rows() == [] and store.get(key).active_turn_token is None

    def test_turn_replies_reads_every_turn_at_once(self, store):
        entries = [store.get_or_create_session(dm(str(n))) for n in range(3)]
        tokens = [store.mark_turn_active(e.session_key) for e in entries]
        for entry, token, text in zip(entries, tokens, ("a", "b", None), strict=True):
            store.append_message(entry.session_id, {"role": "user", "content": "q"},
                                 turn_token=token)
            if text is not None:
                store.append_message(entry.session_id, {"role": "assistant", "content": text},
                                     turn_token=token, is_reply=True)
        found = store.turn_replies([(e.session_id, t) for e, t in zip(entries, tokens,
                                                                        strict=True)])
        assert found == {(entries[0].session_id, tokens[0]): "a",
                         (entries[1].session_id, tokens[1]): "b"}

    def test_claim_and_finish_many(self, store):
        ids = [store.ledger_record(session_key=f"k{n}", platform="telegram", chat_id=str(n),
                                   thread_id=None, content="hi", kind="reply", token=f"t{n}")
               for n in range(3)]
        # the first row is being sent by this very boot already: not granted again
        assert store.ledger_claim(ids[0])
        granted = store.ledger_claim_many(ids)
        assert granted == set(ids[1:])
        store.ledger_finish_many([(ids[1], True, None), (ids[2], False, "boom")])
        states = {r["obligation_id"]: r["state"] for r in store.ledger_rows()}
        assert states == {ids[0]: "attempting", ids[1]: "delivered", ids[2]: "failed"}

    def test_clear_resume_pending_many(self, store):
        keys = [store.get_or_create_session(dm(str(n))).session_key for n in range(3)]
        store.mark_resume_pending(keys[0], "restart_timeout")
        store.mark_resume_pending(keys[1], "restart_timeout")
        assert store.clear_resume_pending_many([keys[0], keys[1], keys[2], keys[0], "nope"]) == 2
        assert not any(store.get(k).resume_pending for k in keys)


class TestPruneReadsOnlyOldRows:
    def test_prune_parses_only_the_candidates(self, make_store, clock):
        store = make_store()
        old = [store.get_or_create_session(dm(str(n))).session_key for n in range(3)]
        clock.advance(100 * 86400)
        fresh = [store.get_or_create_session(dm(str(n))).session_key for n in range(10, 30)]
        store = _reopen(make_store, store)
        assert store.prune_stale_entries(90) == 3
        assert store.statistics().entries_parsed == 0  # the three were parsed, then dropped
        assert store.statistics().sessions == len(fresh)
        assert all(store.get(k) is None for k in old)
