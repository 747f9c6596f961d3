"""The whole runtime on PostgreSQL, smoke-tested (the gateway scenario suite is parametrized
over the backends separately): a turn's reply, its transcript and ledger row, and a restart
that finds them again."""

from __future__ import annotations


def _config(dsn: str) -> dict:
    return {"store": {"backend": "postgres", "dsn": dsn, "pool_size": 2}}


class TestGatewayOnPostgres:
    """A gateway keeps its store on the server and finds it again after a restart."""

    def test_turn_and_restart(self, make_harness, postgres_dsn, tmp_path):
        home = tmp_path / "gw"
        h = make_harness(home, **_config(postgres_dsn))
        assert h.gw.store.db.kind == "postgres"
        h.send("hello")
        h.idle()
        assert h.texts() == ["echo: hello"]
        entry = h.gw.store.get(h.key())
        assert [r["state"] for r in h.gw.store.ledger_rows()] == ["delivered"]
        h.gw.stop(drain_timeout=5)

        again = make_harness(home, **_config(postgres_dsn))
        assert again.gw.store.get(again.key()).session_id == entry.session_id
        again.send("more")
        again.idle()
        rows = again.gw.store.load_transcript(entry.session_id)
        assert [r["content"] for r in rows] == ["hello", "echo: hello", "more", "echo: more"]
