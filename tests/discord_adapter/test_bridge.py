"""The bridge process (hikari on plain asyncio) through ``BridgeClient``, against the fake
Discord: its requests, its Gateway events handed over one at a time, its end."""

from __future__ import annotations

import threading

import pytest

from hermes_actors.adapters.discord import INTENTS, BridgeClient, DiscordError
from hermes_actors.adapters.discord.client import BridgeError

from .fake_discord import ALICE, BOT_ID, GUILD, TOKEN, FakeDiscord

pytestmark = pytest.mark.discord


class Events:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.events: list[dict] = []
        self.states: list[dict] = []

    def on_event(self, message: dict) -> None:
        with self.cond:
            self.events.append(message)
            self.cond.notify_all()

    def on_gateway(self, message: dict) -> None:
        with self.cond:
            self.states.append(message)
            self.cond.notify_all()

    def wait(self, predicate, timeout: float = 15.0):
        with self.cond:
            assert self.cond.wait_for(predicate, timeout), (self.events, self.states)


@pytest.fixture(scope="module")
def fake():
    server = FakeDiscord()
    yield server
    server.close()


@pytest.fixture(scope="module")
def bridge(fake):
    events = Events()
    client = BridgeClient({"token": TOKEN, "api_base_url": fake.url, "gateway_url": None,
                           "intents": INTENTS, "log_level": "info"},
                          on_event=events.on_event, on_gateway=events.on_gateway)
    client.start()
    client.events = events  # type: ignore[attr-defined]
    yield client
    client.close()


def test_rest_requests_and_their_failures(bridge, fake):
    assert bridge.request("me") == {"id": BOT_ID, "username": "hermes"}
    sent = bridge.request("send", channel="500", content="hi <@1> @everyone")
    [call] = fake.posted("500")
    assert sent["id"] and call.body["content"] == "hi <@1> @everyone"
    assert call.body["allowed_mentions"] == {"parse": ["users"]}  # no @everyone, no roles
    assert bridge.request("typing", channel="500") == {}
    assert fake.typing("500")
    fake.thread("701", "600", "plans", announce=False)
    assert bridge.request("channel", channel="701") == {
        "id": "701", "type": 11, "parent_id": "600", "name": "plans"}
    fake.fail("POST", "/channels/500/messages", 429, retry_after=2.5)
    with pytest.raises(DiscordError) as limited:
        bridge.request("send", channel="500", content="again")
    assert (limited.value.kind, limited.value.retry_after) == ("rate_limited", 2.5)
    fake.fail("POST", "/channels/500/messages", 403, code=50001, message="Missing Access")
    with pytest.raises(DiscordError) as refused:
        bridge.request("send", channel="500", content="again")
    assert (refused.value.kind, refused.value.status, refused.value.code) == ("http", 403,
                                                                              50001)
    with pytest.raises(DiscordError) as unknown:
        bridge.request("channel", channel="999")
    assert unknown.value.status == 404


def test_gateway_events_one_at_a_time_in_order(bridge, fake):
    events = bridge.events
    assert bridge.request("open") == {}
    [session] = fake.wait_identified()
    assert session.identify["intents"] == INTENTS and session.compressor is not None
    events.wait(lambda: any(s["state"] == "ready" for s in events.states))
    fake.dispatch("THREAD_CREATE", {"id": "702", "type": 11, "parent_id": "600",
                                    "guild_id": GUILD, "name": "t", "owner_id": "1"})
    for n in range(3):
        fake.message("500", f"m{n}")
    fake.dispatch("TYPING_START", {"channel_id": "500"})  # not handed over
    events.wait(lambda: len(events.events) == 1)
    first = events.events[0]
    assert first["name"] == "THREAD_CREATE"
    bridge.taken(first["e"])
    events.wait(lambda: len(events.events) == 2)
    # the next is handed over only once this one was answered
    assert len(events.events) == 2
    for expected in ("m0", "m1", "m2"):
        events.wait(lambda expected=expected: events.events[-1]["d"].get("content") ==
                    expected)
        last = events.events[-1]
        assert last["name"] == "MESSAGE_CREATE" and last["d"]["author"] == ALICE
        bridge.taken(last["e"], dropped=expected == "m2")
    assert bridge.request("close", timeout=10) == {"forwarded": 3, "dropped": 1}
    fake.wait_for(lambda: not fake.live())


def test_closing_its_input_ends_it(fake):
    client = BridgeClient({"token": TOKEN, "api_base_url": fake.url, "intents": INTENTS},
                          on_event=lambda m: None)
    client.start()
    pid = client.pid
    client.close()
    assert not client.alive and client._proc.returncode == 0 and pid
    with pytest.raises(BridgeError):
        client.request("me")


def test_a_rejected_token_is_a_401(fake):
    client = BridgeClient({"token": "MTE.x.not-the-token", "api_base_url": fake.url,
                           "intents": INTENTS}, on_event=lambda m: None)
    client.start()
    try:
        with pytest.raises(DiscordError) as rejected:
            client.request("me")
        assert rejected.value.status == 401 and "not-the-token" not in str(rejected.value)
    finally:
        client.close()
