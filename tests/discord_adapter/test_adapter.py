"""``DiscordAdapter`` in process, on a stand-in bridge: how events are taken (durable before
taken, in order, retried, dropped), threads looked up, replies split and refusals judged.
The real bridge process is exercised in ``test_bridge.py`` and ``test_process.py``."""

from __future__ import annotations

import logging
import threading

import pytest

from hermes_actors.adapters.discord import DiscordAdapter, DiscordError
from hermes_actors.config import load_config
from hermes_actors.errors import HermesActorsError, StoreRejectedError, StoreUnavailableError
from hermes_actors.model.source import SessionSource

from .fake_discord import ALICE, BOT_ID, BOT_USER, GUILD, TOKEN, message_object

pytestmark = pytest.mark.discord


class StandInBridge:
    """Answers requests from ``answers`` (op -> data, or a DiscordError to raise; a list is
    used up in order) and records them; ``taken`` answers are recorded in order."""

    def __init__(self, hello, *, on_event, on_gateway, on_exit) -> None:
        self.hello, self.on_event, self.on_gateway, self.on_exit = (hello, on_event,
                                                                    on_gateway, on_exit)
        self.requests: list[tuple[str, dict]] = []
        self.answers: dict[str, object] = {"me": {"id": BOT_ID, "username": "hermes"}}
        self.acks: list[tuple[int, bool]] = []
        self.acked = threading.Condition()
        self.killed = self.closed = False
        self.seq = 0

    def start(self) -> None:
        pass

    def request(self, op, *, timeout=None, **params):
        self.requests.append((op, params))
        answer = self.answers.get(op, {})
        if isinstance(answer, list):
            answer = answer.pop(0) if len(answer) > 1 else answer[0]
        if isinstance(answer, BaseException):
            raise answer
        if op == "send":
            return {"id": f"m{len(self.requests)}"}
        return answer

    def taken(self, event, *, dropped=False) -> None:
        with self.acked:
            self.acks.append((event, not dropped))
            self.acked.notify_all()

    def kill(self) -> None:
        self.killed = True

    def close(self, timeout=10.0) -> None:
        self.closed = True

    # -- what tests do ----------------------------------------------------------------------

    def push(self, name, data) -> int:
        self.seq += 1
        self.on_event({"t": "event", "e": self.seq, "name": name, "d": data})
        return self.seq

    def wait_acked(self, seq, timeout=10.0) -> bool:
        with self.acked:
            assert self.acked.wait_for(lambda: any(e == seq for e, _ in self.acks), timeout)
            return dict(self.acks)[seq]


class Harness:
    def __init__(self, **discord) -> None:
        config = load_config({"platforms": ["discord"], "discord": discord}, env={})
        self.bridges: list[StandInBridge] = []
        self.waits: list[float] = []
        self.submitted: list = []
        self.submit_errors: list[Exception] = []

        def factory(hello, **callbacks):
            bridge = StandInBridge(hello, **callbacks)
            self.bridges.append(bridge)
            return bridge

        def wait(event, seconds):  # (the pause is recorded, not waited)
            self.waits.append(seconds)
            return event.wait(0.01)

        self.adapter = DiscordAdapter(config.discord, TOKEN, bridge_factory=factory,
                                      wait=wait, log_level="info")

    @property
    def bridge(self) -> StandInBridge:
        return self.bridges[-1]

    def submit(self, event):
        if self.submit_errors:
            raise self.submit_errors.pop(0)
        for earlier in self.submitted:
            if earlier.source.message_id == event.source.message_id:
                return earlier.event_id  # the gateway's duplicate answer
        self.submitted.append(event)
        return event.event_id

    def start(self, **polling):
        self.adapter.connect()
        self.adapter.start_polling(self.submit, **polling)
        return self.bridge

    def message(self, channel="500", text="hello", **fields) -> int:
        return self.bridge.push("MESSAGE_CREATE", message_object(
            channel, text, author=fields.pop("author", ALICE), **fields))


@pytest.fixture
def harness(caplog):
    caplog.set_level(logging.INFO, logger="hermes_actors.discord")
    made: list[Harness] = []

    def make(**discord) -> Harness:
        made.append(Harness(**discord))
        return made[-1]

    yield make
    for h in made:
        h.adapter.close()


class TestTaking:
    def test_taken_only_once_submitted_in_order(self, harness):
        h = harness()
        bridge = h.start()
        assert bridge.hello["token"] == TOKEN and bridge.hello["intents"] & (1 << 15)
        assert h.adapter.lease_name == f"discord:{BOT_ID}"
        assert [op for op, _ in bridge.requests] == ["me", "open"]
        for n in range(3):
            assert bridge.wait_acked(h.message(text=f"m{n}")) is True
        assert [e.text for e in h.submitted] == ["m0", "m1", "m2"]
        assert h.adapter.poller.submitted == 3

    def test_a_redelivery_is_answered_by_the_gateway_as_a_duplicate(self, harness, caplog):
        h = harness()
        bridge = h.start()
        payload = message_object("500", "once", author=ALICE, message_id="4242")
        for _ in range(2):
            assert bridge.wait_acked(bridge.push("MESSAGE_CREATE", payload))
        assert len(h.submitted) == 1
        assert "event=discord_duplicate message_id=4242" in caplog.text

    def test_own_and_empty_messages_are_taken_and_not_submitted(self, harness, caplog):
        h = harness()
        bridge = h.start()
        assert bridge.wait_acked(h.message(author=BOT_USER, text="my own"))
        assert bridge.wait_acked(h.message("600", "", guild_id=GUILD))
        assert h.submitted == []
        assert "Message Content Intent" in caplog.text

    def test_a_store_that_cannot_take_it_now_is_waited_out(self, harness):
        h = harness()
        bridge = h.start()
        h.submit_errors = [StoreUnavailableError("database away")] * 2
        assert bridge.wait_acked(h.message(text="durable")) is True
        assert [e.text for e in h.submitted] == ["durable"] and h.waits == [1.0, 2.0]

    def test_what_the_store_refuses_for_good_is_dropped(self, harness, caplog):
        h = harness()
        bridge = h.start()
        h.submit_errors = [StoreRejectedError("too big")]
        assert bridge.wait_acked(h.message(text="huge")) is True
        assert h.submitted == [] and "event=discord_rejected" in caplog.text

    def test_a_stopping_gateway_and_a_passed_deadline_drop_it(self, harness):
        h = harness()
        h.adapter.connect()
        left = [5.0]
        h.adapter.start_polling(h.submit, time_left=lambda: left[0])
        bridge = h.bridge
        assert bridge.wait_acked(h.message(text="in time")) is True
        left[0] = 0.0
        assert bridge.wait_acked(h.message(text="too late")) is False
        left[0] = 5.0
        h.submit_errors = [HermesActorsError("the gateway is stopping")]
        assert bridge.wait_acked(h.message(text="stopping")) is False
        h.adapter.stop_polling(wait=1)
        assert ("close", {}) in bridge.requests
        assert bridge.wait_acked(h.message(text="after the stop")) is False
        assert [e.text for e in h.submitted] == ["in time"]

    def test_allowed_channels(self, harness, caplog):
        h = harness(allowed_channels=["600", "500"])
        bridge = h.start()
        bridge.push("THREAD_CREATE", {"id": "700", "type": 11, "parent_id": "600"})
        for channel, fields in (("500", {}), ("700", {"guild_id": GUILD}),
                                ("800", {"guild_id": GUILD}), ("800", {"guild_id": GUILD}),
                                ("900", {})):
            bridge.wait_acked(h.message(channel, "hi", **fields))
        assert [(e.source.chat_id, e.source.thread_id) for e in h.submitted] == [
            ("500", None), ("600", "700")]
        assert caplog.text.count("event=discord_dropped channel_id=800 ") == 1
        assert "event=discord_dropped channel_id=900 chat_type=dm" in caplog.text


class TestThreads:
    def test_an_unseen_channel_is_looked_up_once(self, harness):
        h = harness()
        bridge = h.start()
        bridge.answers["channel"] = {"id": "701", "type": 11, "parent_id": "600",
                                     "name": "from rest"}
        for _ in range(2):
            bridge.wait_acked(h.message("701", "in it", guild_id=GUILD))
        assert [op for op, _ in bridge.requests].count("channel") == 1
        assert {(e.source.chat_type, e.source.chat_id, e.source.thread_id)
                for e in h.submitted} == {("thread", "600", "701")}

    def test_a_channel_the_bot_cannot_read_is_a_plain_channel(self, harness):
        h = harness()
        bridge = h.start()
        bridge.answers["channel"] = DiscordError("channel: 403", kind="http", status=403)
        bridge.wait_acked(h.message("601", "hi", guild_id=GUILD))
        assert h.submitted[0].source.chat_type == "group"

    def test_a_failed_lookup_waits_and_tries_again(self, harness):
        h = harness()
        bridge = h.start()
        bridge.answers["channel"] = [DiscordError("channel: 502", kind="http", status=502),
                                     {"id": "602", "type": 0}]
        assert bridge.wait_acked(h.message("602", "hi", guild_id=GUILD)) is True
        assert h.waits == [1.0] and h.submitted[0].source.chat_type == "group"


class TestSending:
    def test_split_in_order_into_the_thread(self, harness):
        h = harness()
        bridge = h.start()
        text = "\n\n".join(f"part {n}: " + "y" * 1500 for n in range(3))
        target = SessionSource("discord", chat_id="600", chat_type="thread", thread_id="700")
        result = h.adapter.send(target, text)
        sends = [p for op, p in bridge.requests if op == "send"]
        assert result.success and [p["channel"] for p in sends] == ["700"] * 3
        assert "\n\n".join(p["content"] for p in sends) == text

    def test_refusals(self, harness):
        h = harness()
        bridge = h.start()
        dm = SessionSource("discord", chat_id="500")
        bridge.answers["send"] = DiscordError("send: rate limited", kind="rate_limited",
                                              retry_after=2.5)
        limited = h.adapter.send(dm, "x")
        assert (limited.success, limited.retry_after, limited.permanent) == (False, 2.5, False)
        for status, permanent in ((403, True), (404, True), (401, True), (500, False)):
            bridge.answers["send"] = DiscordError(f"send: {status}", kind="http",
                                                  status=status)
            assert h.adapter.send(dm, "x").permanent is permanent
        bridge.answers["send"] = DiscordError("send: reset", kind="connection")
        assert h.adapter.send(dm, "x").permanent is False

    def test_the_rest_of_a_split_reply_is_owed_after_a_rate_limit(self, harness):
        h = harness()
        bridge = h.start()
        first = "a" * 1995
        bridge.answers["send"] = [{"id": "1"}, DiscordError("limited", kind="rate_limited",
                                                            retry_after=1.0)]
        result = h.adapter.send(SessionSource("discord", chat_id="500"),
                                f"{first}\n\nsecond\n\nthird")
        assert result.retry_after == 1.0 and result.unsent == "second\n\nthird"

    def test_typing(self, harness):
        h = harness()
        bridge = h.start()
        indicator = h.adapter.start_typing(SessionSource("discord", chat_id="600",
                                                         thread_id="700"))
        try:
            assert indicator.sent or indicator.finished.wait(0.2) or indicator.sent
        finally:
            indicator.stop()
        assert ("typing", {"channel": "700"}) in bridge.requests
        assert h.waits[0] == 8.0  # (renewed every 8 s)


class TestBridgeLife:
    def test_a_rejected_token_is_a_config_error(self, harness):
        h = harness()
        h.adapter._bridge_factory = lambda hello, **cb: _rejecting(hello, **cb)
        with pytest.raises(Exception, match="Discord rejected the bot token in "
                                            "DISCORD_BOT_TOKEN") as raised:
            h.adapter.connect()
        assert TOKEN not in str(raised.value) and not h.adapter.connected

    def test_an_exited_bridge_is_started_again_with_its_gateway(self, harness):
        h = harness()
        first = h.start()
        first.on_exit(1)
        _eventually(lambda: len(h.bridges) == 2 and h.adapter.connected
                    and [op for op, _ in h.bridge.requests] == ["open"])
        h.adapter.stop_polling(wait=1)
        h.bridge.on_exit(3)  # (a close while connecting: started again at once, no Gateway)
        _eventually(lambda: len(h.bridges) == 3 and h.adapter.connected)
        assert h.bridge.requests == []
        assert h.waits == [1.0]  # (the first restart waited, the second did not)

    def test_a_close_that_times_out_kills_the_bridge(self, harness):
        h = harness()
        bridge = h.start()
        bridge.answers["close"] = DiscordError("close: no answer", kind="connection")
        h.adapter.stop_polling(wait=0.1)
        assert bridge.killed and h.adapter.poller.stopped


def _eventually(predicate, timeout=5.0) -> None:
    """(The restart runs on a thread of its own.)"""
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return
        done.wait(0.01)
    raise AssertionError("timed out")


def _rejecting(hello, **callbacks):
    bridge = StandInBridge(hello, **callbacks)
    bridge.answers["me"] = DiscordError("me: 401 401: Unauthorized", kind="http", status=401)
    return bridge
