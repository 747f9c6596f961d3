"""Routing rows: upserts, flag columns, deletes, and the two candidate queries."""

from __future__ import annotations

from hermes_actors.store.ops import DeleteRouting
from hermes_actors.store.routing import NO_FLAGS, RoutingRow

from .ops import T0, flags, marked, put


class TestRows:
    """A row is its text and its flags; both read back as written."""

    def test_put_and_read(self, backend):
        results = backend.apply([put("a", '{"x": 1}', marked()), put("b")])
        assert results == [None, None]
        assert backend.routing_row("a") == RoutingRow("a", '{"x": 1}', marked())
        assert backend.routing_row("missing") is None
        assert list(backend.routing_keys()) == ["a", "b"]
        assert {row.session_key for row in backend.routing_rows()} == {"a", "b"}

    def test_keys_read_back_exactly(self, backend):
        assert list(backend.routing_keys()) == []
        keys = ["agent:main:telegram:dm:1", "k,with;separators", "ключ 🗝", "a" * 300,
                *(f"agent:main:webhook:dm:{n}" for n in range(500))]
        backend.apply([put(key) for key in keys])
        assert sorted(backend.routing_keys()) == sorted(keys)

    def test_put_replaces_text_and_flags(self, backend):
        backend.apply([put("a", '{"x": 1}', marked())])
        backend.apply([put("a", '{"x": 2}')])
        assert backend.routing_row("a") == RoutingRow("a", '{"x": 2}', NO_FLAGS)

    def test_flags_change_without_the_text(self, backend):
        backend.apply([put("a", '{"x": 1}')])
        backend.apply([flags("a", marked("t2" * 16))])
        assert backend.routing_row("a") == RoutingRow("a", '{"x": 1}', marked("t2" * 16))
        backend.apply([flags("missing", marked())])  # no row: nothing happens
        assert backend.routing_row("missing") is None

    def test_delete(self, backend):
        backend.apply([put("a"), put("b"), put("c")])
        assert backend.apply([DeleteRouting(("a", "c", "nope"))]) == [2]
        assert list(backend.routing_keys()) == ["b"]

    def test_survives_a_reopen(self, opened):
        opened.backend.apply([put("a", '{"x": 1}', marked())])
        again = opened.reopen()
        assert again.routing_row("a") == RoutingRow("a", '{"x": 1}', marked())


class TestCandidates:
    """Recovery's work list and pruning's candidates come from the flags."""

    def test_flagged(self, backend):
        resume = NO_FLAGS._replace(resume_pending=True)
        backend.apply([put("marked", flags=marked()), put("resume", flags=resume),
                       put("plain"), put("suspended", flags=NO_FLAGS._replace(suspended=True))])
        assert sorted(row.session_key for row in backend.routing_flagged()) == [
            "marked", "resume"]

    def test_idle_before(self, backend):
        def at(when, **more):
            return NO_FLAGS._replace(updated_at=when, **more)

        backend.apply([
            put("old", flags=at(T0 - 100)),
            put("new", flags=at(T0 + 100)),
            put("never", flags=at(None)),
            put("old-marked", flags=marked(updated=T0 - 100)),
            put("old-resume", flags=at(T0 - 100, resume_pending=True)),
            put("old-suspended", flags=at(T0 - 100, suspended=True)),
        ])
        assert sorted(row.session_key for row in backend.routing_idle_before(T0)) == [
            "never", "old"]

    def test_idle_before_with_a_limit_takes_the_longest_idle_first(self, backend):
        def at(when):
            return NO_FLAGS._replace(updated_at=when)

        backend.apply([
            put("b-older", flags=at(T0 - 300)),
            put("never", flags=at(None)),
            put("recent", flags=at(T0 - 10)),
            put("a-older", flags=at(T0 - 300)),
            put("oldest", flags=at(T0 - 900)),
            put("marked", flags=marked(updated=T0 - 9000)),
        ])
        keys = [row.session_key for row in backend.routing_idle_before(T0, limit=3)]
        assert keys == ["oldest", "a-older", "b-older"]
        assert [row.session_key for row in backend.routing_idle_before(T0, limit=10)] == [
            "oldest", "a-older", "b-older", "recent", "never"]  # undated last
