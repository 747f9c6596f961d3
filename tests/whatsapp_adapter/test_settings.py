"""The WhatsApp settings: parsed and checked like every key (§13); the platform list built
from them; off unless ``platforms`` lists whatsapp."""

from __future__ import annotations

import pytest

from hermes_actors import load_config
from hermes_actors.errors import ConfigError
from hermes_actors.process.platforms import platform_adapters

from .fake_graph_api import APP_SECRET, PHONE_NUMBER_ID, TOKEN, VERIFY_TOKEN

ENV = {"WHATSAPP_TOKEN": TOKEN, "WHATSAPP_APP_SECRET": APP_SECRET,
       "WHATSAPP_VERIFY_TOKEN": VERIFY_TOKEN}


class TestKeys:
    def test_defaults(self):
        whatsapp = load_config({}, env={}).whatsapp
        assert (whatsapp.token_env, whatsapp.app_secret_env, whatsapp.verify_token_env,
                whatsapp.phone_number_id, whatsapp.api_base_url, whatsapp.lid_aliases) == (
            "WHATSAPP_TOKEN", "WHATSAPP_APP_SECRET", "WHATSAPP_VERIFY_TOKEN", None,
            "https://graph.facebook.com/v21.0", {})

    def test_values(self):
        whatsapp = load_config({"whatsapp": {"phone_number_id": 106540352242922,
                                             "api_base_url": "http://127.0.0.1:9/v1/",
                                             "lid_aliases": {"1@lid": "+60123456789"}}},
                               env={}).whatsapp
        assert whatsapp.phone_number_id == "106540352242922"
        assert whatsapp.api_base_url == "http://127.0.0.1:9/v1"
        assert whatsapp.lid_aliases == {"1": "+60123456789"}
        assert load_config({"whatsapp": {"api_base_url": None}}, env={}).whatsapp.api_base_url \
            == "https://graph.facebook.com/v21.0"

    @pytest.mark.parametrize(("tree", "key"), [
        ({"whatsapp": {"phone_number_id": "abc"}}, "whatsapp.phone_number_id"),
        ({"whatsapp": {"phone_number_id": True}}, "whatsapp.phone_number_id"),
        ({"whatsapp": {"api_base_url": "ftp://x"}}, "whatsapp.api_base_url"),
        ({"whatsapp": {"token_env": ""}}, "whatsapp.token_env"),
        ({"whatsapp": {"app_secret_env": 3}}, "whatsapp.app_secret_env"),
        ({"whatsapp": {"verify_token_env": " "}}, "whatsapp.verify_token_env"),
    ])
    def test_invalid_values_name_the_key(self, tree, key):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            load_config(tree, env={})


class TestPlatformAdapters:
    def test_off_by_default(self):
        config = load_config({"whatsapp": {"phone_number_id": PHONE_NUMBER_ID}}, env={})
        assert platform_adapters(config, env={}) == []

    def test_phone_number_id_required(self):
        config = load_config({"platforms": ["whatsapp"]}, env={})
        with pytest.raises(ConfigError, match=r"whatsapp\.phone_number_id"):
            platform_adapters(config, env=ENV)

    @pytest.mark.parametrize("missing", sorted(ENV))
    def test_each_missing_secret_is_named(self, missing):
        config = load_config({"platforms": ["whatsapp"],
                              "whatsapp": {"phone_number_id": PHONE_NUMBER_ID}}, env={})
        env = {k: v for k, v in ENV.items() if k != missing}
        with pytest.raises(ConfigError, match=f"{missing} .* is not set") as caught:
            platform_adapters(config, env=env)
        for secret in ENV.values():
            assert secret not in str(caught.value)

    def test_adapter(self):
        config = load_config({"platforms": ["whatsapp"],
                              "whatsapp": {"phone_number_id": PHONE_NUMBER_ID}}, env={})
        [adapter] = platform_adapters(config, env=ENV)
        try:
            assert adapter.platform == "whatsapp" and not adapter.connected
            assert TOKEN not in repr(adapter._secrets)
        finally:
            adapter.close()

    def test_one_adapter_per_platform(self):
        config = load_config({"platforms": ["whatsapp"],
                              "http": {"platforms": ["webhook", "whatsapp"]}}, env={})
        with pytest.raises(ConfigError, match="both platforms and http.platforms"):
            platform_adapters(config, env=ENV)
