"""Slack and WhatsApp on two real cluster nodes (``hermes-actors run`` on one PostgreSQL
database, the fake platform APIs in this process).

* Webhooks (Slack's Events API, WhatsApp's Cloud API) may reach any node: an event posted
  to a node that does not hold the session's shard is stored in the shared inbox there and
  answered once by the shard's owner; Slack's retry to the other node is a duplicate.
* Socket Mode is a pull adapter: only the node holding the lease ``slack:<app id>`` keeps
  the websocket open; when it is killed (SIGKILL) the other connects once the lease
  expired, and what is sent then is answered once.

What the tests wait on is what the database says (shard and adapter lease owners) and what
the fake servers saw; nothing sleeps for a guessed time.
"""

from __future__ import annotations

from collections import Counter

import pytest
from slack_adapter.fake_slack_api import APP_TOKEN, TEAM, message, signed
from slack_adapter.fake_slack_api import SIGNING_SECRET as SLACK_SECRET
from slack_adapter.fake_slack_api import TOKEN as SLACK_TOKEN
from slack_adapter.fake_socket_mode import FakeSocketMode
from whatsapp_adapter.fake_graph_api import (
    APP_SECRET,
    PHONE_NUMBER_ID,
    VERIFY_TOKEN,
    post_webhook,
    text_message,
)
from whatsapp_adapter.fake_graph_api import TOKEN as WHATSAPP_TOKEN

from hermes_actors.cluster.shards import shard_of

from .cluster_harness import (
    SHARDS,
    adapter_lease,
    configured_nodes,
    node_id,
    shard_owners,
    sql,
    stop_all,
    until,
)
from .conftest import GatewayProcess

pytestmark = [pytest.mark.cluster, pytest.mark.postgres, pytest.mark.slow]

ENV = {"SLACK_BOT_TOKEN": SLACK_TOKEN, "SLACK_SIGNING_SECRET": SLACK_SECRET,
       "SLACK_APP_TOKEN": APP_TOKEN, "WHATSAPP_TOKEN": WHATSAPP_TOKEN,
       "WHATSAPP_APP_SECRET": APP_SECRET, "WHATSAPP_VERIFY_TOKEN": VERIFY_TOKEN}
LEASE = "slack:A0APP"


@pytest.fixture
def start_pair(postgres_dsn, tmp_path):
    """``start_pair(config)`` → two nodes on one database, each with ``config`` added."""
    nodes: list[GatewayProcess] = []

    def start(config: dict) -> list[GatewayProcess]:
        nodes.extend(configured_nodes(tmp_path, postgres_dsn, config, ENV))
        return nodes

    yield start
    stop_all(nodes)


def _not_owner(dsn: str, nodes: list[GatewayProcess], key: str) -> GatewayProcess:
    """The node that does not hold ``key``'s shard now."""
    owner = shard_owners(dsn)[shard_of(key, SHARDS)]
    return next(node for node in nodes if node_id(node) != owner)


def _balanced(dsn: str, nodes: list[GatewayProcess]) -> bool:
    owners = list(shard_owners(dsn).values())
    return len(owners) == SHARDS and all(owners.count(node_id(n)) == SHARDS // 2
                                         for n in nodes)


def _post_slack(node: GatewayProcess, payload: dict, **signing) -> tuple[int, object]:
    raw, headers = signed(payload, **signing)
    status, _, body = node.request("POST", "/slack/events", raw=raw, headers=headers,
                                   token=False)
    return status, body


class TestWebhooksOnTwoNodes:
    def test_posted_to_the_node_without_the_shard_answered_once(
            self, start_pair, postgres_dsn, slack_api, graph_api):
        nodes = start_pair({
            "platforms": ["slack", "whatsapp"],
            "slack": {"api_base_url": slack_api.url},
            "whatsapp": {"api_base_url": graph_api.url, "phone_number_id": PHONE_NUMBER_ID},
        })
        until(lambda: _balanced(postgres_dsn, nodes), "the shards balanced over two nodes")
        channels = [f"D{n}" for n in range(1, 5)]
        numbers = [f"6012345670{n}" for n in range(1, 5)]
        first = None
        for channel in channels:
            payload = message(channel, f"hi {channel}", channel_type="im")
            first = first or payload
            node = _not_owner(postgres_dsn, nodes, f"agent:main:slack:dm:{TEAM}:{channel}")
            assert _post_slack(node, payload) == (200, {"ok": True, "duplicate": False})
        for number in numbers:
            node = _not_owner(postgres_dsn, nodes, f"agent:main:whatsapp:dm:+{number}")
            assert post_webhook(node.port, text_message(number, f"hi {number}"))[0] == 200
        # Slack's retry of the first event, to the other node: the shared inbox has it
        assert first is not None
        owner = next(n for n in nodes if n is not _not_owner(
            postgres_dsn, nodes, f"agent:main:slack:dm:{TEAM}:{first['event']['channel']}"))
        status, body = _post_slack(owner, first, retry=1)
        assert status == 200 and body["duplicate"] is True
        slack_api.wait_for(lambda: len(slack_api.posted()) >= len(channels))
        graph_api.wait_for(lambda: len(graph_api.sends()) >= len(numbers))
        slack_texts = Counter((c.params["channel"], c.params["text"])
                              for c in slack_api.posted())
        assert slack_texts == Counter({(c, f"echo: hi {c}"): 1 for c in channels})
        for number in numbers:
            assert graph_api.texts(number) == [f"echo: hi {number}"]


def _lease(dsn: str) -> tuple[str | None, int] | None:
    return adapter_lease(dsn, LEASE)


class TestSocketModeOnTwoNodes:
    def test_one_connection_then_the_other_node_after_a_kill(
            self, start_pair, postgres_dsn, slack_api):
        socket_mode = FakeSocketMode()
        slack_api.socket_url = socket_mode.url
        try:
            nodes = start_pair({"platforms": ["slack"],
                                "slack": {"api_base_url": slack_api.url, "mode": "socket"}})
            ids = [node_id(n) for n in nodes]
            until(lambda: (lease := _lease(postgres_dsn)) is not None and lease[0] in ids,
                  "a node holds the Socket Mode lease")
            holder = ids.index(_lease(postgres_dsn)[0])  # type: ignore[index]
            socket_mode.wait_for(lambda: socket_mode.open_now == 1)
            socket_mode.send(message("D1", "before", channel_type="im"))
            slack_api.wait_posted(1, "D1")
            # (killed between its send and the ledger's record, a reply goes out again)
            until(lambda: sql(postgres_dsn, "SELECT count(*) FROM deliveries WHERE"
                              " chat_id = 'D1' AND state = 'delivered'")[0][0] == 1,
                  "the reply recorded as delivered")
            nodes[holder].kill()  # its websocket closes with it
            socket_mode.wait_for(lambda: socket_mode.open_now == 0)
            until(lambda: _lease(postgres_dsn) == (ids[1 - holder], 2),
                  "the other node took the lease")
            socket_mode.wait_for(lambda: socket_mode.open_now == 1)
            envelope = socket_mode.send(message("D1", "after", channel_type="im"))
            slack_api.wait_posted(2, "D1")
            socket_mode.wait_for(lambda: socket_mode.acked(envelope))
            assert [c.params["text"] for c in slack_api.posted("D1")] == [
                "echo: before", "echo: after"]
            assert socket_mode.opened == 2 and socket_mode.max_open == 1
            nodes[1 - holder].stderr.expect(f"event=cluster_adapter_gained .*adapter={LEASE} "
                                            "epoch=2")
        finally:
            socket_mode.close()
