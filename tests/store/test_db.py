"""SessionDB: schema, pragmas, search, and a full-text index that never costs a message."""

from __future__ import annotations

import json
import sqlite3

import pytest

from hermes_actors.errors import StoreError
from hermes_actors.store import SessionDB, StoreUnavailableError
from hermes_actors.store.backends.sqlite.schema import MODELS, SCHEMA_VERSION
from hermes_actors.store.ops import AppendMessage, CreateSession, PutRouting
from hermes_actors.store.routing import NO_FLAGS, RoutingRow


def _put(key: str, text: str, updated_at: float = 1.0) -> PutRouting:
    """A routing upsert of ``text`` with no flags set."""
    return PutRouting(key, text, *NO_FLAGS._replace(updated_at=updated_at))


def _msg(content: str, ts: float = 1.0, role: str = "user") -> dict:
    return {"role": role, "content": content, "timestamp": ts}


@pytest.fixture
def db(tmp_path):
    database = SessionDB(tmp_path / "state.db")
    database.apply([CreateSession("s1", "k1", None, 0.0), CreateSession("s2", "k2", None, 0.0)])
    yield database
    database.close()


def _sql(db: SessionDB, sql: str) -> list:
    return db.sql(sql)


def _corrupt_fts(db: SessionDB, how: str) -> None:
    statements = {
        "deleted": "DELETE FROM messages_fts_data",
        "zeroed": "UPDATE messages_fts_data SET block = x'00'",
        "shadow dropped": "DROP TABLE messages_fts_data",
    }
    _sql(db, statements[how])


class TestSchema:
    """The database is created with WAL, the pragmas, a version and the §17.14 columns."""

    def test_pragmas_and_version(self, db):
        assert _sql(db, "PRAGMA journal_mode") == [("wal",)]
        assert _sql(db, "PRAGMA synchronous") == [(2,)]  # FULL (store.synchronous)
        assert _sql(db, "PRAGMA foreign_keys") == [(1,)]
        assert _sql(db, "PRAGMA busy_timeout") == [(5000,)]
        assert _sql(db, "PRAGMA user_version") == [(SCHEMA_VERSION,)]

    def test_models_match_the_migrated_tables(self, db):
        for model in MODELS:
            table = model._meta.table_name
            columns = [row[1] for row in _sql(db, f"PRAGMA table_info({table})")]
            assert columns == [f.column_name for f in model._meta.sorted_fields], table
        routing = [row[1] for row in _sql(db, "PRAGMA table_info(routing)")]
        assert routing[:3] == ["session_key", "entry", "updated_at"]  # §17.14, then flags
        assert routing[3:] == ["active_turn_token", "active_turn_started_at",
                               "active_turn_internal", "resume_pending", "suspended"]

    def test_newer_schema_is_refused_untouched(self, tmp_path):
        path = tmp_path / "state.db"
        SessionDB(path).close()
        with sqlite3.connect(path) as conn:
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        with pytest.raises(StoreError, match="newer"):
            SessionDB(path)

    def test_reopen_keeps_data(self, tmp_path):
        path = tmp_path / "state.db"
        first = SessionDB(path)
        first.apply([_put("k", '{"x": 1}')])
        first.close()
        again = SessionDB(path)
        assert again.routing_rows() == [RoutingRow("k", '{"x": 1}',
                                                   NO_FLAGS._replace(updated_at=1.0))]
        again.close()

    def test_append_for_a_session_without_a_row_creates_one(self, db):
        db.apply([AppendMessage("orphan", _msg("hello"))])
        assert db.session_row("orphan")["message_count"] == 1

    def test_closed_database_raises_store_error(self, tmp_path):
        closed = SessionDB(tmp_path / "x.db")
        closed.close()
        closed.close()
        with pytest.raises(StoreError):
            closed.routing_rows()

    def test_a_read_that_meets_the_close_is_refused_as_closed(self, tmp_path):
        # the read passed the closed check, then reached the worker after the connection
        # closed: "closed", not an outage (an outage would switch the store to degraded)
        import threading

        db = SessionDB(tmp_path / "x.db")
        inside, go, out = threading.Event(), threading.Event(), []
        run, close_worker = db.executor.run, db.executor.close

        def held_run(fn, *args):  # the reader is descheduled between the check and the job
            if threading.current_thread().name == "reader":
                inside.set()
                assert go.wait(10)
            return run(fn, *args)

        def reader() -> None:
            try:
                out.append(db.counts())
            except Exception as exc:  # noqa: BLE001 - what the test looks at
                out.append(exc)

        def close_after_the_read() -> None:  # the connection is closed; the read runs now
            go.set()
            thread.join(10)
            close_worker()

        db.executor.run = held_run
        thread = threading.Thread(target=reader, name="reader")
        thread.start()
        assert inside.wait(10)
        db.executor.close = close_after_the_read
        db.close()
        [error] = out
        assert isinstance(error, StoreError) and not isinstance(error, StoreUnavailableError)
        assert "closed" in str(error)


class TestSearch:
    """Search returns message dicts with id and session_id, best bm25 match first."""

    def test_best_match_first(self, db):
        db.apply([
            AppendMessage("s1", _msg("the cat sat on the mat with a dog")),
            AppendMessage("s2", _msg("cat cat cat", 2.0, "assistant")),
            AppendMessage("s2", _msg("nothing relevant", 3.0)),
        ])  # fmt: skip
        hits = db.search("cat")
        assert [h["content"] for h in hits] == ["cat cat cat", "the cat sat on the mat with a dog"]
        assert hits[0] == {"id": 2, "session_id": "s2", "role": "assistant",
                           "content": "cat cat cat", "timestamp": 2.0}  # fmt: skip
        assert len(db.search("cat", limit=1)) == 1
        assert db.search("zebra") == []

    @pytest.mark.parametrize("query", ['"unbalanced', "AND", "nocolumn:cat", "   "])
    def test_malformed_query_is_a_clear_store_error(self, db, query):
        with pytest.raises(StoreError, match="query"):
            db.search(query)


class TestFtsMaintenance:
    """Repairing, detaching or rebuilding the index never deletes a canonical message."""

    @pytest.mark.parametrize("how", ["deleted", "zeroed", "shadow dropped"])
    def test_corruption_is_detected_and_rebuilt(self, db, how):
        db.apply([AppendMessage("s1", _msg(f"apple {n}")) for n in range(20)])
        _corrupt_fts(db, how)
        assert db.check_fts() == "corrupt"
        db.rebuild_fts()
        assert db.check_fts() == "ok"
        assert len(db.load_messages("s1")) == 20
        assert len(db.search("apple", limit=50)) == 20

    @pytest.mark.parametrize("how", ["deleted", "zeroed", "shadow dropped"])
    def test_append_on_a_corrupt_index_repairs_it_and_keeps_every_message(self, db, how):
        db.apply([AppendMessage("s1", _msg(f"apple {n}")) for n in range(20)])
        _corrupt_fts(db, how)
        db.apply([AppendMessage("s1", _msg("apple late")), AppendMessage("s1", _msg("pear"))])
        contents = [m["content"] for m in db.load_messages("s1")]
        assert contents == [f"apple {n}" for n in range(20)] + ["apple late", "pear"]
        assert db.check_fts() == "ok"
        assert db.search("late")[0]["content"] == "apple late"
        assert db.integrity_check() == "ok"

    def test_detach_keeps_messages_and_appends_keep_working(self, db):
        db.apply([AppendMessage("s1", _msg("apple"))])
        db.detach_fts()
        assert db.check_fts() == "missing"
        db.apply([AppendMessage("s1", _msg("banana"))])
        assert [m["content"] for m in db.load_messages("s1")] == ["apple", "banana"]
        with pytest.raises(StoreError, match="rebuild-fts"):
            db.search("apple")
        db.rebuild_fts()
        assert db.check_fts() == "ok"
        assert [h["content"] for h in db.search("banana OR apple")] == ["apple", "banana"]

    def test_lost_trigger_counts_as_corrupt(self, db):
        _sql(db, "DROP TRIGGER messages_ai")
        assert db.check_fts() == "corrupt"
        db.rebuild_fts()
        assert db.check_fts() == "ok"


class TestWriteFailures:
    """Write failures are retried, then surfaced; constraint errors are not retried."""

    def test_read_only_connection_raises_unavailable(self, db):
        _sql(db, "PRAGMA query_only = 1")
        with pytest.raises(StoreUnavailableError):
            db.apply([_put("k", "{}")])
        _sql(db, "PRAGMA query_only = 0")
        db.apply([_put("k", "{}")])
        assert [row.entry for row in db.routing_rows()] == ["{}"]

    def test_failed_transaction_leaves_nothing_behind(self, db):
        _sql(db, "CREATE TRIGGER refuse BEFORE INSERT ON routing BEGIN "
                 "SELECT RAISE(ABORT, 'refused'); END")  # fmt: skip
        with pytest.raises(StoreError, match="refused"):
            db.apply([AppendMessage("s1", _msg("first")), _put("k", "{}")])
        assert db.load_messages("s1") == []


class TestReadOnly:
    """A read-only handle answers checks and reads and creates no file."""

    def test_checks_without_creating_files(self, tmp_path, db):
        db.apply([AppendMessage("s1", _msg("apple"))])
        db.close()
        before = sorted(p.name for p in tmp_path.iterdir())
        ro = SessionDB(tmp_path / "state.db", read_only=True)
        assert (ro.integrity_check(), ro.check_fts()) == ("ok", "ok")
        assert ro.counts()["messages"] == 1
        with pytest.raises(StoreError):
            ro.apply([_put("k", "{}")])
        ro.close()
        assert sorted(p.name for p in tmp_path.iterdir()) == before

    def test_missing_file_is_not_created(self, tmp_path):
        with pytest.raises(StoreUnavailableError):
            SessionDB(tmp_path / "none.db", read_only=True)
        assert list(tmp_path.iterdir()) == []


class TestRoutingFlagColumns:
    """Recovery's candidates come from a partial index over the flag columns, and migration 7
    moves the flags of rows written by older builds (in the JSON text) into the columns."""

    @staticmethod
    def _plan(path) -> str:
        from hermes_actors.store.backends.sqlite.schema import ROUTING_FLAGGED

        with sqlite3.connect(path) as conn:
            rows = conn.execute("EXPLAIN QUERY PLAN SELECT session_key, entry FROM routing"
                                f" WHERE {ROUTING_FLAGGED}").fetchall()
        return " ".join(row[-1] for row in rows)

    def test_a_new_database(self, tmp_path):
        SessionDB(tmp_path / "state.db").close()
        assert "USING INDEX routing_flagged" in self._plan(tmp_path / "state.db")

    def test_a_database_of_version_6_is_migrated(self, tmp_path):
        from hermes_actors.store.backends.sqlite.schema import MIGRATIONS

        path = tmp_path / "state.db"
        marked = {"session_key": "k1", "session_id": "20240101_000000_aaaa0001",
                  "active_turn_token": "t" * 32,
                  "active_turn_started_at": "2024-01-01T00:00:00+00:00",
                  "updated_at": "2024-01-01T00:00:00+00:00", "resume_pending": False}
        plain = {"session_key": "k2", "session_id": "20240101_000000_aaaa0002",
                 "suspended": True, "updated_at": None, "display_name": "DM with Bo"}
        with sqlite3.connect(path) as conn:  # what the release with migration 6 left
            for migration in MIGRATIONS[:6]:
                for statement in migration:
                    conn.execute(statement)
            conn.execute("PRAGMA user_version = 6")
            conn.executemany("INSERT INTO routing (session_key, entry, updated_at)"
                             " VALUES (?, ?, 5.0)",
                             [("k1", json.dumps(marked)), ("k2", json.dumps(plain)),
                              ("k3", "not json")])
            conn.execute("INSERT INTO deliveries (obligation_id, session_key, platform,"
                         " content, kind, state, attempts, owner_pid, owner_started_at,"
                         " created_at, updated_at) VALUES ('o', 'k1', 'telegram', 'x',"
                         " 'reply', 'attempting', 1, 4242, 1.0, 1.0, 1.0)")
        db = SessionDB(path)
        try:
            rows = {row.session_key: row for row in db.routing_rows()}
            assert [row.session_key for row in db.routing_flagged()] == ["k1"]
            assert rows["k1"].flags.active_turn_token == "t" * 32
            assert rows["k1"].flags.active_turn_started_at == 1704067200.0
            assert "active_turn_token" not in json.loads(rows["k1"].entry)
            assert rows["k2"].flags.suspended and rows["k2"].flags.updated_at is None
            assert json.loads(rows["k2"].entry)["display_name"] == "DM with Bo"
            assert rows["k3"].entry == "not json"  # kept as it was: skipped at first use
            [owed] = db.ledger_rows()
            assert (owed["state"], owed["owner_node"], owed["owner_boot"]) == (
                "attempting", None, None)  # an old process's claim: nobody's now
        finally:
            db.close()
        assert "USING INDEX routing_flagged" in self._plan(path)
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)

    def test_keys_written_by_another_program_with_a_nul_are_read_whole(self, tmp_path):
        """The keys are read as one NUL-joined text; a key holding a NUL (another program's
        row: the store never writes one) makes more parts than rows, and then each key
        is read on its own."""
        path = tmp_path / "state.db"
        SessionDB(path).close()
        with sqlite3.connect(path) as conn:
            conn.executemany("INSERT INTO routing (session_key, entry) VALUES (?, '{}')",
                             [("a\x00b",), ("a",), ("c",)])
        db = SessionDB(path)
        try:
            assert sorted(db.routing_keys()) == ["a", "a\x00b", "c"]
        finally:
            db.close()


class TestBoundedMemory:
    """What the writer remembers of sessions is bounded; forgetting costs one statement."""

    def test_forgotten_sessions_still_count_their_messages(self, tmp_path, monkeypatch):
        from hermes_actors.store import opdispatch

        monkeypatch.setattr(opdispatch, "KNOWN_SESSIONS", 2)
        db = SessionDB(tmp_path / "state.db")
        try:
            sids = [f"20231114_221320_0000000{n}" for n in range(5)]
            for sid in sids:
                db.apply([AppendMessage(sid, _msg("a"))])
            db.apply([AppendMessage(sids[0], _msg("b"))])  # long forgotten by now
            rows = {r["id"]: r["message_count"] for r in db.rows("sessions")}
            assert rows == {sid: (2 if sid == sids[0] else 1) for sid in sids}
        finally:
            db.close()
