"""Op lists carry an id (``ops.ListId``) recorded in their transaction, so a list applied
again after an unknown outcome counts once: the database writer child dies after its COMMIT
and before its answer (crash point ``db_writer_after_commit``), the store fails the list over
to degraded mode (applied and journaled again), and the next start's journal import skips
what the database had committed."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from contextlib import closing

import pytest

from hermes_actors.store import SessionDB
from hermes_actors.store.ops import AddTokens, CreateSession, ListId, OutboxAppend

SCRIPT = textwrap.dedent(
    """
    from gevent import monkey
    monkey.patch_all()

    import sys
    from pathlib import Path
    from hermes_actors import SessionSource, load_config
    from hermes_actors.store import SessionStore

    home, phase, first = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    store = SessionStore(home / "sessions", load_config({}, env={}))
    try:
        source = SessionSource("telegram", chat_id="1", user_id="1")
        entry = (store.get_or_create_session(source) if phase == "create"
                 else store.get(store.session_key_for(source)))
        if phase == "crash":
            assert not store.degraded
            assert store.backend.writer == "process", store.backend.writer

            def tokens():
                store.update_session(entry.session_key, input_tokens=5, output_tokens=7)

            def outbox():
                store.outbox_append(session_key=entry.session_key, platform="telegram",
                                    chat_id="1", thread_id=None, text="reply", kind="reply")

            calls = [tokens, outbox] if first == "tokens" else [outbox, tokens]
            calls[0]()  # the writer child commits it, then dies before answering
            assert store.degraded, "the writer child did not die at the crash point"
            calls[1]()  # applied in degraded mode only
        print(entry.session_id)
    finally:
        store.close()
    """
)


def _run(home, phase: str, first: str = "tokens", **env: str) -> str:
    environ = {k: v for k, v in os.environ.items()
               if k not in ("HERMES_ACTORS_CRASHPOINT", "HERMES_ACTORS_DB_WRITER")}
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(home), phase, first],
                            capture_output=True, text=True, timeout=120,
                            env={**environ, **env})
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.parametrize("first", ["tokens", "outbox"])
def test_a_list_committed_before_the_writer_died_counts_once(tmp_path, first):
    _run(tmp_path, "create")
    _run(tmp_path, "crash", first, HERMES_ACTORS_CRASHPOINT="db_writer_after_commit")
    assert (tmp_path / "degraded.journal").exists()
    sid = _run(tmp_path, "import")  # a healthy start: the journal is imported
    assert not (tmp_path / "degraded.journal").exists()
    db = SessionDB(tmp_path / "state.db", read_only=True)
    try:
        row = db.session_row(sid)
        assert (row["input_tokens"], row["output_tokens"]) == (5, 7)  # not 10 and 14
        assert [r["text"] for r in db.outbox_read("telegram", "1", 0, 10)] == ["reply"]
    finally:
        db.close()


class TestListIds:
    """SQLite applies the ops after a ListId once, in a list alone or in a group commit."""

    def test_a_replayed_list_is_skipped(self, tmp_path):
        db = SessionDB(tmp_path / "state.db")
        try:
            db.apply([CreateSession("s1", "k1", None, 0.0)])
            ops = [ListId("a" * 32, 1.0), AddTokens("s1", 3, 4)]
            assert db.apply(ops) == [True, None]
            assert db.apply(ops) == [False, None]  # a replay: nothing applied
            assert db.apply_lists([ops, [ListId("b" * 32, 1.0), AddTokens("s1", 1, 1)]]) == [
                (True, [False, None]), (True, [True, None])]
            assert db.session_row("s1")["input_tokens"] == 4
        finally:
            db.close()

    def test_segments_of_one_list_each_apply_once(self, tmp_path):
        # a journal import: many lists' ops, each after its id, in one transaction
        db = SessionDB(tmp_path / "state.db")
        try:
            db.apply([CreateSession("s1", "k1", None, 0.0), ListId("a" * 32, 1.0),
                      AddTokens("s1", 1, 0)])
            out = OutboxAppend("k1", "telegram", "1", None, "x", "reply", 1.0)
            db.apply([ListId("a" * 32, 1.0), AddTokens("s1", 1, 0), out,
                      ListId("c" * 32, 1.0), AddTokens("s1", 10, 0)])
            assert db.session_row("s1")["input_tokens"] == 11
            assert db.outbox_head() == 0
        finally:
            db.close()


class TestKeptIds:
    """Only the latest list ids are kept: the table does not grow with every write."""

    def test_older_ids_are_pruned_by_count(self, tmp_path, monkeypatch):
        from hermes_actors.store.backends.sqlite import operations

        monkeypatch.setattr(operations, "KEPT_LIST_IDS", 10)
        monkeypatch.setattr(operations, "PRUNE_LIST_IDS_EVERY", 4)
        db = SessionDB(tmp_path / "state.db")
        try:
            db.apply([CreateSession("s1", "k1", None, 0.0)])
            for n in range(40):
                db.apply([ListId(f"list-{n}", 1.0), AddTokens("s1", 1, 0)])
            with closing(sqlite3.connect(tmp_path / "state.db")) as reader:
                kept = [row[0] for row in reader.execute(
                    "SELECT list_id FROM applied_lists ORDER BY rowid")]
            assert len(kept) <= 10 + 4 and kept[-1] == "list-39"
            # a recent list is still recognised as applied: its replay changes nothing
            assert db.apply([ListId("list-39", 1.0), AddTokens("s1", 1, 0)]) == [False, None]
            assert db.session_row("s1")["input_tokens"] == 40
        finally:
            db.close()
