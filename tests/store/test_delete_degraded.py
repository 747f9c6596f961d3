"""A conversation deleted in degraded mode stays deleted (issue 39): the files backend
journals the delete before it removes files, a degraded start finishes a delete a crash cut
short, and the next start with the database applies it there too."""

from __future__ import annotations

import pytest

from hermes_actors.model.events import MessageEvent
from hermes_actors.store.backends.files.journal import DegradedJournal
from hermes_actors.store.ops import DeleteConversations

from .conftest import dm
from .test_degraded import _away, _back


def _jsonl(home, session_id: str):
    return home / "sessions" / f"{session_id}.jsonl"


def _conversation(store) -> tuple[str, str]:
    entry = store.get_or_create_session(dm())
    store.append_message(entry.session_id, {"role": "user", "content": "hello zanzibar"})
    store.accept_event(entry.session_key, MessageEvent(source=dm(), text="owed"))
    return entry.session_key, entry.session_id


class TestDeleteInDegradedMode:
    def test_a_delete_in_degraded_mode_reaches_the_database(self, make_store, home):
        healthy = make_store()
        key, old = _conversation(healthy)  # in the database
        healthy.close()
        _away(home)
        degraded = make_store()
        assert degraded.degraded
        degraded.append_message(old, {"role": "assistant", "content": "in jsonl"})
        counts = degraded.delete_session(key)
        assert counts is not None and counts["routing"] == 1 and counts["messages"] == 1
        assert degraded.get(key) is None and degraded.load_transcript(old) == []
        assert not _jsonl(home, old).exists()
        degraded.close()
        _back(home)
        healed = make_store()
        assert not healed.degraded
        assert healed.get(key) is None
        assert healed.load_transcript(old) == [] and healed.pending_inbox() == []
        assert healed.db.search("zanzibar") == []
        assert healed.get_or_create_session(dm()).session_id != old

    @pytest.mark.parametrize("degraded_restart", [True, False])
    def test_a_delete_cut_short_after_its_journal_line_is_finished(self, make_store, home,
                                                                   degraded_restart):
        make_store().close()  # a database, then put aside
        _away(home)
        degraded = make_store()
        key, sid = _conversation(degraded)
        degraded.close()
        # what a kill right after the journal line leaves: the routing in sessions.json and
        # the transcript file are still there
        DegradedJournal(home).append([DeleteConversations((key,), (sid,))])
        assert _jsonl(home, sid).exists()
        if degraded_restart:
            again = make_store()  # still degraded: the journal's replay finishes it
            assert again.degraded and again.get(key) is None
            assert not _jsonl(home, sid).exists() and again.pending_inbox() == []
            again.close()
        _back(home)
        # (else the degraded mirror still routes the key: the import drops that copy and
        # the transcript file left behind, instead of importing them)
        healed = make_store()
        assert healed.get(key) is None and healed.load_transcript(sid) == []
        assert not _jsonl(home, sid).exists() and healed.pending_inbox() == []
        healed.close()
        assert make_store().get(key) is None  # the rewritten mirror does not bring it back
