"""Telegram on two real cluster nodes (``hermes-actors run`` with ``platforms: [telegram]``,
one bot, the fake Bot API in this process): one node at a time polls it, the one holding
the bot's adapter lease; when it is killed (SIGKILL) the other takes over once the lease
expired, when it stops (SIGTERM) at once; every update is answered exactly once.

What the test waits on is what the database says (the lease's owner) and what the fake
server saw; nothing sleeps for a guessed time.
"""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest
from telegram_adapter.fake_bot_api import TOKEN, FakeBotApi, private

from .cluster_harness import (
    HEARTBEAT,
    LEASE_TTL,
    adapter_lease,
    configured_nodes,
    node_id,
    stop_all,
    until,
)
from .conftest import GatewayProcess

pytestmark = [pytest.mark.cluster, pytest.mark.postgres, pytest.mark.slow]

LEASE = "telegram:" + TOKEN.partition(":")[0]


def _lease(dsn: str) -> tuple[str | None, int] | None:
    """The bot's lease: (owner while valid, epoch), or None before any node took it."""
    return adapter_lease(dsn, LEASE)


@pytest.fixture
def telegram_pair(postgres_dsn, tmp_path, bot_api):
    nodes = configured_nodes(tmp_path, postgres_dsn, {
        "platforms": ["telegram"],
        "telegram": {"api_base_url": bot_api.url, "poll_timeout": 20},
        "busy_input_mode": "queue",
    }, {"TELEGRAM_BOT_TOKEN": TOKEN})
    yield nodes
    stop_all(nodes)


def _send(bot_api: FakeBotApi, texts: list[str]) -> None:
    for n, text in enumerate(texts):
        bot_api.message(private(200 + n % 5, f"user{n % 5}"), text,
                        user={"id": 200 + n % 5, "is_bot": False, "first_name": "u"})


def _answered_once(bot_api: FakeBotApi, texts: list[str], timeout: float = 60) -> None:
    want = {f"echo: {t}" for t in texts}

    def replies() -> Counter:
        return Counter(c.params["text"] for c in bot_api.sent()
                       if c.params["text"].startswith("echo: "))

    bot_api.wait_for(lambda: want <= set(replies()), timeout)
    counts = replies()
    assert all(counts[w] == 1 for w in want), counts


def _holder(dsn: str, nodes: list[GatewayProcess], epoch: int) -> int:
    """Wait until some node holds the lease under ``epoch``; its index."""
    ids = [node_id(n) for n in nodes]
    until(lambda: (lambda lease: lease is not None and lease[0] in ids
                   and lease[1] == epoch)(_lease(dsn)), f"the bot's lease at epoch {epoch}")
    lease = _lease(dsn)
    assert lease is not None
    return ids.index(lease[0])


class TestTelegramOnTwoNodes:
    def test_one_poller_then_kill_then_stop(self, telegram_pair, postgres_dsn, bot_api):
        nodes = telegram_pair
        holder = _holder(postgres_dsn, nodes, 1)
        other = 1 - holder
        nodes[holder].stderr.expect(f"event=cluster_adapter_gained .*adapter={LEASE} "
                                    "epoch=1")
        first = [f"p{n}" for n in range(10)]
        _send(bot_api, first)
        _answered_once(bot_api, first)

        # kill -9: the other node polls once the lease expired (lease_ttl), with epoch 2
        nodes[holder].kill()
        killed = time.monotonic()
        second = [f"q{n}" for n in range(10)]
        _send(bot_api, second)
        assert _holder(postgres_dsn, nodes, 2) == other
        assert time.monotonic() - killed > LEASE_TTL - 2 * HEARTBEAT
        _answered_once(bot_api, first + second)

        # A third node on the killed one's home; then SIGTERM of the polling node: it stops
        # polling and frees the lease, the newcomer takes it at its next round.
        nodes[holder] = GatewayProcess(nodes[holder].home, "--agent", "scripted",
                                       env={"TELEGRAM_BOT_TOKEN": TOKEN})
        until(lambda: "event=cluster_shards_gained" in nodes[holder].stderr.text(),
              "the restarted node joined")
        third = [f"r{n}" for n in range(6)]
        _send(bot_api, third[:3])
        nodes[other].stop(timeout=30)
        log = nodes[other].stderr.text()
        assert f"event=cluster_adapter_lost node={node_id(nodes[other])} adapter={LEASE} " \
               "epoch=2 reason=released" in log
        assert _holder(postgres_dsn, nodes, 3) == holder
        _send(bot_api, third[3:])
        _answered_once(bot_api, first + second + third)
        assert bot_api.max_polling == 1  # never two getUpdates of the bot at once

    def test_a_paused_poller_stops_by_its_deadline(self, telegram_pair, postgres_dsn,
                                                   bot_api):
        """SIGSTOP of the polling node past ``lease_ttl``: the other takes the lease once
        it expired and polls; the paused node, resumed, finds its local deadline passed
        and never polls or submits again under its old tenure."""
        nodes = telegram_pair
        holder = _holder(postgres_dsn, nodes, 1)
        other = 1 - holder
        first = [f"s{n}" for n in range(4)]
        _send(bot_api, first)
        _answered_once(bot_api, first)
        paused = nodes[holder]
        paused.signal(signal.SIGSTOP)
        try:
            second = [f"t{n}" for n in range(6)]
            _send(bot_api, second)
            assert _holder(postgres_dsn, nodes, 2) == other
            _answered_once(bot_api, first + second)
        finally:
            paused.signal(signal.SIGCONT)
        # expired: its next round found the local deadline passed; fenced: a renewal it
        # had sent just before the pause was answered after it, refused (either, by timing)
        paused.stderr.expect(f"event=cluster_adapter_lost node={node_id(paused)} "
                             f"adapter={LEASE} epoch=1 reason=(expired|fenced)", timeout=30)
        third = [f"u{n}" for n in range(4)]
        _send(bot_api, third)
        _answered_once(bot_api, first + second + third)
        assert _lease(postgres_dsn) == (node_id(nodes[other]), 2)  # not taken back
        assert bot_api.max_polling == 1
