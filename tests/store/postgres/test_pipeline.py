"""The PostgreSQL writer's pipelined transactions: results read after the sync, the few
results read at once, the one-statement ledger claim, and the committer's connection
waiting on the hub only when the server has not answered."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import psycopg
import pytest

from hermes_actors.store import ledger
from hermes_actors.store.backends.postgres.batch import bind, literal
from hermes_actors.store.ops import (
    AcceptEvent,
    AppendMessage,
    ConsumeEvents,
    CreateSession,
    LedgerClaim,
    LedgerFinish,
    LedgerRecord,
    PutRouting,
    SetRoutingFlags,
)
from hermes_actors.store.routing import NO_FLAGS

T0 = 1_700_000_000.0
OID = "o" * 24
CLAIMER = ("n1", "b1")


def _record(oid: str = OID) -> LedgerRecord:
    return LedgerRecord(oid, "k", "telegram", "1", None, "hello", "reply", T0)


VALUES = [
    "", "plain", "it's", "''", "back\\slash", "\\'", "line\nbreak\ttab", "émoji 🎉 中文",
    "%s %% %(x)s", "E'x'", "$$dollar$$", "-- comment", "/* c */", ";", "\u2028",
    0, 1, -1, 2**62, -(2**62), 1.5, -1.5, 1e-5, -2.5e300, 1700000000.123456, 0.1 + 0.2,
    float("inf"), float("-inf"), True, False, None,
]
ARRAYS = [[], ["a"], ["it's", "x,y", "{brace}", '"quote"', "\\", ""], ("t", "u")]


class TestLiterals:
    """What the writer binds into a statement's text reads back on the server as exactly the
    value psycopg would have sent as a parameter."""

    def test_every_kind_of_value(self, pg):
        for value in VALUES:
            text = literal(value).replace("%", "%%")  # the test's own query has a parameter
            cast = "float8" if isinstance(value, float) else \
                "bigint" if isinstance(value, int) and not isinstance(value, bool) else \
                "boolean" if isinstance(value, bool) else "text"
            (row,) = pg.sql(f"SELECT ({text})::{cast}, %s::{cast}", (value,))
            assert row[0] == row[1] and type(row[0]) is type(row[1]), (value, text, row)
        (row,) = pg.sql(f"SELECT ({literal(float('nan'))})::float8 = 'NaN'::float8")
        assert row == (True,)

    def test_arrays(self, pg):
        for value in ARRAYS:
            text = literal(value).replace("%", "%%")
            (row,) = pg.sql(f"SELECT {text}::text[], %s::text[]", (list(value),))
            assert row[0] == row[1] == list(value), value

    def test_texts_mean_the_same_without_standard_conforming_strings(self, postgres_dsn):
        # (a connection pooler may reset what the writer SET on its connection)
        texts = [v for v in VALUES if isinstance(v, str)]
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            for setting in ("on", "off"):
                conn.execute(f"SET standard_conforming_strings = {setting}")
                for value in texts:
                    text = literal(value).replace("%", "%%")
                    row = conn.execute(f"SELECT ({text})::text", ()).fetchone()
                    assert row == (value,), (setting, value, text)

    def test_nul_becomes_its_stand_in_and_other_types_are_left_to_psycopg(self):
        assert literal("a\x00b") == "E'a\ufffdb'"  # PostgreSQL text cannot hold a NUL
        assert bind("SELECT %s", (b"bytes",)) is None
        assert bind("SELECT %(x)s", ()) is None
        assert bind("SELECT %s, %s", ("it's", None)) == "SELECT E'it''s', NULL"

    def test_a_statement_with_every_kind_is_stored_as_given(self, pg):
        content = "it's \\ a 'test' 🎉 %s"
        pg.apply([CreateSession("s1", "k", {"q": "it's"}, -1.5, None),
                  AppendMessage("s1", {"role": "user", "content": content, "timestamp": 1e-5,
                                       "token_count": -3}, "t'1", True)])
        (row,) = pg.sql("SELECT content, timestamp, token_count, turn_token, is_reply"
                        " FROM messages")
        assert row == (content, 1e-5, -3, "t'1", True)
        assert pg.session_row("s1")["source"] == {"q": "it's"}


class TestClaimInOneStatement:
    """The claim's SQL grants exactly what ``ledger.claim_allowed`` grants, in every case."""

    OWNERS = (None, CLAIMER, ("n1", "b2"), ("n2", "b1"))

    @pytest.mark.parametrize("state", ledger.STATES)
    def test_agrees_with_the_rule(self, pg, state):
        for n, owner in enumerate(self.OWNERS):
            oid = f"{n:024d}"
            pg.apply([_record(oid)])
            node, boot = owner if owner is not None else (None, None)
            pg.sql("UPDATE deliveries SET state = %s, owner_node = %s, owner_boot = %s,"
                   " attempts = 1 WHERE obligation_id = %s", (state, node, boot, oid))
            want = ledger.claim_allowed(state, node, boot, claimer_node=CLAIMER[0],
                                        claimer_boot=CLAIMER[1])
            assert pg.apply([LedgerClaim(oid, *CLAIMER, T0 + 1)]) == [want], (state, owner)
            (row,) = pg.ledger_rows(session_key="k")[n:n + 1]
            if want:
                assert (row["state"], row["owner_node"], row["owner_boot"], row["attempts"]) \
                    == ("attempting", *CLAIMER, 2)
            else:
                assert (row["state"], row["owner_node"], row["attempts"]) == (state, node, 1)

    def test_a_missing_row_is_not_claimed(self, pg):
        assert pg.apply([LedgerClaim("missing", *CLAIMER, T0)]) == [False]


class TestResultsOfOnePipeline:
    """Every op's result is its own statement's, whether read after the sync or at once."""

    def test_results_in_order_around_reads_made_at_once(self, pg):
        pg.apply([AcceptEvent("e0", "k", "{}", False, T0, "ingress-1")])
        marked = NO_FLAGS._replace(active_turn_token="t" * 32)
        results = pg.apply([
            CreateSession("s1", "k", None, T0, None),
            PutRouting("k", "{}", *NO_FLAGS),
            AppendMessage("s1", {"role": "user", "content": "a", "timestamp": T0}, None, False),
            # the ingress key is taken: the holder is read at once, mid-pipeline
            AcceptEvent("e1", "k", "{}", False, T0, "ingress-1"),
            SetRoutingFlags("k", *marked),
            SetRoutingFlags("nobody", *marked),
            _record(),
            LedgerClaim(OID, *CLAIMER, T0),
            # a failed attempt reads the row at once to decide its state
            LedgerFinish(OID, "failed", "boom", T0),
            AppendMessage("s1", {"role": "assistant", "content": "b", "timestamp": T0},
                          None, True),
            ConsumeEvents(("e0", "e9"), "turn", T0),
        ])
        first, second = results[2], results[9]
        assert isinstance(first, int) and second > first
        assert results[3] == "e0"
        assert results[4:6] == [1, 0]
        assert results[7] is True and results[8] == "failed"
        assert results[10] == 1
        assert pg.message_count("s1") == 2


DRIVER = textwrap.dedent("""
    from gevent import monkey
    monkey.patch_all()

    import sys
    import tempfile

    import gevent
    import psycopg

    from hermes_actors.store.backends.postgres.backend import PostgresBackend
    from hermes_actors.store.backends.postgres.greenwait import WriterConnection
    from hermes_actors.store.ops import PutRouting, SetRoutingFlags
    from hermes_actors.store.routing import NO_FLAGS

    dsn = sys.argv[1]
    backend = PostgresBackend(dsn, tempfile.mkdtemp(), pool_size=2)
    backend.apply([PutRouting("k", "{}", *NO_FLAGS)])
    assert type(backend._writer._conn) is WriterConnection, type(backend._writer._conn)
    locker = psycopg.connect(dsn)
    locker.execute("SELECT 1 FROM routing WHERE session_key = 'k' FOR UPDATE")
    marked = NO_FLAGS._replace(active_turn_token="t" * 32)
    writer = gevent.spawn(backend.apply, [SetRoutingFlags("k", *marked)])

    def waiting() -> int:
        return backend.sql("SELECT count(*) FROM pg_locks WHERE NOT granted")[0][0]

    # the write waits on the server for the row lock; reads still run on the hub
    while not waiting():
        assert not writer.ready(), "the write did not wait for the lock"
    assert backend.routing_row("k") is not None and not writer.ready()
    locker.rollback()
    assert writer.get(timeout=30) == [1]
    backend.close()
    print("ok")
""")


def test_a_write_waiting_on_the_server_leaves_the_hub_free(postgres_dsn, tmp_path):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    proc = subprocess.run([sys.executable, str(driver), postgres_dsn], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_unpatched_processes_keep_psycopgs_connection():
    import psycopg

    from hermes_actors.store.backends.postgres.greenwait import connection_class

    assert connection_class() is psycopg.Connection
