"""``SlackAdapter`` in-process against the fake Web API: the events route's answers, the
secrets' checks, and what ``send`` tells the delivery ledger."""

from __future__ import annotations

import json
import time

import pytest

from hermes_actors.adapters.slack import EVENTS_PATH, SlackAdapter, SlackError, check_secrets
from hermes_actors.config import load_config
from hermes_actors.errors import ConfigError, StoreUnavailableError
from hermes_actors.model.source import SessionSource
from hermes_actors.process.platforms import connect_platforms, platform_adapters

from .fake_slack_api import BOT_USER, SIGNING_SECRET, TOKEN, message, signed

SECRETS = {"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": SIGNING_SECRET}


@pytest.fixture
def adapter(slack_api):
    config = load_config({"platforms": ["slack"], "slack": {"api_base_url": slack_api.url}},
                         env={})
    [made] = platform_adapters(config, env=SECRETS)
    connect_platforms([made])
    yield made
    made.close()


def _headers(payload, **signing):
    raw, headers = signed(payload, **signing)
    return raw, {k.lower(): v for k, v in headers.items()}


class TestSettings:
    def test_defaults_and_overrides(self):
        config = load_config({}, env={})
        assert config.slack.bot_token_env == "SLACK_BOT_TOKEN"
        assert config.slack.signing_secret_env == "SLACK_SIGNING_SECRET"
        assert config.slack.api_base_url is None
        assert platform_adapters(config, env=SECRETS) == []  # off unless listed

    def test_missing_and_malformed_secrets(self):
        config = load_config({"platforms": ["slack"]}, env={})
        with pytest.raises(ConfigError, match="SLACK_SIGNING_SECRET .*is not set"):
            check_secrets({"SLACK_BOT_TOKEN": TOKEN}, config.slack)
        with pytest.raises(ConfigError, match="malformed") as info:
            check_secrets({**SECRETS, "SLACK_BOT_TOKEN": "not-a-slack-token"}, config.slack)
        assert "not-a-slack-token" not in str(info.value)

    def test_platforms_without_an_adapter_or_twice(self):
        with pytest.raises(ConfigError, match="no adapter for it"):
            platform_adapters(load_config({"platforms": ["matrix"]}, env={}), env={})
        twice = load_config({"platforms": ["slack"], "http": {"platforms": ["slack"]}},
                            env={})
        with pytest.raises(ConfigError, match="both platforms and http.platforms"):
            platform_adapters(twice, env=SECRETS)

    def test_a_rejected_token_is_told_by_its_error_or_its_status(self):
        """What ``connect`` turns into a ConfigError (exit 2), for either token."""
        assert SlackError("x", status=200, error="invalid_auth").token_rejected
        assert SlackError("x", status=403).token_rejected
        assert not SlackError("x", status=200, error="channel_not_found").token_rejected
        assert not SlackError("x", status=None).token_rejected  # unreachable: retried


class TestEvents:
    def test_connect_names_the_bot(self, adapter):
        assert adapter.bot_user_id == BOT_USER and adapter.connected
        assert set(adapter.routes()) == {EVENTS_PATH}

    def test_not_started_is_503_and_a_store_outage_too(self, adapter):
        raw, headers = _headers(message("D1", "hi", channel_type="im"))
        assert adapter.handle_events(headers, raw)[0] == 503

        def down(event):
            raise StoreUnavailableError("away")

        adapter.start_events(down)
        assert adapter.handle_events(headers, raw)[0] == 503

    def test_signatures(self, adapter):
        taken = []
        adapter.start_events(lambda event: taken.append(event) or event.event_id)
        payload = message("D1", "hi", channel_type="im")
        raw, headers = _headers(payload)
        assert adapter.handle_events({**headers, "x-slack-signature": "v0=00"}, raw)[0] == 401
        assert adapter.handle_events({**headers, "x-slack-request-timestamp": "soon"},
                                     raw)[0] == 401
        assert adapter.handle_events({}, raw)[0] == 401
        raw_old, old = _headers(payload, timestamp=int(time.time()) - 301)
        assert adapter.handle_events(old, raw_old)[0] == 401
        assert taken == []
        assert adapter.handle_events(headers, raw) == (200, {"ok": True, "duplicate": False})
        assert [e.text for e in taken] == ["hi"]
        raw, headers = _headers({"type": "url_verification", "challenge": "abc"})
        assert adapter.handle_events(headers, raw) == (200, {"challenge": "abc"})
        raw, headers = _headers({"type": "app_rate_limited"})
        assert adapter.handle_events(headers, raw)[0] == 200
        bad = b"not json"
        ts = str(int(time.time()))
        from slack_sdk.signature import SignatureVerifier
        sig = SignatureVerifier(SIGNING_SECRET).generate_signature(timestamp=ts, body=bad)
        answer = adapter.handle_events({"x-slack-request-timestamp": ts,
                                        "x-slack-signature": sig}, bad)
        assert answer[0] == 400


class TestSend:
    def test_a_thread_reply(self, adapter, slack_api):
        target = SessionSource("slack", chat_id="C1", chat_type="thread", thread_id="17.1")
        result = adapter.send(target, "hello")
        assert result.success and result.message_id
        [call] = slack_api.posted("C1")
        assert call.params["thread_ts"] == "17.1" and call.params["text"] == "hello"

    def test_a_rate_limit_mid_reply_leaves_the_rest_unsent(self, adapter, slack_api):
        text = "\n\n".join(f"{i} " + "z" * 3000 for i in range(3))
        target = SessionSource("slack", chat_id="D1")
        assert adapter.send(target, "warm up").success
        slack_api.fail("chat.postMessage", 429, "ratelimited", retry_after=7)
        result = adapter.send(target, text)
        assert not result.success and result.retry_after == 7.0 and result.unsent is None
        slack_api.calls.clear()
        original = slack_api._answer
        count = {"n": 0}

        def second_is_limited(method, params, request_headers, headers):
            count["n"] += 1
            if count["n"] == 2:
                headers["Retry-After"] = "3"
                return 429, {"ok": False, "error": "ratelimited"}
            return original(method, params, request_headers, headers)

        slack_api._answer = second_is_limited
        result = adapter.send(target, text)
        assert not result.success and result.retry_after == 3.0
        assert result.unsent == "\n\n".join(text.split("\n\n")[1:])
        assert TOKEN not in (result.error or "")

    def test_a_refusal_for_good(self, adapter, slack_api):
        slack_api.fail("chat.postMessage", 200, "channel_not_found")
        result = adapter.send(SessionSource("slack", chat_id="C404"), "x")
        assert not result.success and result.permanent and result.retry_after is None
        assert "channel_not_found" in result.error


def test_the_token_is_masked_in_errors(slack_api):
    config = load_config({"platforms": ["slack"], "slack": {"api_base_url": slack_api.url}},
                         env={})
    adapter = SlackAdapter(config.slack, "xoxb-wrong-token-0000", SIGNING_SECRET)
    with pytest.raises(ConfigError) as info:
        adapter.connect()
    assert "xoxb-wrong" not in str(info.value) and "SLACK_BOT_TOKEN" in str(info.value)
    assert json.dumps(str(info.value))
