"""Full-text search and the db tools on every database backend (``DatabaseTools``): the same
FTS5-syntax queries mean the same, best match first, on SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest

from hermes_actors.errors import StoreError
from hermes_actors.store.backends.postgres.ftsquery import QuerySyntaxError, to_tsquery_sql
from hermes_actors.store.backends.sqlite.db import SessionDB
from hermes_actors.store.ops import AppendMessage, CreateSession
from hermes_actors.store.protocol import DatabaseTools

T0 = 1_700_000_000.0


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def tools(request, tmp_path):
    if request.param == "sqlite":
        db = SessionDB(tmp_path / "state.db")
    else:
        from hermes_actors.store.backends.postgres.backend import PostgresBackend

        db = PostgresBackend(request.getfixturevalue("postgres_dsn"), tmp_path, pool_size=1)
    yield db
    db.close()


def _msg(content: str, ts: float = 1.0, role: str = "user") -> dict:
    return {"role": role, "content": content, "timestamp": ts}


def _fill(db: DatabaseTools, *contents: str) -> None:
    db.apply([AppendMessage("s1", _msg(text, float(n + 1))) for n, text in enumerate(contents)])


class TestSearch:
    """Search returns message dicts with id and session_id, best match first."""

    def test_is_a_database_tool(self, tools):
        assert isinstance(tools, DatabaseTools)

    def test_best_match_first(self, tools):
        tools.apply([
            AppendMessage("s1", _msg("the cat sat on the mat with a dog")),
            AppendMessage("s2", _msg("cat cat cat", 2.0, "assistant")),
            AppendMessage("s2", _msg("nothing relevant", 3.0)),
        ])  # fmt: skip
        hits = tools.search("cat")
        assert [h["content"] for h in hits] == ["cat cat cat", "the cat sat on the mat with a dog"]
        assert hits[0] == {"id": 2, "session_id": "s2", "role": "assistant",
                           "content": "cat cat cat", "timestamp": 2.0}  # fmt: skip
        assert len(tools.search("cat", limit=1)) == 1
        assert tools.search("zebra") == []

    @pytest.mark.parametrize(("query", "expected"), [
        ("banana OR apple", ["apple pie", "banana split"]),
        ("apple pie", ["apple pie"]),
        ("apple AND pie", ["apple pie"]),
        ('"pie apple"', []),
        ('"apple pie"', ["apple pie"]),
        ("app*", ["apple pie"]),
        ("split NOT banana", []),
        ("(banana OR cherry) AND split", ["banana split"]),
        ("cherry OR banana split", ["banana split", "cherry tart"]),
        ("banana NOT split pie", ["banana split"]),
        ("content:banana", ["banana split"]),
        ("APPLE", ["apple pie"]),
    ])
    def test_the_same_syntax_means_the_same(self, tools, query, expected):
        _fill(tools, "apple pie", "banana split", "cherry tart")
        assert sorted(h["content"] for h in tools.search(query)) == expected

    @pytest.mark.parametrize("query", ['"unbalanced', "AND", "nocolumn:cat", "   ",
                                       "(cat", "cat OR", "don't", "(cat OR dog) mat",
                                       "mat (cat OR dog)", "NOT cat"])
    def test_malformed_query_is_a_clear_store_error(self, tools, query):
        with pytest.raises(StoreError, match="query"):
            tools.search(query)


class TestTools:
    """The db tools' checks and repairs: detach, rebuild, counts, one session's row."""

    def test_detach_and_rebuild_keep_every_message(self, tools):
        _fill(tools, "apple")
        assert tools.check_fts() == "ok" and tools.integrity_check() == "ok"
        tools.detach_fts()
        assert tools.check_fts() == "missing"
        _fill(tools, "banana")
        with pytest.raises(StoreError, match="rebuild-fts"):
            tools.search("apple")
        tools.rebuild_fts()
        assert tools.check_fts() == "ok"
        assert [h["content"] for h in tools.search("banana OR apple")] == ["apple", "banana"]
        assert tools.counts() == {"sessions": 1, "messages": 2, "routing": 0,
                                  "pending_deliveries": 0}

    def test_session_row(self, tools):
        tools.apply([CreateSession("s9", "k", {"platform": "telegram"}, T0),
                     AppendMessage("s9", _msg("hi"))])
        row = tools.session_row("s9")
        assert row is not None
        assert (row["session_key"], row["source"], row["message_count"]) == (
            "k", {"platform": "telegram"}, 1)
        assert tools.session_row("nope") is None


class TestQueryTranslation:
    """FTS5 syntax becomes a tsquery built from PostgreSQL's constructors (no database)."""

    def test_operators_and_precedence(self):
        sql, params = to_tsquery_sql("a b OR c NOT d")
        assert params == ["a", "b", "c", "d"]
        p = "phraseto_tsquery('simple'::regconfig, %s)"
        assert sql == f"(({p} && {p}) || ({p} && !!{p}))"

    def test_user_text_is_a_parameter(self):
        sql, params = to_tsquery_sql('"it\'s; DROP TABLE messages"')
        assert "DROP" not in sql and params == ["it's; DROP TABLE messages"]

    def test_prefix(self):
        assert to_tsquery_sql('"new yor"*')[1] == ["'new' <-> 'yor':*"]

    @pytest.mark.parametrize("query", ["NEAR(a b)", "^start", "a:b", "*", "a + OR"])
    def test_unsupported_or_invalid(self, query):
        with pytest.raises(QuerySyntaxError):
            to_tsquery_sql(query)
