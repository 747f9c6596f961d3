"""The Telegram adapter in the real ``hermes-actors run`` process, against the fake Bot API.

The process is configured as an operator would (``platforms: [telegram]``, the token in
``TELEGRAM_BOT_TOKEN``), with ``telegram.api_base_url`` pointing at the fake server. Tests
wait for what the fake server sees (its condition is notified at every request) and for the
process's own log lines; nothing sleeps.
"""

from __future__ import annotations

import json

import pytest
from process.conftest import GatewayProcess, platform_home, run_cli, stopped_after

from hermes_actors.testing import db_rows

from .fake_bot_api import TOKEN, group, private


def _config(bot_api, **telegram) -> dict:
    return {"platforms": ["telegram"], "telegram": {"api_base_url": bot_api.url, **telegram}}


@pytest.fixture
def telegram_gateway(tmp_path, bot_api):
    """``start(*args, env=None, **telegram)`` → a ready gateway serving the fake bot."""
    with stopped_after() as started:
        def start(*args: str, env: dict | None = None, **telegram) -> GatewayProcess:
            home = platform_home(tmp_path, _config(bot_api, **telegram))
            gateway = GatewayProcess(home, "--agent", "scripted", *args,
                                     env={"TELEGRAM_BOT_TOKEN": TOKEN, **(env or {})})
            started.append(gateway)
            return gateway

        yield start


def _texts(calls) -> list[str]:
    return [c.params["text"] for c in calls]


class TestConversation:
    """A DM, a group and a forum topic each get their answer in their own place."""

    def test_dm_group_and_topic(self, telegram_gateway, bot_api):
        gateway = telegram_gateway()
        assert "event=telegram_connected bot=@hermes_test_bot" in gateway.stderr.text()
        bot_api.message(private(42), "hello")
        bot_api.message(group(-100123, "Ops room"), "hi all")
        topic = group(-100555, "Forum", forum=True)
        bot_api.message(topic, "in the topic", thread_id=12)
        bot_api.wait_sent(3)
        assert _texts(bot_api.sent(42)) == ["echo: hello"]
        assert _texts(bot_api.sent(-100123)) == ["echo: hi all"]
        [in_topic] = bot_api.sent(-100555)
        # a topic is shared by its members: the agent sees who spoke
        assert in_topic.params["text"] == "echo: [Alice] in the topic"
        assert in_topic.params["message_thread_id"] == "12"
        # "typing…" went to each chat before its answer
        for chat in ("42", "-100123", "-100555"):
            actions = [c for c in bot_api.of("sendChatAction") if c.params["chat_id"] == chat]
            assert actions and actions[0].at <= bot_api.sent(chat)[0].at
        keys = {s["session_key"] for s in gateway.request("GET", "/v1/sessions")[2]["sessions"]}
        assert keys == {"agent:main:telegram:dm:42", "agent:main:telegram:group:-100123:7",
                        "agent:main:telegram:thread:-100555:12"}
        # every update was acknowledged once its message was durable
        last = max(u for u in range(1000, bot_api.next_update))
        bot_api.wait_for(lambda: bot_api.acknowledged() > last)
        assert gateway.stop(timeout=15) == 0  # the long poll in progress does not hold it

    def test_a_long_reply_is_split_in_order(self, telegram_gateway, bot_api):
        telegram_gateway()
        paragraphs = [f"part {n}: " + "x" * 1000 for n in range(7)]
        bot_api.message(private(42), "\n\n".join(paragraphs))
        bot_api.wait_sent(2, 42)
        parts = _texts(bot_api.sent(42))
        assert len(parts) == 2 and all(len(p) <= 4096 for p in parts)
        assert "\n\n".join(parts) == "echo: " + "\n\n".join(paragraphs)

    def test_allowed_chats_drop_others_with_one_line(self, telegram_gateway, bot_api):
        gateway = telegram_gateway(allowed_chats=[42])
        bot_api.message(private(666), "let me in")
        bot_api.message(private(666), "please")
        bot_api.message(private(42), "friend")
        bot_api.wait_sent(1, 42)
        assert bot_api.sent(666) == []
        assert gateway.stop() == 0
        log = gateway.stderr.text()
        assert log.count("event=telegram_dropped chat_id=666 ") == 1


class TestRefusals:
    """429 is waited out and retried, 403 abandons the row at once; the token is in no log
    line."""

    def test_rate_limit_blocked_chat_and_a_masked_debug_log(self, telegram_gateway, bot_api,
                                                           tmp_path):
        bot_api.fail("sendMessage", 429, "Too Many Requests: retry after 1", retry_after=1,
                     chat_id=42)
        bot_api.block(13)
        bot_api.fail("getUpdates", 502, "Bad Gateway")
        gateway = telegram_gateway(env={"HERMES_LOG_LEVEL": "debug"})
        bot_api.message(private(42), "slow down")
        [sent] = bot_api.wait_sent(1, 42)
        attempts = [c for c in bot_api.of("sendMessage") if c.params["chat_id"] == "42"]
        assert len(attempts) == 2 and attempts[1].at - attempts[0].at >= 1.0
        assert sent.params["text"] == "echo: slow down"
        bot_api.message(private(13), "you are blocked")
        bot_api.message(private(14), "after")
        bot_api.wait_sent(1, 14)
        # Two sessions: nothing orders the blocked chat's attempt before the other's reply
        bot_api.wait_for(lambda: [c for c in bot_api.calls
                                  if c.method == "sendMessage" and c.params["chat_id"] == "13"])
        blocked = [c for c in bot_api.of("sendMessage") if c.params["chat_id"] == "13"]
        assert len(blocked) == 1  # no retry storm
        assert gateway.stop() == 0
        rows = {r["chat_id"]: r for r in db_rows(tmp_path / "home", "deliveries")}
        assert (rows["42"]["state"], rows["42"]["attempts"]) == ("delivered", 2)
        assert (rows["13"]["state"], rows["13"]["attempts"]) == ("abandoned", 1)
        output = gateway.stderr.text() + gateway.stdout.text()
        assert "event=telegram_poll_failed" in output and "/bot<token>/" in output
        assert TOKEN not in output and TOKEN.split(":")[1] not in output
        assert TOKEN not in json.dumps(rows)


class TestStartErrors:
    """A missing or rejected token is one clear line and exit 2, never a traceback."""

    def test_missing_token(self, tmp_path, bot_api):
        home = platform_home(tmp_path, _config(bot_api))
        done = run_cli("run", "--home", str(home), "--port", "0")
        assert done.returncode == 2
        assert "TELEGRAM_BOT_TOKEN" in done.stderr and "is not set" in done.stderr
        assert "Traceback" not in done.stderr

    def test_rejected_token(self, tmp_path, bot_api):
        home = platform_home(tmp_path, _config(bot_api))
        wrong = "42:this-secret-is-not-the-right-one"
        done = run_cli("run", "--home", str(home), "--port", "0",
                       env={"TELEGRAM_BOT_TOKEN": wrong})
        assert done.returncode == 2, done.stderr
        assert "rejected the bot token in TELEGRAM_BOT_TOKEN" in done.stderr
        assert "this-secret" not in done.stderr + done.stdout
        assert "Traceback" not in done.stderr
        assert not (home / "state.db").exists()  # refused before anything started


class TestKillBetweenReceiveAndAcknowledge:
    """``kill -9`` after updates arrived and before they were acknowledged, then a restart:
    every update is answered exactly once."""

    @pytest.mark.parametrize("point", ["telegram_update_received", "after_message_accepted"])
    def test_exactly_once(self, telegram_gateway, bot_api, point):
        first = telegram_gateway(env={"HERMES_ACTORS_CRASHPOINT": point})
        chats = {41: "one", 42: "two", 43: "three"}  # one chat each: no follow-up merging
        for chat, text in chats.items():
            bot_api.message(private(chat), text)
        assert first.proc.wait(timeout=30) == 137
        assert f"crash point {point} reached" in first.stderr.text()
        assert bot_api.sent() == [] and bot_api.acknowledged() == 0
        telegram_gateway()
        for chat in chats:
            bot_api.wait_sent(1, chat)
            bot_api.message(private(chat), "marker")  # answered after anything still owed
        for chat, text in chats.items():
            bot_api.wait_for(lambda chat=chat: "echo: marker" in _texts(bot_api.sent(chat)))
            # (the marker may come while the turn is settling: an interrupt notice first)
            answers = [t for t in _texts(bot_api.sent(chat)) if t.startswith("echo:")]
            assert answers == [f"echo: {text}", "echo: marker"]
        assert bot_api.acknowledged() == bot_api.next_update
