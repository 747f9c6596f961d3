"""The adapter's sends (split, in order, failures as data) and its "typing…" indicator."""

from __future__ import annotations

import queue
import threading

import pytest

from hermes_actors import SessionSource
from hermes_actors.adapters.base import TypingAwareAdapter
from hermes_actors.adapters.telegram import TelegramAdapter
from hermes_actors.adapters.telegram.indicator import TypingIndicator
from hermes_actors.config import TelegramConfig
from hermes_actors.errors import ConfigError

from .fake_bot_api import TOKEN


@pytest.fixture
def adapter(bot_api):
    made = TelegramAdapter(TelegramConfig(api_base_url=bot_api.url), TOKEN)
    made.connect()
    yield made
    made.close()


DM = SessionSource("telegram", chat_id="42")
TOPIC = SessionSource("telegram", chat_id="-100123", chat_type="thread", thread_id="12")


class TestConnect:
    """A rejected token is a configuration error naming the variable, not the token."""

    def test_rejected_token(self, bot_api):
        wrong = "111:definitely-not-the-right-secret"
        adapter = TelegramAdapter(TelegramConfig(api_base_url=bot_api.url), wrong)
        try:
            with pytest.raises(ConfigError, match="rejected the bot token in "
                                                  "TELEGRAM_BOT_TOKEN") as caught:
                adapter.connect()
        finally:
            adapter.close()
        assert "definitely-not" not in str(caught.value) and not adapter.connected

    def test_connected_with_the_bot_name(self, adapter):
        assert adapter.connected and adapter.bot.username == "hermes_test_bot"
        assert isinstance(adapter, TypingAwareAdapter)


class TestSend:
    """Replies go to the chat and topic, split in order; refusals come back as data."""

    def test_a_long_reply_is_sent_in_order_to_the_topic(self, adapter, bot_api):
        paragraphs = [f"paragraph {n} " + "x" * 1500 for n in range(5)]
        result = adapter.send(TOPIC, "\n\n".join(paragraphs))
        assert result.success
        sent = bot_api.sent("-100123")
        assert [c.params["text"] for c in sent] == [
            paragraphs[0] + "\n\n" + paragraphs[1], paragraphs[2] + "\n\n" + paragraphs[3],
            paragraphs[4]]
        assert {c.params["message_thread_id"] for c in sent} == {"12"}

    def test_a_rate_limit_mid_reply_returns_what_is_left(self, adapter, bot_api):
        first, second = "a" * 4000, "b" * 100
        bot_api.fail("sendMessage", 429, "Too Many Requests: retry after 1", retry_after=1,
                     after=1)
        result = adapter.send(DM, first + "\n\n" + second)
        assert not result.success and result.retry_after == 1.0 and result.unsent == second
        assert [c.params["text"] for c in bot_api.sent()] == [first]

    def test_a_rate_limit_on_the_first_part_leaves_the_whole_text(self, adapter, bot_api):
        bot_api.fail("sendMessage", 429, "Too Many Requests: retry after 2", retry_after=2)
        result = adapter.send(DM, "hi")
        assert (result.success, result.retry_after, result.unsent) == (False, 2.0, None)

    def test_a_blocked_bot_is_a_refusal_for_good(self, adapter, bot_api):
        bot_api.block("42")
        result = adapter.send(DM, "hello?")
        assert not result.success and result.retry_after is None and result.permanent
        assert "403" in result.error and "blocked" in result.error

    def test_a_rate_limit_is_not_for_good(self, adapter, bot_api):
        bot_api.fail("sendMessage", 429, "Too Many Requests: retry after 2", retry_after=2)
        assert not adapter.send(DM, "hi").permanent


class Steps:
    """An injected renewal wait the test steps by hand."""

    def __init__(self) -> None:
        self.asked: queue.Queue[float] = queue.Queue()
        self.go: queue.Queue[bool] = queue.Queue()

    def __call__(self, stopped: threading.Event, seconds: float) -> bool:
        self.asked.put(seconds)
        self.go.get(timeout=30)
        return stopped.is_set()


class TestTyping:
    """"typing…" is sent at once, renewed each interval, and stopped for good."""

    def test_renewed_until_stopped(self):
        actions: list[int] = []
        steps = Steps()
        indicator = TypingIndicator(lambda: actions.append(1) or True, 4.0, wait=steps).start()
        assert steps.asked.get(timeout=30) == 4.0 and len(actions) == 1
        steps.go.put(True)
        assert steps.asked.get(timeout=30) == 4.0 and len(actions) == 2
        indicator.stop()
        steps.go.put(True)
        assert indicator.finished.wait(30) and len(actions) == 2

    def test_a_refused_action_ends_it(self):
        indicator = TypingIndicator(lambda: False, 4.0, wait=Steps()).start()
        assert indicator.finished.wait(30) and indicator.sent == 0

    def test_stop_waits_for_an_action_in_flight(self):
        entered, release = threading.Event(), threading.Event()

        def slow_action() -> bool:
            entered.set()
            return release.wait(30)

        indicator = TypingIndicator(slow_action, 4.0, wait=Steps()).start()
        assert entered.wait(30)
        stopper = threading.Thread(target=indicator.stop)
        stopper.start()
        stopper.join(0.2)
        assert stopper.is_alive()  # the action is still on its way: stop() waits for it
        release.set()
        stopper.join(30)
        assert not stopper.is_alive() and indicator.finished.wait(30) and indicator.sent == 1

    def test_the_adapter_sends_typing_to_the_topic(self, adapter, bot_api):
        indicator = adapter.start_typing(TOPIC)
        [action] = bot_api.wait_for(lambda: bot_api.of("sendChatAction"))
        indicator.stop()
        assert (action.params["chat_id"], action.params["action"],
                action.params["message_thread_id"]) == ("-100123", "typing", "12")
