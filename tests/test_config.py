"""Configuration: defaults, file and mapping sources, env overrides, validation (§13, §17)."""

from __future__ import annotations

import threading
import warnings
from pathlib import Path

import pytest

from hermes_actors.config import GatewayConfig, HomeChannel, load_config
from hermes_actors.errors import ConfigError, ConfigWarning, HermesActorsError


def load_quietly(source=None, env=None):
    """load_config with warnings recorded (returned) instead of shown."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = load_config(source, env={} if env is None else env)
    return config, [w for w in caught if issubclass(w.category, ConfigWarning)]


class TestDefaults:
    """With no file and no environment, every §13 default applies."""

    def test_top_level_defaults(self):
        config = load_config(env={})
        assert isinstance(config, GatewayConfig)
        assert config.home is None
        assert config.group_sessions_per_user is True
        assert config.thread_sessions_per_user is False
        assert config.session_store_max_age_days == 90
        assert config.busy_input_mode == "interrupt"
        assert config.queue_max == 32
        assert config.restart_drain_timeout == 30
        assert config.stuck_loop_threshold == 3
        assert config.delivery_ledger is True
        assert config.write_sessions_json is True
        assert config.platforms == ()
        assert config.home_channels == {}
        assert config.whatsapp.lid_aliases == {}
        assert config.ignored_keys == () and config.unknown_keys == ()

    def test_agent_defaults(self):
        agent = load_config(env={}).agent
        assert agent.kind == "echo"
        assert agent.command is None
        assert (agent.openai.base_url, agent.openai.model, agent.openai.api_key_env) == (
            None,
            None,
            None,
        )
        assert agent.timeout == 1800
        assert agent.auto_continue_freshness == 3600
        cache = agent.agent_cache
        assert cache.max_size == 128
        assert cache.idle_ttl_secs == 3600
        assert cache.memory_high_mb == "auto"
        assert cache.max_evictions_per_pass == 16
        assert cache.protect_recent == 8

    def test_section_defaults(self):
        config = load_config(env={})
        assert (config.restart_storm.max_restarts, config.restart_storm.window_seconds) == (3, 60)
        hk = config.housekeeping
        assert (hk.first_delay, hk.interval, hk.prune_interval) == (60, 300, 3600)
        assert config.privacy.redact_pii is False
        http = config.http
        assert (http.host, http.port, http.token, http.max_body) == (
            "127.0.0.1",
            8642,
            None,
            1_048_576,
        )

    def test_none_source_and_empty_mapping_are_defaults(self):
        assert load_config(None, env={}) == load_config({}, env={})

    def test_a_built_config_passes_through(self):
        config = load_config({"queue_max": 5}, env={})
        assert load_config(config) is config


class TestSources:
    """A YAML file and a mapping with the §13 structure configure the same things."""

    YAML = """
busy_input_mode: queue
queue_max: 4
group_sessions_per_user: false
agent:
  kind: command
  command: "python -m my_agent --fast"
  timeout: 60
  agent_cache:
    max_size: 2
    memory_high_mb: 256
http: {host: 0.0.0.0, port: 9000, token: s3cret}
platforms: [telegram, discord]
home_channels:
  telegram: {chat_id: -100123, name: Ops}
whatsapp:
  lid_aliases: {"123456789012345": "60123456789", "999@lid": 447700900123}
"""

    def check(self, config):
        assert config.busy_input_mode == "queue"
        assert config.queue_max == 4
        assert config.group_sessions_per_user is False
        assert config.agent.kind == "command"
        assert config.agent.command == ("python", "-m", "my_agent", "--fast")
        assert config.agent.timeout == 60
        assert config.agent.agent_cache.max_size == 2
        assert config.agent.agent_cache.memory_high_mb == 256
        assert config.agent.agent_cache.idle_ttl_secs == 3600
        assert (config.http.host, config.http.port, config.http.token) == (
            "0.0.0.0",
            9000,
            "s3cret",
        )
        assert config.platforms == ("telegram", "discord")
        assert config.home_channels == {"telegram": HomeChannel("-100123", "Ops")}
        assert config.whatsapp.lid_aliases == {
            "123456789012345": "60123456789",
            "999": "447700900123",
        }

    def test_yaml_file(self, tmp_path):
        path = tmp_path / "config.yaml"
        path.write_text(self.YAML, encoding="utf-8")
        self.check(load_config(path, env={}))
        self.check(load_config(str(path), env={}))

    def test_mapping(self):
        import yaml

        self.check(load_config(yaml.safe_load(self.YAML), env={}))

    def test_mapping_is_not_modified(self):
        data = {"agent": {"kind": "echo"}}
        load_config(data, env={"HERMES_AGENT_TIMEOUT": "5"})
        assert data == {"agent": {"kind": "echo"}}

    def test_empty_yaml_file_is_defaults(self, tmp_path):
        path = tmp_path / "empty.yaml"
        path.write_text("", encoding="utf-8")
        assert load_config(path, env={}) == load_config(env={})

    def test_missing_file(self, tmp_path):
        with pytest.raises(ConfigError, match="does not exist"):
            load_config(tmp_path / "nope.yaml", env={})

    @pytest.mark.parametrize("text", ["a: [unclosed", "key: : :\n  - x\n bad", "\t- tab"])
    def test_malformed_yaml(self, tmp_path, text):
        path = tmp_path / "bad.yaml"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ConfigError, match="bad.yaml") as info:
            load_config(path, env={})
        assert "\n" not in str(info.value)  # errors print one line (§17)

    def test_a_yaml_error_names_line_and_column_on_one_line(self, tmp_path):
        path = tmp_path / "bad.yaml"
        path.write_text("http: {port: 5\nx: 1\n", encoding="utf-8")
        with pytest.raises(ConfigError) as info:
            load_config(path, env={})
        assert str(info.value) == (
            f"config file {str(path)!r} is not valid YAML: line 2, column 2: expected ',' or "
            "'}', but got ':' (while parsing a flow mapping at line 1, column 7)")

    @pytest.mark.parametrize("text", ["http: &a {x: *a}\n",
                                      "agent: &a {agent_cache: {up: *a}}\n"])
    def test_an_alias_cycle_is_an_error(self, tmp_path, text):
        path = tmp_path / "cycle.yaml"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ConfigError, match="YAML alias cycle"):
            load_config(path, env={})

    def test_a_shared_alias_is_fine(self, tmp_path):
        path = tmp_path / "shared.yaml"
        path.write_text("restart_storm: &t {window_seconds: 5}\nhousekeeping: *t\n",
                        encoding="utf-8")
        config, caught = load_quietly(path)
        assert config.restart_storm.window_seconds == 5
        assert [str(w.message) for w in caught] == [
            "unknown config key 'housekeeping.window_seconds' is ignored"]

    def test_an_integer_too_long_for_python_is_an_error(self, tmp_path):
        path = tmp_path / "long.yaml"
        path.write_text("queue_max: " + "9" * 5000 + "\n", encoding="utf-8")
        with pytest.raises(ConfigError, match="is not valid YAML"):
            load_config(path, env={})

    def test_yaml_that_is_not_a_mapping(self, tmp_path):
        path = tmp_path / "list.yaml"
        path.write_text("- a\n- b\n", encoding="utf-8")
        with pytest.raises(ConfigError, match="mapping"):
            load_config(path, env={})

    def test_unsupported_source_type(self):
        with pytest.raises(ConfigError):
            load_config(42, env={})

    def test_config_errors_are_hermes_errors(self):
        assert issubclass(ConfigError, HermesActorsError)
        assert issubclass(ConfigError, ValueError)
        assert issubclass(ConfigWarning, UserWarning)


ENV_CASES = [
    ("HERMES_HOME", "/srv/hermes", lambda c: c.home, Path("/srv/hermes")),
    ("HERMES_BUSY_INPUT_MODE", "queue", lambda c: c.busy_input_mode, "queue"),
    ("HERMES_AGENT_KIND", "scripted", lambda c: c.agent.kind, "scripted"),
    ("HERMES_AGENT_TIMEOUT", "12.5", lambda c: c.agent.timeout, 12.5),
    ("HERMES_AUTO_CONTINUE_FRESHNESS", "60", lambda c: c.agent.auto_continue_freshness, 60),
    ("HERMES_RESTART_DRAIN_TIMEOUT", "7", lambda c: c.restart_drain_timeout, 7),
    ("HERMES_AGENT_CACHE_MAX_SIZE", "9", lambda c: c.agent.agent_cache.max_size, 9),
    ("HERMES_AGENT_CACHE_IDLE_TTL_SECS", "30", lambda c: c.agent.agent_cache.idle_ttl_secs, 30),
    ("HERMES_AGENT_CACHE_MEMORY_HIGH_MB", "768", lambda c: c.agent.agent_cache.memory_high_mb, 768),
    ("HERMES_REDACT_PII", "true", lambda c: c.privacy.redact_pii, True),
    ("HERMES_HTTP_HOST", "0.0.0.0", lambda c: c.http.host, "0.0.0.0"),
    ("HERMES_HTTP_PORT", "9001", lambda c: c.http.port, 9001),
    ("HERMES_HTTP_TOKEN", "tok", lambda c: c.http.token, "tok"),
]


class TestEnvironment:
    """Every HERMES_* variable overrides its key; env beats the file, the file beats defaults."""

    @pytest.mark.parametrize(
        ("var", "raw", "read", "expected"), ENV_CASES, ids=[case[0] for case in ENV_CASES]
    )
    def test_each_variable(self, var, raw, read, expected):
        config, caught = load_quietly(env={var: raw})
        assert read(config) == expected
        assert caught == []

    def test_precedence_env_over_file_over_defaults(self, tmp_path):
        path = tmp_path / "c.yaml"
        path.write_text("busy_input_mode: queue\nagent: {timeout: 100}\nqueue_max: 3\n")
        config = load_config(path, env={"HERMES_AGENT_TIMEOUT": "5"})
        assert config.agent.timeout == 5
        assert config.busy_input_mode == "queue"
        assert config.queue_max == 3
        assert config.agent.auto_continue_freshness == 3600

    def test_env_overrides_a_mapping_and_keeps_its_siblings(self):
        config = load_config(
            {"http": {"port": 1000, "token": "file"}}, env={"HERMES_HTTP_TOKEN": "env"}
        )
        assert (config.http.port, config.http.token) == (1000, "env")

    @pytest.mark.parametrize(("data", "var", "key"), [
        ({"http": 5}, "HERMES_HTTP_PORT", "http"),
        ({"agent": {"agent_cache": "big"}}, "HERMES_AGENT_CACHE_MAX_SIZE", "agent.agent_cache"),
        ({"agent": ["echo"]}, "HERMES_AGENT_CACHE_MAX_SIZE", "agent"),
    ])
    def test_env_does_not_hide_a_section_that_is_not_a_mapping(self, data, var, key):
        with pytest.raises(ConfigError) as info:
            load_config(data, env={var: "7"})
        assert str(info.value).startswith(f"config key {key!r}: expected a mapping, got ")

    def test_env_fills_an_empty_section(self):
        assert load_config({"http": None}, env={"HERMES_HTTP_PORT": "7"}).http.port == 7

    @pytest.mark.parametrize("raw", [" ", "   ", "\t"])
    def test_a_blank_token_is_an_error(self, raw):
        with pytest.raises(ConfigError) as info:
            load_config(env={"HERMES_HTTP_TOKEN": raw})
        assert str(info.value) == (
            "environment variable HERMES_HTTP_TOKEN: config key 'http.token': expected a "
            f"token that is not blank (or null or \"\" for none), got {raw!r}")
        with pytest.raises(ConfigError, match="'http.token': expected a token that is not "):
            load_config({"http": {"token": raw}}, env={})

    def test_an_empty_token_means_none(self):
        assert load_config({"http": {"token": ""}}, env={}).http.token is None

    def test_a_token_loses_the_spaces_around_it(self):
        assert load_config(env={"HERMES_HTTP_TOKEN": " s3cret "}).http.token == "s3cret"
        assert load_config({"http": {"token": 1234}}, env={}).http.token == "1234"

    def test_a_token_of_another_type_is_not_shown(self):
        with pytest.raises(ConfigError) as info:
            load_config({"http": {"token": ["s3cret"]}}, env={})
        assert "s3cret" not in str(info.value) and "'http.token'" in str(info.value)
        assert "s3cret" not in repr(load_config({"http": {"token": "s3cret"}}, env={}))

    def test_empty_env_value_is_ignored(self):
        assert load_config({"queue_max": 3}, env={"HERMES_HTTP_PORT": ""}).http.port == 8642

    def test_os_environ_is_the_default(self, monkeypatch):
        monkeypatch.setenv("HERMES_BUSY_INPUT_MODE", "queue")
        assert load_config().busy_input_mode == "queue"

    def test_home_expands_the_user(self, monkeypatch):
        monkeypatch.setenv("HOME", "/home/someone")
        assert load_config(env={"HERMES_HOME": "~/hermes"}).home == Path("/home/someone/hermes")

    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            ("1", True),
            ("0", False),
            ("true", True),
            ("false", False),
            ("yes", True),
            ("no", False),
            ("on", True),
            ("off", False),
            ("TRUE", True),
            ("False", False),
            ("YES", True),
            ("No", False),
            ("On", True),
            ("OFF", False),
            (" yes ", True),
        ],
    )
    def test_boolean_forms(self, raw, expected):
        assert load_config(env={"HERMES_REDACT_PII": raw}).privacy.redact_pii is expected

    @pytest.mark.parametrize("raw", ["2", "maybe", "enabled", "y", "t"])
    def test_bad_boolean_is_an_error_naming_variable_and_key(self, raw):
        with pytest.raises(ConfigError) as info:
            load_config(env={"HERMES_REDACT_PII": raw})
        assert "HERMES_REDACT_PII" in str(info.value)
        assert "privacy.redact_pii" in str(info.value)

    @pytest.mark.parametrize(
        ("var", "raw", "key"),
        [
            ("HERMES_HTTP_PORT", "abc", "http.port"),
            ("HERMES_HTTP_PORT", "70000", "http.port"),
            ("HERMES_BUSY_INPUT_MODE", "shout", "busy_input_mode"),
            ("HERMES_AGENT_KIND", "gpt", "agent.kind"),
            ("HERMES_AGENT_CACHE_MAX_SIZE", "0", "agent.agent_cache.max_size"),
            ("HERMES_AGENT_CACHE_MEMORY_HIGH_MB", "lots", "agent.agent_cache.memory_high_mb"),
        ],
    )
    def test_bad_values_name_variable_and_key(self, var, raw, key):
        with pytest.raises(ConfigError) as info:
            load_config(env={var: raw})
        assert var in str(info.value)
        assert key in str(info.value)


class TestValidation:
    """Invalid values fail with a ConfigError that names the dotted key."""

    @pytest.mark.parametrize(
        ("data", "key"),
        [
            ({"busy_input_mode": "loud"}, "busy_input_mode"),
            ({"queue_max": 0}, "queue_max"),
            ({"queue_max": 2.5}, "queue_max"),
            ({"queue_max": True}, "queue_max"),
            ({"group_sessions_per_user": "sometimes"}, "group_sessions_per_user"),
            ({"thread_sessions_per_user": 3}, "thread_sessions_per_user"),
            ({"session_store_max_age_days": -1}, "session_store_max_age_days"),
            ({"agent": {"kind": "gpt"}}, "agent.kind"),
            ({"agent": {"timeout": 0}}, "agent.timeout"),
            ({"agent": {"command": 5}}, "agent.command"),
            ({"agent": {"agent_cache": {"max_size": "many"}}}, "agent.agent_cache.max_size"),
            (
                {"agent": {"agent_cache": {"protect_recent": -1}}},
                "agent.agent_cache.protect_recent",
            ),
            (
                {"agent": {"agent_cache": {"memory_high_mb": -5}}},
                "agent.agent_cache.memory_high_mb",
            ),
            (
                {"agent": {"agent_cache": {"memory_high_mb": True}}},
                "agent.agent_cache.memory_high_mb",
            ),
            (
                {"agent": {"agent_cache": {"memory_high_mb": "huge"}}},
                "agent.agent_cache.memory_high_mb",
            ),
            ({"agent": "echo"}, "agent"),
            ({"http": {"port": 65536}}, "http.port"),
            ({"http": {"host": ""}}, "http.host"),
            ({"http": {"max_body": 0}}, "http.max_body"),
            ({"restart_storm": {"max_restarts": 0}}, "restart_storm.max_restarts"),
            ({"housekeeping": {"interval": 0}}, "housekeeping.interval"),
            ({"privacy": {"redact_pii": "perhaps"}}, "privacy.redact_pii"),
            ({"delivery_ledger": "nah"}, "delivery_ledger"),
            ({"platforms": ["myspace"]}, "platforms"),
            ({"platforms": 5}, "platforms"),
            ({"home_channels": {"myspace": {"chat_id": "1"}}}, "home_channels.myspace"),
            ({"home_channels": {"telegram": {"name": "no id"}}}, "home_channels.telegram"),
            ({"home_channels": ["telegram"]}, "home_channels"),
            ({"whatsapp": {"lid_aliases": ["x"]}}, "whatsapp.lid_aliases"),
            ({"whatsapp": {"lid_aliases": {"1": [2]}}}, "whatsapp.lid_aliases.1"),
        ],
    )
    def test_invalid_value_names_the_key(self, data, key):
        with pytest.raises(ConfigError) as info:
            load_config(data, env={})
        assert repr(key) in str(info.value)

    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            ("auto", "auto"),
            ("AUTO", "auto"),
            (1024, 1024),
            (512.5, 512.5),
            ("300", 300),
            (0, None),
            ("0", None),
            ("off", None),
            ("OFF", None),
            ("false", None),
            (False, None),
            (None, None),
        ],
    )
    def test_memory_high_mb_forms(self, value, expected):
        config = load_config({"agent": {"agent_cache": {"memory_high_mb": value}}}, env={})
        assert config.agent.agent_cache.memory_high_mb == expected

    @pytest.mark.parametrize(
        ("raw", "expected"), [("auto", "auto"), ("0", None), ("off", None), ("false", None)]
    )
    def test_memory_high_mb_from_env(self, raw, expected):
        config = load_config(env={"HERMES_AGENT_CACHE_MEMORY_HIGH_MB": raw})
        assert config.agent.agent_cache.memory_high_mb == expected

    @pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), "inf", "nan",
                                       "1e400"])
    @pytest.mark.parametrize("key", ["queue_max", "agent.timeout", "http.stream_keepalive",
                                     "agent.agent_cache.memory_high_mb", "http.max_body"])
    def test_a_number_that_is_not_finite_is_refused(self, key, value):
        with pytest.raises(ConfigError) as info:
            load_config(_nested(key, value), env={})
        assert str(info.value).startswith(f"config key {key!r}: expected ")

    @pytest.mark.parametrize(("key", "value"), [
        ("queue_max", 10**400),
        ("queue_max", 2**53 + 1),
        ("http.max_body", 1e300),
        ("http.stream_keepalive", 1.0e20),
        ("http.body_timeout", threading.TIMEOUT_MAX * 2),
        ("agent.timeout", threading.TIMEOUT_MAX * 2),
        ("restart_drain_timeout", 1e300),
        ("agent.agent_cache.memory_high_mb", 1e300),
    ])
    def test_a_number_too_large_to_use_is_refused(self, key, value):
        with pytest.raises(ConfigError) as info:
            load_config(_nested(key, value), env={})
        message = str(info.value)
        assert message.startswith(f"config key {key!r}: expected ") and " <= " in message
        assert len(message) < 200

    def test_the_largest_numbers_are_accepted(self):
        config = load_config({"queue_max": 2**53, "agent": {"timeout": threading.TIMEOUT_MAX}},
                             env={})
        assert (config.queue_max, config.agent.timeout) == (2**53, threading.TIMEOUT_MAX)

    def test_a_number_from_the_file_that_is_not_finite(self, tmp_path):
        path = tmp_path / "inf.yaml"
        path.write_text("http: {stream_keepalive: .inf}\n", encoding="utf-8")
        with pytest.raises(ConfigError, match="'http.stream_keepalive'"):
            load_config(path, env={})

    def test_an_environment_number_that_is_not_finite(self):
        with pytest.raises(ConfigError, match="HERMES_AGENT_TIMEOUT: config key 'agent.timeout'"):
            load_config(env={"HERMES_AGENT_TIMEOUT": "inf"})

    def test_protect_recent_zero_is_valid(self):
        config = load_config({"agent": {"agent_cache": {"protect_recent": 0}}}, env={})
        assert config.agent.agent_cache.protect_recent == 0

    def test_command_as_list(self):
        config = load_config({"agent": {"kind": "command", "command": ["a", "b c"]}}, env={})
        assert config.agent.command == ("a", "b c")

    def test_platform_names_are_normalised(self):
        config = load_config({"platforms": ["Telegram", "telegram", "slack"]}, env={})
        assert config.platforms == ("telegram", "slack")

    def test_boolean_strings_in_files(self):
        config = load_config({"write_sessions_json": "off", "delivery_ledger": "No"}, env={})
        assert (config.write_sessions_json, config.delivery_ledger) == (False, False)


def _nested(dotted: str, value):
    """``{"a": {"b": value}}`` for ``"a.b"``."""
    tree = value
    for part in reversed(dotted.split(".")):
        tree = {part: tree}
    return tree


class TestUnknownAndLegacyKeys:
    """Unknown and legacy keys are listed with dotted paths and each is warned about once."""

    def test_unknown_keys_are_listed_and_warned(self):
        data = {
            "bogus": 1,
            "agent": {"flavour": "x", "agent_cache": {"size": 1}},
            "http": {"tls": True},
        }
        config, caught = load_quietly(data)
        assert config.unknown_keys == (
            "bogus",
            "agent.flavour",
            "agent.agent_cache.size",
            "http.tls",
        )
        messages = [str(w.message) for w in caught]
        for key in config.unknown_keys:
            assert sum(repr(key) in m for m in messages) == 1
        assert len(caught) == 4

    def test_legacy_keys_are_ignored_with_dotted_paths(self):
        data = {
            "session_reset": {"mode": "idle", "idle_minutes": 30},
            "session_idle_minutes": 60,
            "queue_max": 5,
        }
        config, caught = load_quietly(data)
        assert config.ignored_keys == (
            "session_reset.mode",
            "session_reset.idle_minutes",
            "session_idle_minutes",
        )
        assert config.unknown_keys == ()
        assert config.queue_max == 5
        assert len(caught) == 3
        assert all("ignored" in str(w.message) for w in caught)

    def test_legacy_environment_variables_are_reported(self):
        config, caught = load_quietly(env={"SESSION_IDLE_MINUTES": "30"})
        assert config.ignored_keys == ("SESSION_IDLE_MINUTES",)
        assert len(caught) == 1

    def test_each_key_is_warned_once_per_call(self):
        for _ in range(2):
            _, caught = load_quietly({"bogus": 1, "session_reset": {"mode": "daily"}})
            assert len(caught) == 2

    def test_pytest_warns_sees_a_config_warning(self):
        with pytest.warns(ConfigWarning, match="bogus"):
            load_config({"bogus": 1}, env={})

    def test_clean_config_warns_nothing(self):
        _, caught = load_quietly({"queue_max": 3})
        assert caught == []


class TestStoreKeys:
    """``store``: the backend, the PostgreSQL DSN (never shown) and the pool size."""

    def test_defaults(self):
        config, _ = load_quietly()
        assert (config.store.backend, config.store.dsn, config.store.pool_size) == (
            "sqlite", None, 4)

    def test_postgres_from_the_environment(self):
        env = {"HERMES_STORE_BACKEND": "postgres", "HERMES_STORE_POOL_SIZE": "8",
               "HERMES_STORE_DSN": "postgresql://hermes:pw@db.example:5432/hermes"}
        config, _ = load_quietly(env=env)
        assert config.store.backend == "postgres" and config.store.pool_size == 8
        assert config.store.dsn == env["HERMES_STORE_DSN"]
        assert "pw" not in repr(config.store) and "pw" not in repr(config)

    def test_postgres_needs_a_dsn(self):
        with pytest.raises(ConfigError, match="'store.dsn': required"):
            load_quietly({"store": {"backend": "postgres"}})

    @pytest.mark.parametrize("dsn", ["hunter2", "mysql:hunter2", 42, "postgresql:/hunter2"])
    def test_a_malformed_dsn_is_refused_without_echo(self, dsn):
        with pytest.raises(ConfigError, match="store.dsn") as caught:
            load_quietly({"store": {"dsn": dsn}})
        assert "hunter2" not in str(caught.value) and "42" not in str(caught.value)

    def test_key_value_dsns_are_accepted(self):
        config, _ = load_quietly({"store": {"dsn": "host=db dbname=hermes password=x"}})
        assert config.store.dsn == "host=db dbname=hermes password=x"

    @pytest.mark.parametrize("size", [0, 1001, "many", 2.5])
    def test_pool_size_bounds(self, size):
        with pytest.raises(ConfigError, match="store.pool_size"):
            load_quietly({"store": {"pool_size": size}})

    def test_synchronous_is_full_by_default(self):
        config, _ = load_quietly()
        assert config.store.synchronous == "full"

    def test_synchronous_from_the_file_and_the_environment(self):
        config, _ = load_quietly({"store": {"synchronous": "NORMAL"}})
        assert config.store.synchronous == "normal"
        config, _ = load_quietly({"store": {"synchronous": "normal"}},
                                 env={"HERMES_STORE_SYNCHRONOUS": "full"})
        assert config.store.synchronous == "full"

    @pytest.mark.parametrize("value", ["off", "extra", 1, True])
    def test_an_invalid_synchronous_names_the_key(self, value):
        with pytest.raises(ConfigError, match="'store.synchronous'"):
            load_quietly({"store": {"synchronous": value}})
        with pytest.raises(ConfigError, match="HERMES_STORE_SYNCHRONOUS.*store.synchronous"):
            load_quietly(env={"HERMES_STORE_SYNCHRONOUS": str(value)})

    def test_the_store_knows_the_same_levels(self):
        from hermes_actors.config import SYNCHRONOUS_LEVELS
        from hermes_actors.store.backends.sqlite.db import SYNCHRONOUS

        assert SYNCHRONOUS == SYNCHRONOUS_LEVELS


@pytest.mark.cluster
class TestClusterKeys:
    """``cluster``: off by default, only on PostgreSQL, heartbeat shorter than lease_ttl."""

    POSTGRES = {"backend": "postgres", "dsn": "postgresql://hermes@db.example/hermes"}

    def test_defaults(self):
        cluster = load_quietly()[0].cluster
        assert (cluster.enabled, cluster.shards, cluster.lease_ttl, cluster.heartbeat) == (
            False, 64, 10.0, 2.0)

    def test_from_the_file(self):
        config, _ = load_quietly({"store": self.POSTGRES, "cluster": {
            "enabled": True, "shards": 4096, "lease_ttl": 3, "heartbeat": 0.5}})
        assert config.cluster.enabled and config.cluster.shards == 4096
        assert (config.cluster.lease_ttl, config.cluster.heartbeat) == (3.0, 0.5)

    def test_from_the_environment(self):
        env = {"HERMES_STORE_BACKEND": "postgres", "HERMES_STORE_DSN": self.POSTGRES["dsn"],
               "HERMES_CLUSTER_ENABLED": "yes", "HERMES_CLUSTER_SHARDS": "16",
               "HERMES_CLUSTER_LEASE_TTL": "20", "HERMES_CLUSTER_HEARTBEAT": "4"}
        cluster = load_quietly(env=env)[0].cluster
        assert (cluster.enabled, cluster.shards, cluster.lease_ttl, cluster.heartbeat) == (
            True, 16, 20.0, 4.0)

    def test_an_environment_value_names_its_variable(self):
        with pytest.raises(ConfigError, match=r"HERMES_CLUSTER_SHARDS: config key "
                                              r"'cluster.shards': expected an integer"):
            load_quietly(env={"HERMES_CLUSTER_SHARDS": "lots"})

    def test_enabled_needs_postgres(self):
        with pytest.raises(ConfigError, match=r"'cluster.enabled': a cluster needs "
                                              r"store.backend 'postgres'.*'sqlite'"):
            load_quietly({"cluster": {"enabled": True}})

    def test_disabled_is_fine_on_sqlite(self):
        assert load_quietly({"cluster": {"enabled": False, "shards": 8}})[0].cluster.shards == 8

    @pytest.mark.parametrize(("ttl", "heartbeat"), [(10, 10), (2, 3)])
    def test_heartbeat_must_be_shorter_than_lease_ttl(self, ttl, heartbeat):
        with pytest.raises(ConfigError, match=r"'cluster.heartbeat': must be shorter than "
                                              r"cluster.lease_ttl"):
            load_quietly({"cluster": {"lease_ttl": ttl, "heartbeat": heartbeat}})

    @pytest.mark.parametrize("shards", [0, 4097, 2.5, "many", True])
    def test_shards_bounds(self, shards):
        with pytest.raises(ConfigError, match=r"'cluster.shards': expected an integer >= 1 "
                                              r"and <= 4096"):
            load_quietly({"cluster": {"shards": shards}})

    @pytest.mark.parametrize("key", ["lease_ttl", "heartbeat"])
    def test_times_must_be_positive(self, key):
        with pytest.raises(ConfigError, match=f"'cluster.{key}'"):
            load_quietly({"cluster": {key: 0}})
