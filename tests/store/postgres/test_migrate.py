"""``hermes-actors db migrate --to DSN``: a SQLite home copied row for row into an empty
PostgreSQL database (one transaction, counts verified), and every refusal.

The home is built through the SQLite backend's own operations, with every kind of value
the tables hold: turn markers and flags, replies, tool calls, consumed and waiting inbox
rows, ledger rows in every state with their owners, outbox rows, node state, and rows
pruned at the top of each ``AUTOINCREMENT`` table (their ids must never be handed out
again). The target is a real server (the session's test server), never a mock.
"""

from __future__ import annotations

import json
import sqlite3

import psycopg
import pytest
import yaml

from hermes_actors import Gateway, load_config
from hermes_actors.cli import main
from hermes_actors.store.backends.postgres.backend import PostgresBackend
from hermes_actors.store.backends.postgres.schema import SCHEMA_VERSION
from hermes_actors.store.backends.sqlite.db import SessionDB
from hermes_actors.store.ops import (
    AcceptEvent,
    AppendMessage,
    ConsumeEvents,
    CreateSession,
    EndSession,
    LedgerClaim,
    LedgerFinish,
    LedgerRecord,
    NodeValue,
    OutboxAppend,
    PutRouting,
)
from hermes_actors.store.transfer import TABLES

KEYS = {table.name: table.columns[0] for table in TABLES}
KEYS["node_state"] = "node_id, name"
T0 = 1_700_000_000.123456789


def _entry(key: str, sid: str) -> str:
    when = "2023-11-14T22:13:20+00:00"
    return json.dumps({"session_key": key, "session_id": sid, "created_at": when,
                       "updated_at": when, "origin": {"platform": "telegram", "chat_id": "1"}})


def build_home(home) -> str:
    """A SQLite home holding a bit of everything; returns its node id."""
    db = SessionDB(home / "state.db", writer="thread")
    node = db.node_id()
    ops: list = []
    for n in range(3):
        sid, key = f"2023_s{n}", f"agent:main:telegram:dm:{n}"
        ops += [CreateSession(sid, key, {"platform": "telegram", "chat_id": str(n)}, T0 + n),
                AppendMessage(sid, {"role": "user", "content": f"question {n} ünïcode ✓",
                                    "timestamp": T0 + n + 0.5}, turn_token=f"tok{n}"),
                AppendMessage(sid, {"role": "assistant", "content": "", "timestamp": T0 + n + 1,
                                    "tool_name": "search", "tool_calls": [{"id": "c1"}],
                                    "token_count": 17}),
                AppendMessage(sid, {"role": "assistant", "content": f"answer {n}",
                                    "timestamp": T0 + n + 2}, turn_token=f"tok{n}",
                              is_reply=True)]
    ops += [EndSession("2023_s2", "session_reset", T0 + 9),
            PutRouting("agent:main:telegram:dm:0", _entry("agent:main:telegram:dm:0", "2023_s0"),
                       "marker0", T0 + 3, True, False, False, T0 + 3),
            PutRouting("agent:main:telegram:dm:1", _entry("agent:main:telegram:dm:1", "2023_s1"),
                       None, None, False, True, False, T0 + 4),
            PutRouting("agent:main:telegram:dm:2", _entry("agent:main:telegram:dm:2", "2023_s2"),
                       None, None, False, False, True, None)]
    for n in range(5):
        ops.append(AcceptEvent(f"{n:032x}", "agent:main:telegram:dm:0",
                               json.dumps({"text": f"m{n}"}), n == 4, T0 + 10 + n,
                               ingress_key=f"telegram:1::{n}" if n < 3 else None))
    ops.append(ConsumeEvents((f"{0:032x}", f"{1:032x}"), "turn", T0 + 20))
    for n, state in enumerate(("pending", "attempting", "delivered", "failed", "abandoned")):
        oid = f"{n:024x}"
        ops.append(LedgerRecord(oid, "agent:main:telegram:dm:0", "telegram", "1", None,
                                f"owed {n}", "reply" if n % 2 else "recovered", T0 + 30 + n,
                                in_reply_to=f"{n:032x}"))
        if state != "pending":
            ops.append(LedgerClaim(oid, node, "boot-1", T0 + 31 + n))
        if state in ("delivered", "failed"):
            ops.append(LedgerFinish(oid, state, "boom" if state == "failed" else None,
                                    T0 + 32 + n))
        if state == "abandoned":  # a failed attempt more than a day after the record
            ops.append(LedgerFinish(oid, "failed", "gone", T0 + 90_000))
    for n in range(4):
        ops.append(OutboxAppend("agent:main:webhook:dm:x", "webhook", "x", None, f"out {n}",
                                "reply", T0 + 40 + n, in_reply_to=f"{n:032x}"))
    ops += [NodeValue(node, "restart_counts", json.dumps({"agent:main:telegram:dm:0": 2})),
            NodeValue(node, "restart_storm", json.dumps({"boots": [T0]})),
            NodeValue("another-node", "clean_shutdown", json.dumps({"pid": 1, "at": T0}))]
    db.apply(ops)
    # Prune the newest row of each AUTOINCREMENT table: SQLite never hands its id out again.
    db.sql("DELETE FROM outbox WHERE cursor = (SELECT max(cursor) FROM outbox)")
    db.sql("DELETE FROM inbox WHERE seq = (SELECT max(seq) FROM inbox)")
    db.sql("DELETE FROM messages WHERE id = (SELECT max(id) FROM messages)")
    db.close()
    return node


def sqlite_rows(home, table: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    try:
        columns = next(t.columns for t in TABLES if t.name == table)
        return conn.execute(f"SELECT {', '.join(columns)} FROM {table}"
                            f" ORDER BY {KEYS[table]}").fetchall()
    finally:
        conn.close()


def pg_rows(dsn: str, table: str) -> list[tuple]:
    columns = next(t.columns for t in TABLES if t.name == table)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f"SELECT {', '.join(columns)} FROM {table}"
                            f" ORDER BY {KEYS[table]}").fetchall()
    return [tuple(int(v) if isinstance(v, bool) else v for v in row) for row in rows]


def pg_tables(dsn: str) -> dict[str, int]:
    """Rows per canonical table of the target; a table that does not exist is left out."""
    found = {}
    with psycopg.connect(dsn) as conn:
        for table in (*KEYS, "meta", "schema_version"):
            if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0]:
                found[table] = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    return found


def listing(home) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*"))
            if p.is_file()}


def migrate(capsys, home, dsn: str) -> tuple[int, str, str]:
    code = main(["db", "migrate", "--home", str(home), "--to", dsn])
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str, *, after_progress: bool = False) -> str:
    """The one error line of ``err`` (after the copy's progress lines, if it began)."""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    if after_progress:
        assert all(line.startswith("db migrate: ") for line in lines[:-1]), err
        lines = lines[-1:]
    assert len(lines) == 1, err
    assert lines[0].startswith("hermes-actors: error: ")
    return lines[0]


@pytest.fixture
def node(home) -> str:
    return build_home(home)


class TestCopy:
    """Every canonical row arrives as it was, and the copy is verified and explained."""

    def test_every_row_of_every_table_is_copied_exactly(self, capsys, home, node, postgres_dsn):
        before = listing(home)
        code, out, err = migrate(capsys, home, postgres_dsn)
        assert code == 0, err
        after = listing(home)
        assert after.pop("node_id").decode().strip() == node
        after.pop("gateway.lock")  # the lock the copy held (the home's own, as a gateway's)
        before.pop("gateway.lock", None)
        assert after == before  # state.db and the rest of the home are untouched
        for table in TABLES:
            source = sqlite_rows(home, table.name)
            assert source, f"the fixture has no {table.name} rows"
            assert pg_rows(postgres_dsn, table.name) == source, table.name

    def test_summary_counts_and_advice(self, capsys, home, node, postgres_dsn):
        code, out, err = migrate(capsys, home, postgres_dsn)
        assert code == 0, err
        table = {line.split()[0]: line.split()[1:] for line in out.splitlines()
                 if line.split()[:1] and line.split()[0] in KEYS}
        expected = {"sessions": 3, "messages": 8, "routing": 3, "deliveries": 5, "inbox": 4,
                    "outbox": 3, "node_state": 3}
        assert table == {name: [str(n), str(n)] for name, n in expected.items()}
        assert pg_tables(postgres_dsn) == {**expected, "meta": 0,
                                           "schema_version": SCHEMA_VERSION}
        assert "sequence messages.id: next value 10" in out
        assert "sequence inbox.seq: next value 6" in out
        assert "sequence outbox.cursor: next value 5" in out
        assert f"node id {node}: kept in {home / 'node_id'}" in out
        assert "    backend: postgres" in out and f"    dsn: {json.dumps(postgres_dsn)}" in out
        for name, n in expected.items():
            assert f"db migrate: copied {name}: {n} rows" in err

    def test_a_store_opened_on_the_copy_continues_the_home(self, capsys, home, node,
                                                           postgres_dsn):
        assert migrate(capsys, home, postgres_dsn)[0] == 0
        pg = PostgresBackend(postgres_dsn, home, pool_size=1)
        try:
            assert pg.node_id() == node
            assert json.loads(pg.node_values(node)["restart_counts"]) == {
                "agent:main:telegram:dm:0": 2}
            assert [row.session_key for row in pg.routing_flagged()] == [
                "agent:main:telegram:dm:0", "agent:main:telegram:dm:1"]
            # New rows continue after the highest id SQLite ever handed out, pruned or not.
            cursor, _, _ = pg.apply([
                OutboxAppend("k", "webhook", "x", None, "new", "reply", T0 + 50),
                AcceptEvent("f" * 32, "k", "{}", False, T0 + 50),
                AppendMessage("2023_s0", {"role": "user", "content": "new", "timestamp": T0}),
            ])
            assert cursor == 5
            assert pg.rows("inbox")[-1]["seq"] == 6
            assert pg.rows("messages")[-1]["id"] == 10
            assert [m["content"] for m in pg.search("answer")] == ["answer 0", "answer 1"]
            assert pg.integrity_check() == "ok" and pg.check_fts() == "ok"
        finally:
            pg.close()

    def test_a_nul_in_a_text_is_copied_as_its_stand_in(self, capsys, tmp_path, postgres_dsn,
                                                       open_pg):
        # PostgreSQL text cannot hold NUL: the copy stores U+FFFD (it failed the whole copy)
        home = tmp_path / "nul-home"
        home.mkdir()
        db = SessionDB(home / "state.db", writer="thread")
        db.apply([CreateSession("20231114_221320_0000000a", "k", {"platform": "webhook"}, 1.0),
                  AppendMessage("20231114_221320_0000000a",
                                {"role": "user", "content": "a\x00b", "timestamp": 2.0})])
        db.close()
        assert main(["db", "migrate", "--home", str(home), "--to", postgres_dsn]) == 0
        copied = open_pg().load_messages("20231114_221320_0000000a")
        assert [m["content"] for m in copied] == ["a\ufffdb"]

    def test_an_empty_home_database_is_copied_too(self, capsys, home, postgres_dsn):
        SessionDB(home / "state.db", writer="thread").close()
        code, out, err = migrate(capsys, home, postgres_dsn)
        assert code == 0, err
        assert pg_tables(postgres_dsn) == {name: 0 for name in (*KEYS, "meta")} | {
            "schema_version": SCHEMA_VERSION}
        assert "sequence outbox.cursor: next value 1" in out


class TestRefusals:
    """Exit 2, one line, nothing written anywhere."""

    def test_a_target_with_rows(self, capsys, home, node, postgres_dsn, open_pg, tmp_path):
        other = tmp_path / "other"
        other.mkdir()
        open_pg(home=other).apply([CreateSession("x", "k", None, 1.0)])
        code, _, err = migrate(capsys, home, postgres_dsn)
        assert code == 2
        line = one_error_line(err)
        assert "is not empty (sessions hold rows)" in line
        assert pg_tables(postgres_dsn)["sessions"] == 1
        assert pg_tables(postgres_dsn)["messages"] == 0
        assert not (home / "node_id").exists()

    def test_a_home_a_gateway_runs_on(self, capsys, home, node, postgres_dsn):
        gateway = Gateway(home, config=load_config({}, env={}))
        gateway.start()
        try:
            code, _, err = migrate(capsys, home, postgres_dsn)
        finally:
            gateway.stop()
        assert code == 2
        assert "is in use by a running gateway" in one_error_line(err)
        assert pg_tables(postgres_dsn) == {}

    def test_a_home_without_state_db(self, capsys, home, postgres_dsn):
        code, _, err = migrate(capsys, home, postgres_dsn)
        assert code == 2
        assert "there is no state.db in" in one_error_line(err)
        assert list(home.iterdir()) == []  # not even a lock file
        assert pg_tables(postgres_dsn) == {}

    def test_a_missing_home(self, capsys, tmp_path, postgres_dsn):
        code, _, err = migrate(capsys, tmp_path / "nowhere", postgres_dsn)
        assert code == 2 and "does not exist" in one_error_line(err)
        assert not (tmp_path / "nowhere").exists()

    def test_an_unreachable_server_with_its_password_masked(self, capsys, home, node):
        dsn = "postgresql://hermes:s3cr3t-pw@127.0.0.1:9/hermes?connect_timeout=2"
        code, _, err = migrate(capsys, home, dsn)
        assert code == 2
        line = one_error_line(err)
        assert "s3cr3t-pw" not in line
        assert "host=127.0.0.1 port=9 dbname=hermes user=hermes" in line
        assert not (home / "node_id").exists()

    def test_a_target_that_is_already_the_home_s_store(self, capsys, home, node, postgres_dsn):
        (home / "config.yaml").write_text(yaml.safe_dump(
            {"store": {"backend": "postgres", "dsn": postgres_dsn}}))
        code, _, err = migrate(capsys, home, postgres_dsn)
        assert code == 2
        assert "is already the store of this home" in one_error_line(err)
        assert pg_tables(postgres_dsn) == {}

    def test_a_home_whose_store_is_another_postgres_database(self, capsys, home, node,
                                                             postgres_dsn, monkeypatch):
        monkeypatch.setenv("HERMES_STORE_BACKEND", "postgres")
        monkeypatch.setenv("HERMES_STORE_DSN", "postgresql://u:elsewhere-pw@db.example/other")
        code, _, err = migrate(capsys, home, postgres_dsn)
        assert code == 2
        line = one_error_line(err)
        assert "not its state.db" in line and "elsewhere-pw" not in line
        assert pg_tables(postgres_dsn) == {}

    def test_a_to_that_is_not_a_dsn(self, capsys, home, node):
        code, _, err = migrate(capsys, home, "my-database")
        assert code == 2 and "--to needs a PostgreSQL connection string" in one_error_line(err)

    def test_a_state_db_of_an_older_schema(self, capsys, home, node, postgres_dsn):
        conn = sqlite3.connect(home / "state.db")
        conn.execute("PRAGMA user_version = 6")
        conn.close()
        code, _, err = migrate(capsys, home, postgres_dsn)
        assert code == 2
        assert "schema version 6, older than" in one_error_line(err)
        assert pg_tables(postgres_dsn) == {}


class TestFailureAndRerun:
    """A copy that fails half-way leaves the target as it was; run again once fixed."""

    def test_a_row_the_server_refuses(self, capsys, home, node, postgres_dsn):
        conn = sqlite3.connect(home / "state.db")  # foreign keys off: an orphan message
        conn.execute("INSERT INTO messages (session_id, role, content, timestamp)"
                     " VALUES ('no-such-session', 'user', 'orphan', 1.0)")
        conn.commit()
        code, _, err = migrate(capsys, home, postgres_dsn)
        assert code == 1
        line = one_error_line(err, after_progress=True)
        assert "copying messages into" in line and "foreign key" in line
        assert "nothing was committed" in line
        assert "db migrate: copied sessions: 3 rows" in err  # it failed half-way
        assert pg_tables(postgres_dsn) == {}  # the schema too: one transaction
        assert not (home / "node_id").exists()
        conn.execute("INSERT INTO sessions (id, started_at) VALUES ('no-such-session', 1.0)")
        conn.commit()
        conn.close()
        code, _, err = migrate(capsys, home, postgres_dsn)
        assert code == 0, err
        assert pg_tables(postgres_dsn)["messages"] == 9
        assert pg_rows(postgres_dsn, "messages") == sqlite_rows(home, "messages")

    def test_a_table_the_target_cannot_write(self, capsys, home, node, postgres_dsn, open_pg,
                                             tmp_path):
        other = tmp_path / "other"
        other.mkdir()
        open_pg(home=other).close()  # the schema exists, empty
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS"
                         " $$ BEGIN RAISE EXCEPTION 'outbox is read-only today'; END $$")
            conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON outbox"
                         " FOR EACH ROW EXECUTE FUNCTION refuse()")
        code, _, err = migrate(capsys, home, postgres_dsn)
        assert code == 1
        line = one_error_line(err, after_progress=True)
        assert "copying outbox into" in line and "outbox is read-only today" in line
        assert "db migrate: copied messages: 8 rows" in err  # it failed half-way
        counts = pg_tables(postgres_dsn)
        assert all(counts[name] == 0 for name in KEYS), counts
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute("DROP TRIGGER refuse ON outbox")
        code, out, err = migrate(capsys, home, postgres_dsn)
        assert code == 0, err
        for table in TABLES:
            assert pg_rows(postgres_dsn, table.name) == sqlite_rows(home, table.name)


class TestTables:
    """The copy's table list is the schema of both backends, column for column."""

    def test_every_canonical_column_of_both_backends_is_copied(self, home, pg):
        from hermes_actors.store.backends.postgres.schema import CANONICAL_TABLES

        assert {t.name for t in TABLES} == set(CANONICAL_TABLES) - {"meta"}
        db = SessionDB(home / "state.db", writer="thread")
        try:
            for table in TABLES:
                columns = [row[1] for row in db.sql(f"PRAGMA table_info({table.name})")]
                assert sorted(columns) == sorted(table.columns), table.name
        finally:
            db.close()
        for table in TABLES:
            found = pg.sql(
                "SELECT column_name, data_type, is_identity FROM information_schema.columns"
                " WHERE table_schema = current_schema() AND table_name = %s", (table.name,))
            assert sorted(name for name, _, _ in found) == sorted(table.columns), table.name
            assert sorted(n for n, kind, _ in found if kind == "boolean") == sorted(table.flags)
            assert [n for n, _, ident in found if ident == "YES"] == (
                [table.identity] if table.identity else [])
