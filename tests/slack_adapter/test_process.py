"""The Slack adapter in the real ``hermes-actors run`` process, against the fake Web API.

The process is configured as an operator would (``platforms: [slack]``, the secrets in
``SLACK_BOT_TOKEN`` and ``SLACK_SIGNING_SECRET``), with ``slack.api_base_url`` pointing at
the fake; events are posted, signed, to ``/slack/events`` as Slack posts them. Tests wait
for what the fake sees and for the process's own log lines; nothing sleeps.
"""

from __future__ import annotations

import json
import time

import pytest
from process.conftest import GatewayProcess, platform_home, run_cli, stopped_after

from hermes_actors.testing import db_rows

from .fake_slack_api import BOT_USER, SIGNING_SECRET, TEAM, TOKEN, message, signed

SECRETS = {"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": SIGNING_SECRET}


def _config(slack_api, **slack) -> dict:
    return {"platforms": ["slack"], "http": {"token": "bearer-for-the-api"},
            "slack": {"api_base_url": slack_api.url, **slack}}


@pytest.fixture
def slack_gateway(tmp_path, slack_api):
    """``start(*args, env=None)`` → a ready gateway serving the fake Slack app."""
    with stopped_after() as started:
        def start(*args: str, env: dict | None = None) -> GatewayProcess:
            home = platform_home(tmp_path, _config(slack_api))
            gateway = GatewayProcess(home, "--agent", "scripted", *args,
                                     env={**SECRETS, **(env or {})})
            started.append(gateway)
            return gateway

        yield start


def post_event(gateway, payload, **signing) -> tuple[int, object]:
    raw, headers = signed(payload, **signing)
    # no bearer token: Slack authenticates by its signature
    status, _, body = gateway.request("POST", "/slack/events", raw=raw, headers=headers,
                                      token=False)
    return status, body


def _texts(calls) -> list[str]:
    return [c.params["text"] for c in calls]


def _inbox(home) -> list[dict]:
    return db_rows(home, "inbox")


class TestConversation:
    def test_verification_dm_thread_and_keys(self, slack_gateway, slack_api, tmp_path):
        gateway = slack_gateway()
        assert f"event=slack_connected bot=hermes user_id={BOT_USER}" in gateway.stderr.text()
        status, body = post_event(gateway, {"type": "url_verification", "challenge": "c-42",
                                            "token": "x"})
        assert (status, body) == (200, {"challenge": "c-42"})
        assert post_event(gateway, message("D1", "hello", channel_type="im"))[0] == 200
        thread = message("C1", "in the thread", thread_ts="1700.000001")
        assert post_event(gateway, thread)[0] == 200
        [dm] = slack_api.wait_posted(1, "D1")
        assert dm.params["text"] == "echo: hello" and "thread_ts" not in dm.params
        [in_thread] = slack_api.wait_posted(1, "C1")
        assert in_thread.params["thread_ts"] == "1700.000001"
        assert "in the thread" in in_thread.params["text"]
        keys = {s["session_key"] for s in gateway.request("GET", "/v1/sessions",
                                                           token="bearer-for-the-api")[2]
                ["sessions"]}
        assert keys == {f"agent:main:slack:dm:{TEAM}:D1",
                        f"agent:main:slack:thread:{TEAM}:C1:1700.000001"}
        assert gateway.stop() == 0
        # the answers name their events
        rows = {r["chat_id"]: r for r in db_rows(tmp_path / "home", "deliveries")}
        events = {json.loads(r["payload"])["source"]["chat_id"]: r["event_id"]
                  for r in _inbox(tmp_path / "home")}
        for chat in ("D1", "C1"):
            assert rows[chat]["state"] == "delivered"
            assert rows[chat]["in_reply_to"].split() == [events[chat]]

    def test_bad_or_stale_signatures_are_refused_and_nothing_is_stored(
            self, slack_gateway, slack_api, tmp_path):
        gateway = slack_gateway()
        payload = message("D2", "forged", channel_type="im")
        assert post_event(gateway, payload, secret="not-the-signing-secret")[0] == 401
        stale = int(time.time()) - 6 * 60
        assert post_event(gateway, payload, timestamp=stale)[0] == 401
        status, _, _ = gateway.request("POST", "/slack/events", raw=json.dumps(payload).encode(),
                                       token=False)
        assert status == 401
        # the bearer token is no way in either
        status, _, _ = gateway.request("POST", "/slack/events", raw=json.dumps(payload).encode(),
                                       token="bearer-for-the-api")
        assert status == 401
        # a good one goes through: nothing before it was kept
        assert post_event(gateway, message("D2", "real", channel_type="im"))[0] == 200
        slack_api.wait_posted(1, "D2")
        assert gateway.stop() == 0
        assert [json.loads(r["payload"])["text"] for r in _inbox(tmp_path / "home")] == ["real"]
        assert _texts(slack_api.posted("D2")) == ["echo: real"]

    def test_retried_event_bots_and_own_messages(self, slack_gateway, slack_api, tmp_path):
        gateway = slack_gateway()
        payload = message("D3", "once", channel_type="im", event_id="EvRETRY1")
        assert post_event(gateway, payload)[0] == 200
        status, body = post_event(gateway, payload, retry=1)
        assert status == 200 and body["duplicate"] is True
        for ignored in (message("D3", "from a bot", channel_type="im", bot_id="B9"),
                        message("D3", "bot message", channel_type="im", subtype="bot_message"),
                        message("D3", "my own", channel_type="im", user=BOT_USER)):
            assert post_event(gateway, ignored)[0] == 200
        assert post_event(gateway, message("D3", "marker", channel_type="im"))[0] == 200
        slack_api.wait_for(lambda: "echo: marker" in _texts(slack_api.posted("D3")))
        assert gateway.stop() == 0
        assert _texts(slack_api.posted("D3")) == ["echo: once", "echo: marker"]
        assert "event=slack_retry event_id=EvRETRY1 retry_num=1" in gateway.stderr.text()
        assert len(_inbox(tmp_path / "home")) == 2


class TestDelivery:
    def test_rate_limit_waited_out_and_long_reply_in_order(self, slack_gateway, slack_api,
                                                           tmp_path):
        slack_api.fail("chat.postMessage", 429, "ratelimited", retry_after=1)
        gateway = slack_gateway(env={"HERMES_LOG_LEVEL": "debug"})
        assert post_event(gateway, message("D4", "slow down", channel_type="im"))[0] == 200
        [sent] = slack_api.wait_posted(1, "D4")
        attempts = slack_api.attempts("D4")
        assert len(attempts) == 2 and attempts[1].at - attempts[0].at >= 1.0
        assert sent.params["text"] == "echo: slow down"
        long = "\n\n".join(f"part {i}: " + "y" * 1990 for i in range(5))
        assert post_event(gateway, message("D5", long, channel_type="im"))[0] == 200
        parts = slack_api.wait_for(lambda: len(slack_api.posted("D5")) >= 3
                                   and slack_api.posted("D5"))
        texts = _texts(parts)
        assert all(len(t) <= 4000 for t in texts)
        assert "\n\n".join(texts) == "echo: " + long
        assert gateway.stop() == 0
        rows = {r["chat_id"]: r for r in db_rows(tmp_path / "home", "deliveries")}
        assert (rows["D4"]["state"], rows["D4"]["attempts"]) == ("delivered", 2)
        output = gateway.stderr.text() + gateway.stdout.text()
        assert TOKEN not in output and SIGNING_SECRET not in output
        assert TOKEN not in json.dumps(rows)

    def test_kill_after_the_200_is_answered_once_after_the_restart(
            self, slack_gateway, slack_api):
        # the first answer cannot go out: Slack rate-limits it for long
        slack_api.fail("chat.postMessage", 429, "ratelimited", retry_after=60)
        first = slack_gateway()
        assert post_event(first, message("D6", "survive", channel_type="im"))[0] == 200
        slack_api.wait_for(lambda: slack_api.attempts("D6"))
        first.kill()
        assert first.proc.wait(timeout=30) != 0
        second = slack_gateway()
        slack_api.wait_posted(1, "D6")
        assert post_event(second, message("D6", "marker", channel_type="im"))[0] == 200
        slack_api.wait_for(lambda: "echo: marker" in _texts(slack_api.posted("D6")))
        # the owed reply is redelivered by recovery (marked as such), once
        assert _texts(slack_api.posted("D6")) == ["\u267b\ufe0f Recovered reply: echo: survive",
                                                 "echo: marker"]
        assert "redelivered=1" in second.recovery()

    def test_kill_before_the_200_then_slacks_retry_is_answered_once(
            self, slack_gateway, slack_api, tmp_path):
        first = slack_gateway(env={"HERMES_ACTORS_CRASHPOINT": "after_message_accepted"})
        payload = message("D7", "durable", channel_type="im", event_id="EvCRASH1")
        with pytest.raises(OSError):  # durable, but the process died before answering
            post_event(first, payload)
        assert first.proc.wait(timeout=30) == 137
        second = slack_gateway()
        status, body = post_event(second, payload, retry=1)  # Slack sends it again
        assert status == 200 and body["duplicate"] is True
        slack_api.wait_posted(1, "D7")
        assert post_event(second, message("D7", "marker", channel_type="im"))[0] == 200
        slack_api.wait_for(lambda: "echo: marker" in _texts(slack_api.posted("D7")))
        assert _texts(slack_api.posted("D7")) == ["echo: durable", "echo: marker"]


class TestStartErrors:
    """A missing or rejected secret, or a platform without an adapter, is one clear line
    and exit 2, never a traceback."""

    @pytest.mark.parametrize("missing", ["SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET"])
    def test_missing_secret(self, tmp_path, slack_api, missing):
        home = platform_home(tmp_path, _config(slack_api))
        env = {k: v for k, v in SECRETS.items() if k != missing}
        done = run_cli("run", "--home", str(home), "--port", "0", env=env)
        assert done.returncode == 2, done.stderr
        assert missing in done.stderr and "is not set" in done.stderr
        assert "Traceback" not in done.stderr

    def test_rejected_token(self, tmp_path, slack_api):
        home = platform_home(tmp_path, _config(slack_api))
        wrong = "xoxb-this-secret-is-not-the-right-one"
        done = run_cli("run", "--home", str(home), "--port", "0",
                       env={**SECRETS, "SLACK_BOT_TOKEN": wrong})
        assert done.returncode == 2, done.stderr
        assert "Slack rejected the bot token in SLACK_BOT_TOKEN" in done.stderr
        assert "this-secret" not in done.stderr + done.stdout
        assert SIGNING_SECRET not in done.stderr + done.stdout
        assert "Traceback" not in done.stderr
        assert not (home / "state.db").exists()

    def test_a_platform_without_an_adapter(self, tmp_path):
        home = tmp_path / "home"
        home.mkdir()
        (home / "config.yaml").write_text(json.dumps({"platforms": ["matrix"]}))
        done = run_cli("run", "--home", str(home), "--port", "0")
        assert done.returncode == 2, done.stderr
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "matrix" in lines[0] and "no adapter" in lines[0], lines
        assert not (home / "state.db").exists()
