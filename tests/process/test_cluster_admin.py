"""The operator routes on real ``hermes-actors run`` cluster nodes (issue 39): a node that
does not serve a session lists it, shows it and cancels its running turn on the owner;
``GET /v1/admin/cluster`` and ``admin cluster`` show both nodes where they answer (the
address each node records), and every shard's lease. One pair of nodes for all checks."""

from __future__ import annotations

import urllib.parse

import pytest

from .cluster_harness import SHARDS, Cluster, until
from .conftest import run_cli

pytestmark = [pytest.mark.cluster, pytest.mark.postgres, pytest.mark.slow]

ADMIN = "operator-t0ken"


def _admin(node, method: str, path: str) -> tuple[int, object]:
    status, _, body = node.request(method, path, token=ADMIN, timeout=30)
    return status, body


def test_any_node_answers_for_every_session(postgres_dsn, tmp_path):
    pair = Cluster(postgres_dsn, tmp_path, count=2, env={"HERMES_HTTP_ADMIN_TOKEN": ADMIN})
    try:
        until(pair.balanced, "the shards spread over the two nodes")
        owner, other = pair.nodes
        chat = pair.chats_of(0)[0]
        key = f"agent:main:webhook:dm:{chat}"
        running = other.post(chat, "sleep 60")["event_id"]
        until(lambda: pair.marked([chat]) == 1, "the turn running on its owner")

        status, body = _admin(other, "GET", "/v1/admin/sessions?state=running")
        assert status == 200 and [s["session_key"] for s in body["sessions"]] == [key]
        assert body["sessions"][0]["running"] is True
        path = "/v1/admin/sessions/" + urllib.parse.quote(key, safe="")
        status, shown = _admin(other, "GET", path)
        assert status == 200 and shown["running"] is True and shown["chat_id"] == chat

        status, cancel = _admin(other, "POST", path + "/cancel")
        assert status == 202

        def stopped() -> list[dict]:
            return [row for row in pair.outbox(chat) if row["text"] == "Stopped"]

        until(stopped, "the owner stopped the turn")
        [notice] = stopped()
        assert running in notice["in_reply_to"] and cancel["event_id"] in notice["in_reply_to"]
        assert notice["kind"] != "ack"  # the cancelled message's final answer

        # an action that is no chat command: a control event the owner runs and consumes
        sent = run_cli("admin", "unsuspend", key, "--url", other.url, "--admin-token", ADMIN)
        assert sent.returncode == 0, sent.stderr
        assert f"{key}: unsuspend sent to the node serving it (event " in sent.stdout
        owner.stderr.expect(f"event=operator_action action=unsuspend session_key={key} ")
        until(lambda: pair._rows("SELECT 1 FROM inbox WHERE session_key = %s AND"
                                 " consumed_reason = 'operator'", (key,)),
              "the control event consumed")

        status, view = _admin(other, "GET", "/v1/admin/cluster")
        assert status == 200 and view["node_id"] == pair.ids[1]
        addresses = {node["node_id"]: node["address"] for node in view["nodes"]}
        assert addresses == {pair.ids[0]: f"127.0.0.1:{owner.port}",
                             pair.ids[1]: f"127.0.0.1:{other.port}"}
        assert {lease["shard"] for lease in view["leases"]
                if lease["state"] == "held"} == set(range(SHARDS))

        table = run_cli("admin", "cluster", "--url", owner.url, "--admin-token", ADMIN)
        assert table.returncode == 0, table.stderr
        assert f"answered by node {pair.ids[0]}" in table.stdout
        assert f"127.0.0.1:{other.port}" in table.stdout and f"leases: {SHARDS} held" in table.stdout

        # a delete asked of the other node: the owner deletes the conversation whole (the
        # control event that carried it among its inbox rows)
        deleted = run_cli("admin", "delete", key, "--url", other.url, "--admin-token", ADMIN,
                          "--yes")
        assert deleted.returncode == 0, deleted.stderr
        assert f"{key}: delete sent to the node serving it (event " in deleted.stdout
        owner.stderr.expect(f"event=operator_action action=delete session_key={key} ")
        for table_name in ("routing", "inbox", "deliveries", "outbox", "sessions"):
            assert not pair._rows(f"SELECT 1 FROM {table_name} WHERE session_key = %s",
                                  (key,)), table_name
        assert _admin(other, "GET", path)[0] == 404
    finally:
        pair.stop()
