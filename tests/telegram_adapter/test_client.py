"""The Bot API client: telebot pointed at the fake server, and a token that never leaks."""

from __future__ import annotations

import logging
import socket

import pytest

from hermes_actors.adapters.telegram import BotClient, TelegramError, mask_token

from .fake_bot_api import TOKEN


@pytest.fixture
def client(bot_api):
    made = BotClient(TOKEN, bot_api.url)
    yield made
    made.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class TestCalls:
    """The four methods reach the configured server with their parameters."""

    def test_get_me_send_and_chat_action(self, client, bot_api):
        assert client.get_me().username == "hermes_test_bot"
        sent = client.send_message("42", "hello", thread_id="12")
        client.send_chat_action("-100", None)
        assert sent.message_id >= 1
        [message] = bot_api.of("sendMessage")
        assert (message.params["chat_id"], message.params["text"],
                message.params["message_thread_id"]) == ("42", "hello", "12")
        [action] = bot_api.of("sendChatAction")
        assert action.params["action"] == "typing" and "message_thread_id" not in action.params

    def test_get_updates_sends_offset_and_long_poll_timeout(self, client, bot_api):
        bot_api.message({"id": 42, "type": "private"}, "hi")
        [update] = client.get_updates(None, 5)
        assert update.message.text == "hi"
        assert client.get_updates(update.update_id + 1, 1) == []
        params = bot_api.of("getUpdates")[-1].params
        assert params["offset"] == str(update.update_id + 1) and params["timeout"] == "1"

    def test_a_second_server_in_one_process_is_refused_while_the_first_is_open(self, client):
        with pytest.raises(Exception, match="one server per process"):
            BotClient(TOKEN, "http://127.0.0.1:1")


class TestErrors:
    """Failures keep the status and retry_after, and never name the token."""

    def test_rejected_token(self, bot_api):
        other = "987654321:another-secret-that-is-wrong"
        client = BotClient(other, bot_api.url)
        try:
            with pytest.raises(TelegramError) as caught:
                client.get_me()
        finally:
            client.close()
        assert caught.value.status == 401 and caught.value.rejected_token
        assert other not in str(caught.value) and "another-secret" not in str(caught.value)

    def test_rate_limit_carries_retry_after(self, client, bot_api):
        bot_api.fail("sendMessage", 429, "Too Many Requests: retry after 3", retry_after=3)
        with pytest.raises(TelegramError) as caught:
            client.send_message("42", "x")
        assert (caught.value.status, caught.value.retry_after) == (429, 3.0)
        assert "Too Many Requests" in str(caught.value)

    def test_unreachable_server_is_masked(self):
        client = BotClient(TOKEN, f"http://127.0.0.1:{_free_port()}")
        try:
            with pytest.raises(TelegramError) as caught:
                client.get_me()
        finally:
            client.close()
        text = str(caught.value)
        assert caught.value.status is None and "cannot reach" in text
        assert TOKEN not in text and TOKEN.split(":")[1] not in text and "<token>" in text
        assert caught.value.__suppress_context__  # the library's exception is not shown

    def test_debug_logs_of_the_http_library_are_masked(self, client, caplog):
        with caplog.at_level(logging.DEBUG):
            client.get_me()
        assert TOKEN not in caplog.text and TOKEN.split(":")[1] not in caplog.text
        assert "/bot<token>/getMe" in caplog.text  # urllib3 logged the request, masked

    def test_mask_token(self):
        assert mask_token(f"GET /bot{TOKEN}/x and {TOKEN.split(':')[1]}", TOKEN) == \
            "GET /bot<token>/x and <token>"
