"""Telegram on two cluster nodes in one process, against the fake Bot API: exactly one node
polls at a time (the one holding the bot's adapter lease), both send the replies of the
sessions they serve, and when the polling node stops or dies the other takes over, every
update accepted and answered exactly once."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from telegram_adapter.fake_bot_api import TOKEN, FakeBotApi, private

from hermes_actors import Gateway, load_config
from hermes_actors.adapters.http_metrics import GatewayMetrics
from hermes_actors.adapters.telegram import TelegramAdapter
from hermes_actors.config import TelegramConfig
from hermes_actors.testing import wait_until

pytestmark = pytest.mark.postgres

SHARDS = 4
LEASE = "telegram:" + TOKEN.partition(":")[0]


def _config(dsn: str):
    return load_config({
        "store": {"backend": "postgres", "dsn": dsn, "pool_size": 2},
        "cluster": {"enabled": True, "shards": SHARDS, "lease_ttl": 3, "heartbeat": 0.2},
        "busy_input_mode": "queue",
    }, env={})


@pytest.fixture
def nodes(postgres_dsn, tmp_path, bot_api):
    """``nodes(n)`` starts ``n`` gateways, each with a Telegram adapter of its own for the
    one bot; all are stopped after the test."""
    started: list[tuple[Gateway, TelegramAdapter]] = []

    def start(n: int) -> list[tuple[Gateway, TelegramAdapter]]:
        for _ in range(n):
            adapter = TelegramAdapter(TelegramConfig(api_base_url=bot_api.url,
                                                     poll_timeout=20), TOKEN)
            adapter.connect()
            gw = Gateway(tmp_path / f"node{len(started)}", _config(postgres_dsn),
                         adapters=[adapter])
            gw.start()
            started.append((gw, adapter))
        return list(started)

    yield start
    for gw, adapter in started:
        gw.stop(drain_timeout=5)
        adapter.close()


def _pollers(pairs) -> list[Gateway]:
    """The gateways whose pull adapters hold the bot's lease now."""
    return [gw for gw, _ in pairs if gw.running and gw.pull_adapters is not None
            and LEASE in gw.pull_adapters.statistics().held]


def _one_poller(pairs) -> Gateway:
    [holder] = wait_until(lambda: (lambda p: p if len(p) == 1 else None)(_pollers(pairs)),
                          30, 0.02, "exactly one poller")
    return holder


def _replies(bot_api: FakeBotApi) -> Counter:
    """How often each ``echo: ...`` reply was sent (acks and notices aside)."""
    return Counter(c.params["text"] for c in bot_api.sent()
                   if c.params["text"].startswith("echo: "))


def _send(bot_api: FakeBotApi, texts: list[str]) -> None:
    for n, text in enumerate(texts):
        bot_api.message(private(100 + n % 6, f"user{n % 6}"), text,
                        user={"id": 100 + n % 6, "is_bot": False, "first_name": "u"})


def _wait_answered(bot_api: FakeBotApi, texts: list[str], timeout: float = 30.0) -> None:
    want = {f"echo: {t}" for t in texts}
    bot_api.wait_for(lambda: want <= set(_replies(bot_api)), timeout)


class TestOnePoller:
    def test_one_node_polls_both_answer_and_a_stop_hands_polling_over(self, nodes, bot_api):
        pairs = nodes(2)
        holder = _one_poller(pairs)
        other = next(gw for gw, _ in pairs if gw is not holder)
        assert other.pull_adapters.statistics().held == {}
        for gw, _ in pairs:  # the shards balanced: each node serves half the sessions
            assert gw.cluster.wait_for(lambda s: s.serving == SHARDS // 2, 30), gw.stats()
        held = f'hermes_cluster_adapter_leases_held{{adapter="{LEASE}"}}'
        assert f"{held} 1.0" in GatewayMetrics(holder).render().decode()
        assert f"{held} 0.0" in GatewayMetrics(other).render().decode()
        first = [f"a{n}" for n in range(12)]
        _send(bot_api, first)
        _wait_answered(bot_api, first)
        # Both nodes answered (each the sessions of its shards), through its own adapter.
        stats = {gw.store.node_id: gw.stats()["cluster"] for gw, _ in pairs}
        assert all(s["serving"] == SHARDS // 2 for s in stats.values()), stats
        submitted = {gw.store.node_id: a.poller.submitted if a.poller else 0
                     for gw, a in pairs}
        assert submitted == {holder.store.node_id: len(first), other.store.node_id: 0}

        # Updates waiting while the holder stops: the other node fetches them.
        second = [f"b{n}" for n in range(12)]
        _send(bot_api, second[:6])
        holder.stop(drain_timeout=5)
        assert _one_poller(pairs) is other
        _send(bot_api, second[6:])
        _wait_answered(bot_api, first + second)
        counts = _replies(bot_api)
        assert all(counts[f"echo: {t}"] == 1 for t in first + second), counts
        assert bot_api.max_polling == 1  # never two getUpdates at once
        stats = other.stats()["cluster"]["adapters"]
        assert stats["held"] == {LEASE: 2} and stats["configured"] == (LEASE,)
        assert f"{held} 1.0" in GatewayMetrics(other).render().decode()

    def test_a_dead_poller_is_replaced_after_the_lease_expires(self, nodes, bot_api):
        pairs = nodes(2)
        holder = _one_poller(pairs)
        other = next(gw for gw, _ in pairs if gw is not holder)
        before = [f"c{n}" for n in range(6)]
        _send(bot_api, before)
        _wait_answered(bot_api, before)
        halted = time.monotonic()
        holder.cluster.manager.halt()  # as kill -9 would: nothing released, nothing renewed
        after = [f"d{n}" for n in range(6)]
        _send(bot_api, after)
        assert _one_poller(pairs) is other
        assert time.monotonic() - halted > 2.0  # it waited for the lease (ttl 3) to expire
        _wait_answered(bot_api, before + after)
        counts = _replies(bot_api)
        assert all(counts[f"echo: {t}"] == 1 for t in before + after), counts
        assert bot_api.max_polling == 1

    def test_updates_fetched_again_after_a_takeover_are_answered_once(self, nodes, bot_api):
        pairs = nodes(2)
        holder = _one_poller(pairs)
        other = next(gw for gw, _ in pairs if gw is not holder)
        polled = next(a for gw, a in pairs if gw is holder)
        # The polls that would acknowledge the next updates fail, so the holder stops
        # with them submitted but not acknowledged: Telegram still holds them.
        bot_api.fail("getUpdates", 502, "Bad Gateway", times=100,
                     offset_from=bot_api.next_update + 1)
        texts = [f"e{n}" for n in range(5)]
        _send(bot_api, texts)
        wait_until(lambda: polled.poller.submitted == len(texts), 30, 0.02,
                   "the holder submitted all")
        bot_api.wait_for(lambda: bot_api.failures[0].times < 100)  # its ack poll failed
        holder.stop(drain_timeout=5)
        with bot_api.cond:
            bot_api.failures.clear()
        assert _one_poller(pairs) is other
        taker = next(a for gw, a in pairs if gw is other)
        # The new holder fetched them again; the inbox knew every one (its ingress key).
        wait_until(lambda: taker.poller is not None and taker.poller.submitted >= len(texts),
                   30, 0.02, "the new holder's fetch of the unacknowledged updates")
        assert other.ingress.statistics().refused["duplicate"] >= len(texts)
        _wait_answered(bot_api, texts)
        counts = _replies(bot_api)
        assert all(counts[f"echo: {t}"] == 1 for t in texts), counts
        assert bot_api.max_polling == 1
