"""The Discord adapter in the real ``hermes-actors run`` process, against the fake Discord.

The process is configured as an operator would (``platforms: [discord]``, the token in
``DISCORD_BOT_TOKEN``), with ``discord.api_base_url`` pointing at the fake's REST root (whose
``/gateway/bot`` names the fake Gateway). Messages are dispatched on the Gateway as Discord
sends them. The conversation tests share one process and one Gateway session (each in
channels of its own); tests wait for what the fake sees, nothing sleeps.
"""

from __future__ import annotations

import json

import pytest
from process.conftest import GatewayProcess, platform_home, run_cli, stopped_after

from hermes_actors.testing import db_rows

from .fake_discord import ALICE, BOB, BOT_ID, BOT_USER, GUILD, TOKEN, FakeDiscord

pytestmark = pytest.mark.discord

ENV = {"DISCORD_BOT_TOKEN": TOKEN}
API_TOKEN = "bearer-for-the-api"


def _config(fake: FakeDiscord, **discord) -> dict:
    return {"platforms": ["discord"], "http": {"token": API_TOKEN},
            "discord": {"api_base_url": fake.url, **discord}}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One fake Discord and one gateway serving it, for the conversation tests."""
    fake = FakeDiscord()
    home = platform_home(tmp_path_factory.mktemp("discord"), _config(fake))
    with stopped_after() as started:
        gateway = GatewayProcess(home, "--agent", "scripted",
                                 env={**ENV, "HERMES_LOG_LEVEL": "debug"}, token=API_TOKEN)
        started.append(gateway)
        fake.wait_identified()
        yield fake, gateway
    fake.close()


def _inbox(home) -> dict[str, str]:
    """message id -> event id of the messages stored."""
    return {json.loads(r["payload"])["source"]["message_id"]: r["event_id"]
            for r in db_rows(home, "inbox")}


def _delivered(fake: FakeDiscord, home, channel: str) -> dict:
    """The channel's ledger row once it is recorded delivered."""
    def row():
        rows = [r for r in db_rows(home, "deliveries") if r["chat_id"] == channel
                or r["thread_id"] == channel]
        return rows and rows[-1]["state"] == "delivered" and rows[-1]
    return fake.wait_for(row)


class TestConversation:
    def test_dm_thread_and_guild_channel_answered_where_they_came_from(self, shared):
        fake, gateway = shared
        assert f"event=discord_connected bot=hermes id={BOT_ID}" in gateway.stderr.text()
        dm = fake.message("510", "sleep 0.3")  # (a turn long enough to show "typing…")
        fake.text_channel("610", "general")
        fake.message("610", "hi from alice", guild_id=GUILD)
        fake.message("610", "hi from bob", guild_id=GUILD, author=BOB)
        fake.thread("711", "610", "plans")  # announced: THREAD_CREATE
        fake.thread("712", "610", "quiet", announce=False)  # found by GET /channels/712
        fake.message("711", "in the thread", guild_id=GUILD)
        fake.message("712", "in the quiet one", guild_id=GUILD, author=BOB)
        fake.wait_posted(1, "510")
        assert fake.texts("510") == ["slept 0.3"]
        assert fake.typing("510") and fake.typing("510")[0].at <= fake.posted("510")[0].at
        fake.wait_posted(2, "610")
        assert sorted(fake.texts("610")) == ["echo: hi from alice", "echo: hi from bob"]
        fake.wait_posted(1, "711")
        fake.wait_posted(1, "712")
        # a thread is shared: the agent sees who spoke
        assert fake.texts("711") == ["echo: [Alice] in the thread"]
        assert fake.texts("712") == ["echo: [Bob] in the quiet one"]
        keys = {s["session_key"] for s in gateway.request("GET", "/v1/sessions")[2]["sessions"]}
        assert {"agent:main:discord:dm:510",
                f"agent:main:discord:group:610:{ALICE['id']}",
                f"agent:main:discord:group:610:{BOB['id']}",
                "agent:main:discord:thread:610:711",
                "agent:main:discord:thread:610:712"} <= keys
        # the answers name their events
        events = _inbox(gateway.home)
        row = _delivered(fake, gateway.home, "510")
        assert row["in_reply_to"].split() == [events[dm["id"]]]
        assert _delivered(fake, gateway.home, "711")["thread_id"] == "711"

    def test_a_redelivered_event_and_bot_messages(self, shared):
        fake, gateway = shared
        payload = fake.message("520", "once")
        fake.dispatch("MESSAGE_CREATE", payload)  # the same message again
        fake.message("520", "my own words", author=BOT_USER)
        fake.message("520", "a bot", author={**BOB, "bot": True})
        fake.wait_posted(1, "520")
        fake.message("520", "marker")  # (after the answer: no interrupt notice between)
        fake.wait_for(lambda: "echo: marker" in fake.texts("520"))
        assert fake.texts("520") == ["echo: once", "echo: marker"]
        gateway.stderr.expect(f"event=discord_duplicate message_id={payload['id']}")
        assert list(_inbox(gateway.home)).count(payload["id"]) == 1

    def test_a_rate_limit_is_waited_out_and_a_long_reply_split_in_order(self, shared):
        fake, gateway = shared
        fake.fail("POST", "/channels/530/messages", 429, retry_after=1)
        fake.message("530", "slow down")
        [sent] = fake.wait_posted(1, "530")
        attempts = fake.attempts("530")
        assert len(attempts) == 2 and attempts[1].at - attempts[0].at >= 1.0
        assert sent.body["content"] == "echo: slow down"
        assert _delivered(fake, gateway.home, "530")["attempts"] == 2
        long = "\n\n".join(f"part {i}: " + "y" * 1500 for i in range(4))
        fake.message("531", long)
        parts = fake.wait_for(lambda: len(fake.posted("531")) >= 4 and fake.texts("531"))
        assert all(len(p) <= 2000 for p in parts)
        assert "\n\n".join(parts) == "echo: " + long
        output = gateway.stderr.text() + gateway.stdout.text()
        assert "delivery rate-limited platform=discord retry_after=1.0" in output
        assert TOKEN not in output and TOKEN.split(".")[2] not in output


@pytest.fixture
def discord_gateway(tmp_path, discord_api):
    """``start(env=None)`` → a ready gateway serving the fake Discord."""
    with stopped_after() as started:
        def start(*args: str, env: dict | None = None) -> GatewayProcess:
            home = platform_home(tmp_path, _config(discord_api))
            gateway = GatewayProcess(home, "--agent", "scripted", *args,
                                     env={**ENV, **(env or {})}, token=API_TOKEN)
            started.append(gateway)
            return gateway

        yield start


def test_kill_after_the_message_was_taken_is_answered_once_after_the_restart(
        discord_gateway, discord_api):
    fake = discord_api
    first = discord_gateway(env={"HERMES_ACTORS_CRASHPOINT": "after_message_accepted"})
    fake.wait_identified()
    payload = fake.message("540", "durable")
    assert first.proc.wait(timeout=30) == 137  # stored, then killed before anything else
    assert fake.posted("540") == []
    fake.wait_for(lambda: not fake.live())  # its bridge ended with it
    discord_gateway()
    fake.wait_identified()
    [answer] = fake.wait_posted(1, "540")
    assert answer.body["content"] == "echo: durable"
    fake.dispatch("MESSAGE_CREATE", payload)  # Discord sending it again changes nothing
    fake.message("540", "marker")
    fake.wait_for(lambda: "echo: marker" in fake.texts("540"))
    assert fake.texts("540") == ["echo: durable", "echo: marker"]


class TestStartErrors:
    """A missing or rejected token is one clear line and exit 2, never a traceback."""

    def test_missing_token(self, tmp_path, discord_api):
        home = platform_home(tmp_path, _config(discord_api))
        done = run_cli("run", "--home", str(home), "--port", "0")
        assert done.returncode == 2, done.stderr
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "DISCORD_BOT_TOKEN" in lines[0], lines
        assert "is not set" in lines[0]
        assert not (home / "state.db").exists()

    def test_rejected_token(self, tmp_path, discord_api):
        home = platform_home(tmp_path, _config(discord_api))
        wrong = "MTEwMDAwMDAwMDAwMDAwMDAwMQ.GtEsT1.this-secret-is-not-the-right-one"
        done = run_cli("run", "--home", str(home), "--port", "0",
                       env={"DISCORD_BOT_TOKEN": wrong})
        assert done.returncode == 2, done.stderr
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, lines
        assert "Discord rejected the bot token in DISCORD_BOT_TOKEN (401" in lines[0]
        assert "this-secret" not in done.stderr + done.stdout
        assert not (home / "state.db").exists()
