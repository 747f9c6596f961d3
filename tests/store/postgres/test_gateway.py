"""The whole runtime on PostgreSQL, smoke-tested (the gateway scenario suite is parametrized
over the backends separately): a turn's reply, its transcript and ledger row, a restart
that finds them again, and an outage of the server seen by an embedded host."""

from __future__ import annotations

import pytest

from hermes_actors import (
    EchoAgent,
    Gateway,
    InMemoryAdapter,
    MessageEvent,
    SessionSource,
    load_config,
)
from hermes_actors.errors import StoreUnavailableError
from hermes_actors.testing.postgres import start_embedded_server


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


class TestOutage:
    """An embedded gateway whose server goes away refuses messages from then on and says
    so (``Gateway.outage``); a new gateway on the server, once it is back, recovers."""

    def test_refuses_then_a_new_gateway_recovers(self, tmp_path):
        server = start_embedded_server()
        try:
            with server.database() as dsn:
                config = load_config(_config(dsn), env={})
                source = SessionSource("telegram", chat_id="1", user_id="7")

                def gateway() -> tuple[Gateway, InMemoryAdapter]:
                    adapter = InMemoryAdapter("telegram")
                    gw = Gateway(tmp_path / "home", config, adapters=[adapter],
                                 agent_factory=lambda _ctx: EchoAgent())
                    gw.start()
                    return gw, adapter

                gw, adapter = gateway()
                gw.submit(MessageEvent(source=source, text="before"))
                assert gw.wait_idle(20) and adapter.texts() == ["echo: before"]
                server.pause()
                for text in ("during", "again"):
                    with pytest.raises(StoreUnavailableError):
                        gw.submit(MessageEvent(source=source, text=text))
                assert gw.outage.is_set()
                assert gw.ingress.statistics().refused["store_unavailable"] == 2
                gw.stop(drain_timeout=0)
                assert not gw.stopped_cleanly
                server.resume()
                gw, adapter = gateway()
                try:
                    assert not gw.outage.is_set()
                    gw.submit(MessageEvent(source=source, text="after"))
                    assert gw.wait_idle(20) and adapter.texts() == ["echo: after"]
                    transcript = gw.store.load_transcript(gw.store.get(
                        "agent:main:telegram:dm:1").session_id)
                    assert [m["content"] for m in transcript] == [
                        "before", "echo: before", "after", "echo: after"]
                finally:
                    gw.stop(drain_timeout=5)
        finally:
            server.stop()


class TestNewHome:
    """A home without files is "new" only when its database holds nothing either."""

    def test_an_empty_home_on_a_used_database_is_not_new(self, make_harness, postgres_dsn,
                                                         tmp_path):
        adapter = InMemoryAdapter("telegram")
        fresh = Gateway(tmp_path / "new", load_config(_config(postgres_dsn), env={}),
                        adapters=[adapter], agent_factory=lambda _ctx: EchoAgent())
        try:
            assert fresh.start().new_home  # a first start on an empty database
        finally:
            fresh.stop(drain_timeout=5)
        first = make_harness(tmp_path / "a", **_config(postgres_dsn))
        first.send("hello")
        first.idle()
        first.gw.stop(drain_timeout=5)
        adapter = InMemoryAdapter("telegram")
        again = Gateway(tmp_path / "b", load_config(_config(postgres_dsn), env={}),
                        adapters=[adapter], agent_factory=lambda _ctx: EchoAgent())
        try:
            report = again.start()
            assert not report.new_home
            assert "new home" not in report.summary()  # (another node: no marker of its own)
        finally:
            again.stop(drain_timeout=5)
