"""Slack's Socket Mode in the real ``hermes-actors run`` process (``slack.mode: socket``):
the fake Web API hands out the websocket URL of a fake Socket Mode server on loopback,
which sends envelopes and records acknowledgements. Nothing sleeps: tests wait for what
the fakes see.
"""

from __future__ import annotations

import threading

import pytest
from process.conftest import GatewayProcess, platform_home, run_cli, stopped_after

from hermes_actors.adapters.slack.socket import check_socket_secrets, lease_name
from hermes_actors.config import SlackConfig, load_config
from hermes_actors.errors import ConfigError, StoreUnavailableError
from hermes_actors.process.platforms import connect_platforms, platform_adapters

from .fake_slack_api import APP_TOKEN, BOT_USER, TOKEN, message
from .fake_socket_mode import FakeSocketMode

SECRETS = {"SLACK_BOT_TOKEN": TOKEN, "SLACK_APP_TOKEN": APP_TOKEN}


def _config(slack_api) -> dict:
    return {"platforms": ["slack"],
            "slack": {"api_base_url": slack_api.url, "mode": "socket"}}


@pytest.fixture
def socket_mode(slack_api):
    fake = FakeSocketMode()
    slack_api.socket_url = fake.url
    yield fake
    fake.close()


@pytest.fixture
def socket_gateway(tmp_path, slack_api, socket_mode):
    """``start(env=None)`` → a ready gateway connected to the fake Socket Mode server."""
    with stopped_after() as started:
        def start(env: dict | None = None) -> GatewayProcess:
            home = platform_home(tmp_path, _config(slack_api))
            gateway = GatewayProcess(home, "--agent", "scripted",
                                     env={**SECRETS, **(env or {})})
            started.append(gateway)
            socket_mode.wait_for(lambda: socket_mode.open_now == 1)
            return gateway

        yield start


def _texts(calls) -> list[str]:
    return [c.params["text"] for c in calls]


class TestSecrets:
    """Socket Mode needs the app-level token (the signing secret it does not)."""

    def test_tokens_and_the_lease_name(self):
        settings = SlackConfig(mode="socket")
        assert check_socket_secrets(SECRETS, settings) == (TOKEN, APP_TOKEN)
        with pytest.raises(ConfigError, match="SLACK_APP_TOKEN .* is not set"):
            check_socket_secrets({"SLACK_BOT_TOKEN": TOKEN}, settings)
        with pytest.raises(ConfigError, match="malformed") as refused:
            check_socket_secrets({**SECRETS, "SLACK_APP_TOKEN": TOKEN}, settings)
        assert TOKEN not in str(refused.value)
        assert lease_name(APP_TOKEN) == "slack:A0APP"
        assert lease_name("xapp-odd").startswith("slack:") and "odd" not in lease_name(
            "xapp-odd")

    def test_a_missing_or_rejected_app_token_is_one_line_and_exit_2(self, tmp_path,
                                                                     slack_api):
        home = platform_home(tmp_path, _config(slack_api))
        done = run_cli("run", "--home", str(home), "--port", "0",
                       env={"SLACK_BOT_TOKEN": TOKEN})
        assert done.returncode == 2, done.stderr
        assert "SLACK_APP_TOKEN" in done.stderr and "is not set" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        wrong = "xapp-1-A0APP-1-not-the-right-app-token"
        done = run_cli("run", "--home", str(home), "--port", "0",
                       env={**SECRETS, "SLACK_APP_TOKEN": wrong})
        assert done.returncode == 2, done.stderr
        assert "Slack rejected the app-level token in SLACK_APP_TOKEN" in done.stderr
        assert "not-the-right" not in done.stderr + done.stdout
        assert "Traceback" not in done.stderr


class TestSocketMode:
    def test_dm_thread_redelivery_and_the_bots_own(self, socket_gateway, socket_mode,
                                                    slack_api):
        gateway = socket_gateway()
        dm = message("D1", "hello", channel_type="im")
        envelopes = [socket_mode.send(dm),
                     socket_mode.send(message("C1", "in the thread", thread_ts="1700.000001"))]
        [reply] = slack_api.wait_posted(1, "D1")
        assert reply.params["text"] == "echo: hello" and "thread_ts" not in reply.params
        [in_thread] = slack_api.wait_posted(1, "C1")
        assert in_thread.params["thread_ts"] == "1700.000001"
        # Slack sends the same event again; the bot's own message and a bot's come too
        envelopes += [socket_mode.send(dm, retry_attempt=1),
                      socket_mode.send(message("D1", "my own", channel_type="im",
                                               user=BOT_USER)),
                      socket_mode.send(message("D1", "a bot", channel_type="im", bot_id="B9")),
                      socket_mode.send(message("D1", "marker", channel_type="im"))]
        slack_api.wait_for(lambda: "echo: marker" in _texts(slack_api.posted("D1")))
        socket_mode.wait_for(lambda: all(socket_mode.acked(e) for e in envelopes))
        assert gateway.stop() == 0
        assert _texts(slack_api.posted("D1")) == ["echo: hello", "echo: marker"]
        log = gateway.stderr.text()
        assert f"event=slack_retry event_id={dm['event_id']} retry_num=1" in log
        assert "event=slack_socket_connected" in log
        assert TOKEN not in log and APP_TOKEN not in log

    def test_kill_before_the_ack_is_redelivered_and_answered_once(
            self, socket_gateway, socket_mode, slack_api):
        first = socket_gateway(env={"HERMES_ACTORS_CRASHPOINT": "after_message_accepted"})
        envelope = socket_mode.send(message("D7", "durable", channel_type="im"))
        assert first.proc.wait(timeout=30) == 137  # durable, not acknowledged yet
        assert not socket_mode.acked(envelope)
        socket_mode.wait_for(lambda: socket_mode.open_now == 0)
        socket_gateway()  # the envelope comes again on its connection
        socket_mode.wait_for(lambda: not socket_mode.pending and socket_mode.acks)
        slack_api.wait_posted(1, "D7")
        socket_mode.send(message("D7", "marker", channel_type="im"))
        slack_api.wait_for(lambda: "echo: marker" in _texts(slack_api.posted("D7")))
        assert _texts(slack_api.posted("D7")) == ["echo: durable", "echo: marker"]
        assert socket_mode.max_open == 1


class TestInProcess:
    """The adapter on plain threads: an envelope whose message could not be stored stays
    unacknowledged, and comes again on the next connection (a lease lost and regained)."""

    def test_not_stored_not_acknowledged(self, slack_api, socket_mode):
        config = load_config({"platforms": ["slack"], "slack": {
            "api_base_url": slack_api.url, "mode": "socket"}}, env={})
        [adapter] = platform_adapters(config, env=SECRETS)
        connect_platforms([adapter])
        assert adapter.lease_name == "slack:A0APP"
        stored: list[str] = []
        tried = threading.Event()

        def submit(event):
            if not tried.is_set():
                tried.set()
                raise StoreUnavailableError("the database is away")
            stored.append(event.text)
            return event.event_id

        try:
            adapter.start_polling(submit)
            first = socket_mode.send(message("D1", "hello", channel_type="im"))
            assert tried.wait(30)
            adapter.stop_polling(wait=10)
            assert adapter.poller.stopped and not socket_mode.acked(first)
            socket_mode.wait_for(lambda: socket_mode.open_now == 0)
            adapter.start_polling(submit)  # the envelope comes again on the new connection
            socket_mode.wait_for(lambda: len(socket_mode.acks) == 1 and not socket_mode.pending)
            assert stored == ["hello"]
        finally:
            adapter.close()
