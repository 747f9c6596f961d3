"""The Telegram and stream settings: parsed and checked like every key (§13), and the
standalone's platform list built from them."""

from __future__ import annotations

import pytest

from hermes_actors import load_config
from hermes_actors.errors import ConfigError
from hermes_actors.process.platforms import platform_adapters

from .fake_bot_api import TOKEN


class TestKeys:
    """Defaults, coercions and errors naming the key."""

    def test_defaults(self):
        config = load_config({}, env={})
        telegram = config.telegram
        assert (telegram.token_env, telegram.api_base_url, telegram.poll_timeout,
                telegram.allowed_chats) == ("TELEGRAM_BOT_TOKEN", None, 30, ())
        assert (config.http.max_streams, config.http.stream_keepalive) == (256, 15.0)

    def test_values(self):
        config = load_config({"telegram": {"api_base_url": "http://127.0.0.1:9/", "poll_timeout":
                                           "50", "allowed_chats": [42, "-100123", 42]},
                              "http": {"max_streams": 3}}, env={})
        assert config.telegram.api_base_url == "http://127.0.0.1:9"
        assert config.telegram.poll_timeout == 50
        assert config.telegram.allowed_chats == ("42", "-100123")
        assert config.http.max_streams == 3

    @pytest.mark.parametrize(("tree", "key"), [
        ({"telegram": {"poll_timeout": 51}}, "telegram.poll_timeout"),
        ({"telegram": {"poll_timeout": 0}}, "telegram.poll_timeout"),
        ({"telegram": {"api_base_url": "ftp://x"}}, "telegram.api_base_url"),
        ({"telegram": {"allowed_chats": [True]}}, "telegram.allowed_chats"),
        ({"telegram": {"token_env": ""}}, "telegram.token_env"),
        ({"http": {"max_streams": 0}}, "http.max_streams"),
    ])
    def test_invalid_values_name_the_key(self, tree, key):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            load_config(tree, env={})


class TestPlatformAdapters:
    """``platforms: [telegram]`` needs a well-formed token and one adapter per platform."""

    def test_off_by_default(self):
        assert platform_adapters(load_config({}, env={}), env={}) == []

    @pytest.mark.parametrize(("env", "message"), [
        ({}, "TELEGRAM_BOT_TOKEN .* is not set"),
        ({"TELEGRAM_BOT_TOKEN": "   "}, "is not set"),
        ({"TELEGRAM_BOT_TOKEN": "no-colon-here"}, "malformed"),
        ({"TELEGRAM_BOT_TOKEN": "abc:def"}, "malformed"),
    ])
    def test_token_problems_are_config_errors(self, env, message):
        config = load_config({"platforms": ["telegram"]}, env={})
        with pytest.raises(ConfigError, match=message) as caught:
            platform_adapters(config, env=env)
        assert "no-colon-here" not in str(caught.value)

    def test_the_token_variable_is_configurable(self, bot_api):
        config = load_config({"platforms": ["telegram"], "telegram": {
            "token_env": "MY_BOT", "api_base_url": bot_api.url}}, env={})
        [adapter] = platform_adapters(config, env={"MY_BOT": TOKEN})
        try:
            assert adapter.platform == "telegram" and not adapter.connected
        finally:
            adapter.close()

    def test_one_adapter_per_platform(self):
        config = load_config({"platforms": ["telegram"],
                              "http": {"platforms": ["webhook", "telegram"]}}, env={})
        with pytest.raises(ConfigError, match="both platforms and http.platforms"):
            platform_adapters(config, env={"TELEGRAM_BOT_TOKEN": TOKEN})
