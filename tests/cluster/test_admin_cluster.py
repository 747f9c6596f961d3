"""The operator routes in a cluster (issue 39): every node answers for every session. Reads
come from the database; an action reaches the session's owner (a chat command, or a control
event, through the shared inbox); ``GET /v1/admin/cluster`` shows nodes, shards and leases.

Two gateways in this process are the nodes, on one PostgreSQL database (started once for
the class), each with its HTTP API called as a WSGI application; a third check runs the
``admin cluster`` command against one of them served on loopback.
"""

from __future__ import annotations

import threading
import wsgiref.simple_server
from types import SimpleNamespace

import pykka
import pytest
from wsgi_api import ADMIN, admin_api, admin_call, admin_path

from hermes_actors import Gateway, InMemoryAdapter, MessageEvent, SessionSource, load_config
from hermes_actors.cli import main
from hermes_actors.cluster.control import control_event
from hermes_actors.testing import wait_until

SHARDS = 4


def _source(chat: str) -> SessionSource:
    return SessionSource("telegram", chat_id=chat, user_id="u" + chat)


class Pair(SimpleNamespace):
    """``owner`` serves the chat ``chat`` (session ``key``); ``other`` does not."""


@pytest.fixture(autouse=True)
def _stop_all_actors():
    """(Replaces the suite's: the pair's actors live for the whole class, and its fixture
    stops them once it is done.)"""
    yield


@pytest.fixture(scope="class")
def pair(postgres_server, tmp_path_factory):
    adapter = InMemoryAdapter("telegram")
    home = tmp_path_factory.mktemp("admin-cluster")
    with postgres_server.database() as dsn:
        config = load_config({
            "store": {"backend": "postgres", "dsn": dsn, "pool_size": 2},
            "cluster": {"enabled": True, "shards": SHARDS, "lease_ttl": 3, "heartbeat": 0.2},
            "agent": {"kind": "scripted"}, "busy_input_mode": "queue",
        }, env={})
        gateways = []
        try:
            for n in range(2):
                gw = Gateway(home / f"node{n}", config, adapters=[adapter])
                gw.start()
                gateways.append(gw)
            for gw in gateways:  # each its fair share, every shard served
                assert gw.cluster.wait_for(lambda s: s.serving == SHARDS // 2, 30), gw.stats()
            owner, other = gateways
            chat = next(str(c) for c in range(100) if owner.cluster.serves(
                owner.store.session_key_for(_source(str(c)))))
            yield Pair(owner=owner, other=other, adapter=adapter, chat=chat, home=home,
                       key=owner.store.session_key_for(_source(chat)),
                       owner_api=admin_api(owner), other_api=admin_api(other))
        finally:
            for gw in gateways:
                gw.stop(drain_timeout=5)
            pykka.ActorRegistry.stop_all(block=True, timeout=10)


@pytest.mark.postgres
class TestEveryNodeAnswers:
    def test_list_show_and_cancel_from_a_node_that_does_not_serve_the_session(self, pair):
        running = pair.other.submit(MessageEvent(source=_source(pair.chat), text="sleep 60"))
        wait_until(lambda: getattr(pair.owner.session_statistics(pair.key), "running", False),
                   30, 0.05, "the turn running on its owner")
        queued = pair.other.submit(MessageEvent(source=_source(pair.chat), text="after"))
        assert pair.other.session_statistics(pair.key) is None  # no actor on this node

        def listed() -> dict:
            status, body = admin_call(pair.other_api, "/v1/admin/sessions",
                                      query="state=running")
            assert status == 200
            return {s["session_key"]: s for s in body["sessions"]}

        wait_until(lambda: listed().get(pair.key, {}).get("queue_depth") == 1,
                   30, 0.05, "the message behind the running turn in the owner's inbox")
        summary = listed()[pair.key]
        assert summary["running"] is True and summary["chat_id"] == pair.chat
        status, shown = admin_call(pair.other_api, admin_path(pair.key))
        assert status == 200 and shown["running"] is True and shown["queue_depth"] == 1
        assert queued in [event["event_id"] for event in shown["inbox"]]

        before = len(pair.adapter.sent)
        status, body = admin_call(pair.other_api, admin_path(pair.key, "cancel"), method="POST")
        assert status == 202 and body["event_id"]
        wait_until(lambda: any(m.text == "Stopped" for m in pair.adapter.sent[before:]),
                   30, 0.05, "the owner stopped the turn")
        [stopped] = [m for m in pair.adapter.sent[before:] if m.text == "Stopped"]
        assert running in stopped.in_reply_to and stopped.final
        # as the chat's /stop: the follow-up in the slot is discarded, and named too
        assert body["event_id"] in stopped.in_reply_to and queued in stopped.in_reply_to
        assert pair.owner.wait_idle(30)

    def test_unsuspend_is_carried_to_the_owner(self, pair):
        pair.other.submit(MessageEvent(source=_source(pair.chat), text="hi"))
        wait_until(lambda: "echo: hi" in pair.adapter.texts(pair.chat), 30, 0.05,
                   "the owner's answer")
        assert pair.owner.store.suspend_session(pair.key)
        status, body = admin_call(pair.other_api, "/v1/admin/sessions", query="state=suspended")
        assert [s["session_key"] for s in body["sessions"]] == [pair.key]

        status, body = admin_call(pair.other_api, admin_path(pair.key, "unsuspend"), method="POST")
        assert status == 202 and body["forwarded"] is True and body["action"] == "unsuspend"
        wait_until(lambda: not pair.owner.store.get(pair.key).suspended,
                   30, 0.05, "the owner cleared the suspension")
        # it went through the shared inbox, and was consumed there by the owner
        wait_until(lambda: pair.owner.store.backend.sql(
            "SELECT consumed_reason FROM inbox WHERE event_id = %s",
            (body["event_id"],)) == [("operator",)], 30, 0.05, "the control event consumed")
        assert not pair.other.store.stored_entries(pair.key)[0].suspended
        # no turn, no message: the chat was told nothing
        assert pair.owner.wait_idle(30)

        # the owner itself runs it at once
        assert pair.owner.store.suspend_session(pair.key)
        status, body = admin_call(pair.owner_api, admin_path(pair.key, "unsuspend"), method="POST")
        assert (status, body) == (200, {"session_key": pair.key, "suspended": False})
        unknown = "agent:main:telegram:dm:nobody"
        assert admin_call(pair.other_api, admin_path(unknown, "unsuspend"), method="POST")[0] == 404

    def test_the_cluster_view(self, pair, capsys):
        status, view = admin_call(pair.other_api, "/v1/admin/cluster")
        assert status == 200 and view["node_id"] == pair.other.store.node_id
        ids = {pair.owner.store.node_id, pair.other.store.node_id}
        assert {n["node_id"]: n["state"] for n in view["nodes"]} == dict.fromkeys(ids, "live")
        assert all(n["heartbeat_at"] and n["shards"] == SHARDS // 2 for n in view["nodes"])
        assert [lease["shard"] for lease in view["leases"]] == list(range(SHARDS))
        assert all(lease["state"] == "held" and lease["owner"] in ids and lease["epoch"] >= 1
                   and lease["expires_in"] > 0 for lease in view["leases"])
        assert view["shards"] == SHARDS and view["adapter_leases"] == []
        assert admin_call(pair.other_api, "/v1/admin/cluster", method="POST")[0] == 405

        server = wsgiref.simple_server.make_server(
            "127.0.0.1", 0, pair.other_api, handler_class=_Quiet)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            url = f"http://127.0.0.1:{server.server_port}"
            code = main(["admin", "cluster", "--home", str(pair.home), "--url", url,
                         "--admin-token", ADMIN])
        finally:
            server.shutdown()
            server.server_close()
        out = capsys.readouterr().out
        assert code == 0, out
        assert f"answered by node {pair.other.store.node_id}" in out
        assert f"cluster: {SHARDS} shards" in out and "nodes: 2 live, 0 leaving, 0 dead" in out
        assert all(node in out for node in ids) and f"leases: {SHARDS} held" in out


class _Quiet(wsgiref.simple_server.WSGIRequestHandler):
    def log_message(self, *args) -> None:  # (no request lines in the test's output)
        pass


class TestNotACluster:
    def test_the_cluster_route_is_404_on_a_single_gateway(self, tmp_path):
        gw = Gateway(tmp_path / "home", load_config({}, env={}),
                     adapters=[InMemoryAdapter("telegram")])
        gw.start()
        try:
            status, body = admin_call(admin_api(gw), "/v1/admin/cluster")
        finally:
            gw.stop()
            pykka.ActorRegistry.stop_all(block=True, timeout=10)
        assert status == 404 and body["error"].startswith("not a cluster")


class TestControlEvents:
    """A control event left unconsumed in the inbox (its node died after accepting it) is
    carried out by whoever serves the session next: here a single gateway's restart
    replays it."""

    def test_replayed_after_a_restart(self, tmp_path):
        adapter = InMemoryAdapter("telegram")
        source = _source("7")

        def started() -> Gateway:
            gw = Gateway(tmp_path / "home", load_config({}, env={}), adapters=[adapter])
            gw.start()
            return gw

        gw = started()
        try:
            gw.submit(MessageEvent(source=source, text="hello"))
            assert gw.wait_idle(30)
            key = gw.store.session_key_for(source)
            assert gw.store.suspend_session(key)
            control = control_event(gw.store.get(key).origin, "unsuspend")
            gw.store.accept_event(key, control)  # durable, never dispatched here
            unknown = control_event(source, "no-such-action")
            gw.store.accept_event(key, unknown)
        finally:
            gw.stop()
        gw = started()
        try:
            assert gw.wait_idle(30)
            assert gw.store.get(key).suspended is False
            assert gw.store.pending_inbox() == []
            reasons = {row["event_id"]: row["consumed_reason"] for row in gw.store.rows("inbox")}
            assert reasons[control.event_id] == "operator"
            assert reasons[unknown.event_id] == "dropped"
            assert adapter.texts("7") == ["echo: hello"]  # no turn, nothing said
        finally:
            gw.stop()
            pykka.ActorRegistry.stop_all(block=True, timeout=10)
