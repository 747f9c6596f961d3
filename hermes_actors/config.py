"""Configuration (§13): a YAML file or mapping, ``HERMES_*`` environment overrides, defaults.

Precedence is env > file > defaults. Every section is a frozen dataclass whose fields carry
their own parser in ``metadata``, so one generic walker validates the whole tree, names the
dotted key in every error and collects unknown and legacy keys without a hand-written branch
per key.
"""

from __future__ import annotations

import math
import os
import shlex
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from hermes_actors.errors import ConfigError, ConfigWarning
from hermes_actors.model.context import HomeChannel
from hermes_actors.model.dsn import is_dsn
from hermes_actors.model.platform import Platform

__all__ = [
    "AgentCacheConfig",
    "AgentConfig",
    "ClusterConfig",
    "GatewayConfig",
    "HomeChannel",
    "HousekeepingConfig",
    "HttpConfig",
    "MAX_SHARDS",
    "OpenAIConfig",
    "PrivacyConfig",
    "RestartStormConfig",
    "DEFAULT_POOL_SIZE",
    "STORE_BACKENDS",
    "StoreConfig",
    "TelegramConfig",
    "WhatsAppConfig",
    "load_config",
]

Parser = Callable[[str, Any], Any]


# -- leaf parsers ----------------------------------------------------------------------------

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _fail(key: str, expected: str, value: Any) -> ConfigError:
    return ConfigError(f"config key {key!r}: expected {expected}, got {value!r}")


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise _fail(key, "a boolean (true/false, yes/no, on/off, 1/0)", value)


def _number(minimum: float = 0.0, *, integer: bool = False, maximum: float | None = None,
            allow_none: bool = False) -> Parser:
    kind = "an integer" if integer else "a number"
    bounds = f" >= {minimum:g}" + (f" and <= {maximum:g}" if maximum is not None else "")

    def parse(key: str, value: Any) -> Any:
        if value is None and allow_none:
            return None
        if isinstance(value, bool):
            raise _fail(key, kind + bounds, value)
        try:
            num = float(value.strip()) if isinstance(value, str) else float(value)
        except (TypeError, ValueError):
            raise _fail(key, kind + bounds, value) from None
        if math.isnan(num) or num < minimum or (maximum is not None and num > maximum):
            raise _fail(key, kind + bounds, value)
        if integer:
            if not num.is_integer():
                raise _fail(key, kind + bounds, value)
            return int(num)
        return num

    return parse


def _choice(*options: str) -> Parser:
    def parse(key: str, value: Any) -> str:
        if isinstance(value, str) and value.strip().lower() in options:
            return value.strip().lower()
        raise _fail(key, "one of " + ", ".join(options), value)

    return parse


def _opt_str(key: str, value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise _fail(key, "a string", value)


def _str(key: str, value: Any) -> str:
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise _fail(key, "a non-empty string", value)


def _command(key: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            parts = shlex.split(value)
        except ValueError as exc:
            raise _fail(key, f"a shell-style command line ({exc})", value) from None
        return tuple(parts) or None
    if isinstance(value, (list, tuple)) and all(isinstance(p, str) for p in value):
        return tuple(value) or None
    raise _fail(key, "a command line string or a list of strings", value)


def _memory_budget(key: str, value: Any) -> float | str | None:
    """``auto``, a number of MB, or ``0``/``off``/``false`` (disabled → ``None``)."""
    if value is False or value is None:
        return None
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "auto":
            return "auto"
        if text in _FALSE:
            return None
    num = _number(0.0)(key, value) if not isinstance(value, bool) else None
    if num is None:
        raise _fail(key, "'auto', a number of MB, or 0/off/false", value)
    return None if num == 0 else num


def _platform_list(key: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [p for p in value.replace(",", " ").split() if p]
    if not isinstance(value, (list, tuple)):
        raise _fail(key, "a list of platform names", value)
    out = []
    for item in value:
        if not Platform.is_known(item):
            raise _fail(key, "known platform names", item)
        out.append(str(item).strip().lower())
    return tuple(dict.fromkeys(out))


def _home_channels(key: str, value: Any) -> dict[str, HomeChannel]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _fail(key, "a mapping of platform -> {chat_id, name}", value)
    out: dict[str, HomeChannel] = {}
    for platform, spec in value.items():
        sub = f"{key}.{platform}"
        if not Platform.is_known(platform):
            raise _fail(sub, "a known platform name", platform)
        if not isinstance(spec, Mapping) or spec.get("chat_id") in (None, ""):
            raise _fail(sub, "a mapping with a chat_id", spec)
        chat_id = _opt_str(sub + ".chat_id", spec["chat_id"])
        name = _opt_str(sub + ".name", spec.get("name"))
        assert chat_id is not None  # checked above
        out[str(platform).strip().lower()] = HomeChannel(chat_id, name)
    return out


def _aliases(key: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _fail(key, "a mapping of LID -> phone number", value)
    out = {}
    for lid, phone in value.items():
        if isinstance(phone, bool) or not isinstance(phone, (str, int)):
            raise _fail(f"{key}.{lid}", "a phone number", phone)
        lid_text = str(lid).strip()
        if lid_text.endswith("@lid"):
            lid_text = lid_text[: -len("@lid")]
        out[lid_text] = str(phone).strip()
    return out


def _chat_ids(key: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise _fail(key, "a list of chat ids", value)
    out = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (str, int)) or not str(item).strip():
            raise _fail(key, "a list of chat ids (numbers or strings)", item)
        out.append(str(item).strip())
    return tuple(dict.fromkeys(out))


def _url(key: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower().startswith(("http://", "https://")):
        return value.strip().rstrip("/")
    raise _fail(key, "an http:// or https:// URL", value)


def _path(key: str, value: Any) -> Path | None:
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)) and str(value).strip():
        return Path(os.path.expanduser(str(value).strip()))
    raise _fail(key, "a directory path", value)


def _opt(parser: Parser, default: Any) -> Any:
    return field(default=default, metadata={"parse": parser})


def _section(cls: type) -> Any:
    return field(default_factory=cls, metadata={"section": cls})


# -- sections -------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentCacheConfig:
    """``agent.agent_cache``: the cached-agent LRU, idle TTL and memory budget (§11)."""

    max_size: int = _opt(_number(1, integer=True), 128)
    idle_ttl_secs: float = _opt(_number(0), 3600.0)
    #: ``"auto"``, a number of MB, or ``None`` when disabled.
    memory_high_mb: float | str | None = _opt(_memory_budget, "auto")
    max_evictions_per_pass: int = _opt(_number(1, integer=True), 16)
    protect_recent: int = _opt(_number(0, integer=True), 8)


@dataclass(frozen=True)
class OpenAIConfig:
    """``agent.openai``: an OpenAI-compatible chat-completions server."""

    base_url: str | None = _opt(_opt_str, None)
    model: str | None = _opt(_opt_str, None)
    api_key_env: str | None = _opt(_opt_str, None)


@dataclass(frozen=True)
class AgentConfig:
    """``agent``: which agent runs turns, its timeout and cache."""

    kind: str = _opt(_choice("echo", "scripted", "command", "openai"), "echo")
    command: tuple[str, ...] | None = _opt(_command, None)
    openai: OpenAIConfig = _section(OpenAIConfig)
    timeout: float = _opt(_number(0.001), 1800.0)
    auto_continue_freshness: float = _opt(_number(0), 3600.0)
    agent_cache: AgentCacheConfig = _section(AgentCacheConfig)


@dataclass(frozen=True)
class RestartStormConfig:
    """``restart_storm``: skip auto-continue after too many boots in a short window."""

    max_restarts: int = _opt(_number(1, integer=True), 3)
    window_seconds: float = _opt(_number(0), 60.0)


@dataclass(frozen=True)
class HousekeepingConfig:
    """``housekeeping``: when the watcher runs (seconds)."""

    first_delay: float = _opt(_number(0), 60.0)
    interval: float = _opt(_number(0.001), 300.0)
    prune_interval: float = _opt(_number(0.001), 3600.0)


@dataclass(frozen=True)
class PrivacyConfig:
    """``privacy``: prompt redaction."""

    redact_pii: bool = _opt(_bool, False)


@dataclass(frozen=True)
class HttpConfig:
    """``http``: the standalone process's HTTP adapter."""

    host: str = _opt(_str, "127.0.0.1")
    port: int = _opt(_number(0, integer=True, maximum=65535), 8642)
    token: str | None = _opt(_opt_str, None)
    max_body: int = _opt(_number(1, integer=True), 1_048_576)
    #: Seconds a request body may take to arrive (slow clients get 408).
    body_timeout: float = _opt(_number(0.001), 10.0)
    platforms: tuple[str, ...] = _opt(_platform_list, ("webhook", "api_server"))
    #: Open ``GET /v1/stream`` connections at most; more are answered 503.
    max_streams: int = _opt(_number(1, integer=True), 256)
    #: Seconds between keep-alive comments on an idle stream.
    stream_keepalive: float = _opt(_number(0.01), 15.0)


@dataclass(frozen=True)
class TelegramConfig:
    """``telegram``: the Telegram adapter, on when ``platforms`` lists ``telegram``."""

    #: The environment variable holding the bot token (the token is never in the file).
    token_env: str = _opt(_str, "TELEGRAM_BOT_TOKEN")
    #: Another Bot API server (a self-hosted one, a test's fake); ``None``: Telegram's.
    api_base_url: str | None = _opt(_url, None)
    #: Seconds one ``getUpdates`` long poll may wait (Telegram allows up to 50).
    poll_timeout: int = _opt(_number(1, integer=True, maximum=50), 30)
    #: Chat ids answered; empty: every chat (a public bot is open to anyone).
    allowed_chats: tuple[str, ...] = _opt(_chat_ids, ())


@dataclass(frozen=True)
class WhatsAppConfig:
    """``whatsapp``: LID → phone aliases for canonical identifiers."""

    lid_aliases: dict[str, str] = _opt(_aliases, None)

    def __post_init__(self) -> None:
        if self.lid_aliases is None:
            object.__setattr__(self, "lid_aliases", {})


#: The store backends ``store.backend`` names.
STORE_BACKENDS = ("sqlite", "postgres")
#: Connections the PostgreSQL backend keeps for reads by default (writes have their own).
DEFAULT_POOL_SIZE = 4


def _dsn(key: str, value: Any) -> str | None:
    """A PostgreSQL connection string; never echoed with its password in an error."""
    if value is None:
        return None
    if not isinstance(value, str) or not is_dsn(value):
        # not echoed, not even masked: a value of another shape may hide its password anywhere
        shown = "another string" if isinstance(value, str) else f"a {type(value).__name__}"
        raise ConfigError(
            f"config key {key!r}: expected a PostgreSQL connection string "
            f"(postgresql://user:password@host:port/database, or 'host=... dbname=...'), "
            f"got {shown} (not shown: it may hold a password)")
    return value.strip()


@dataclass(frozen=True)
class StoreConfig:
    """``store``: where the canonical store lives (``sqlite``: ``<home>/state.db``;
    ``postgres``: the database ``dsn`` names, with ``pool_size`` connections for reads)."""

    backend: str = _opt(_choice(*STORE_BACKENDS), "sqlite")
    #: The PostgreSQL connection string (required for ``postgres``; not in ``repr``: it may
    #: carry a password).
    dsn: str | None = field(default=None, repr=False, metadata={"parse": _dsn})
    pool_size: int = _opt(_number(1, integer=True, maximum=1000), DEFAULT_POOL_SIZE)

    def __post_init__(self) -> None:
        if self.backend == "postgres" and self.dsn is None:
            raise ConfigError(
                "config key 'store.dsn': required when store.backend is 'postgres' "
                "(or set HERMES_STORE_DSN), e.g. postgresql://user@host:5432/hermes")


#: The most shards a cluster may have (``cluster.shards``).
MAX_SHARDS = 4096


@dataclass(frozen=True)
class ClusterConfig:
    """``cluster``: sessions sharded across gateway processes sharing one PostgreSQL store.

    ``shards`` is fixed when the first node creates the cluster (a node configured otherwise
    refuses to start); ``lease_ttl`` is how long a shard's lease lasts without a renewal
    (seconds; what a dead node's shards wait before others take them), ``heartbeat`` how
    often a node renews its leases and rebalances (seconds; must be shorter than
    ``lease_ttl``, so that a lease survives a late round)."""

    enabled: bool = _opt(_bool, False)
    shards: int = _opt(_number(1, integer=True, maximum=MAX_SHARDS), 64)
    lease_ttl: float = _opt(_number(0.001), 10.0)
    heartbeat: float = _opt(_number(0.001), 2.0)

    def __post_init__(self) -> None:
        if self.heartbeat >= self.lease_ttl:
            raise ConfigError(
                f"config key 'cluster.heartbeat': must be shorter than cluster.lease_ttl "
                f"({self.lease_ttl:g}s), got {self.heartbeat:g}s: a node renews its leases "
                "every heartbeat, and a lease must outlive a late round")


@dataclass(frozen=True)
class GatewayConfig:
    """The whole configuration; build it with :func:`load_config`."""

    home: Path | None = _opt(_path, None)
    group_sessions_per_user: bool = _opt(_bool, True)
    thread_sessions_per_user: bool = _opt(_bool, False)
    session_store_max_age_days: float = _opt(_number(0), 90.0)
    busy_input_mode: str = _opt(_choice("interrupt", "queue"), "interrupt")
    queue_max: int = _opt(_number(1, integer=True), 32)
    session_actor_idle_secs: float = _opt(_number(0.001), 300.0)
    agent: AgentConfig = _section(AgentConfig)
    restart_drain_timeout: float = _opt(_number(0), 30.0)
    stuck_loop_threshold: int = _opt(_number(1, integer=True), 3)
    restart_storm: RestartStormConfig = _section(RestartStormConfig)
    housekeeping: HousekeepingConfig = _section(HousekeepingConfig)
    privacy: PrivacyConfig = _section(PrivacyConfig)
    delivery_ledger: bool = _opt(_bool, True)
    write_sessions_json: bool = _opt(_bool, True)
    http: HttpConfig = _section(HttpConfig)
    platforms: tuple[str, ...] = _opt(_platform_list, ())
    home_channels: dict[str, HomeChannel] = _opt(_home_channels, None)
    whatsapp: WhatsAppConfig = _section(WhatsAppConfig)
    telegram: TelegramConfig = _section(TelegramConfig)
    store: StoreConfig = _section(StoreConfig)
    cluster: ClusterConfig = _section(ClusterConfig)
    #: Dotted paths of legacy keys that were accepted and ignored (``session_reset.mode``).
    ignored_keys: tuple[str, ...] = ()
    #: Dotted paths of keys that are not part of §13.
    unknown_keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.home_channels is None:
            object.__setattr__(self, "home_channels", {})
        if self.cluster.enabled and self.store.backend != "postgres":
            raise ConfigError(
                f"config key 'cluster.enabled': a cluster needs store.backend 'postgres' "
                f"(its nodes share one database), but store.backend is "
                f"{self.store.backend!r}")


# -- loading --------------------------------------------------------------------------------

#: Legacy reset settings: accepted, ignored, reported. No timer ever cuts a conversation.
_LEGACY_TOP = ("session_reset", "session_idle_minutes", "session_reset_hour",
               "SESSION_IDLE_MINUTES", "SESSION_RESET_HOUR", "idle_minutes", "reset_hour")
_LEGACY_ENV = ("SESSION_IDLE_MINUTES", "SESSION_RESET_HOUR")

#: Environment overrides: variable -> dotted key.
ENV_OVERRIDES = {
    "HERMES_HOME": "home",
    "HERMES_BUSY_INPUT_MODE": "busy_input_mode",
    "HERMES_AGENT_KIND": "agent.kind",
    "HERMES_AGENT_TIMEOUT": "agent.timeout",
    "HERMES_AUTO_CONTINUE_FRESHNESS": "agent.auto_continue_freshness",
    "HERMES_RESTART_DRAIN_TIMEOUT": "restart_drain_timeout",
    "HERMES_AGENT_CACHE_MAX_SIZE": "agent.agent_cache.max_size",
    "HERMES_AGENT_CACHE_IDLE_TTL_SECS": "agent.agent_cache.idle_ttl_secs",
    "HERMES_AGENT_CACHE_MEMORY_HIGH_MB": "agent.agent_cache.memory_high_mb",
    "HERMES_REDACT_PII": "privacy.redact_pii",
    "HERMES_HTTP_HOST": "http.host",
    "HERMES_HTTP_PORT": "http.port",
    "HERMES_HTTP_TOKEN": "http.token",
    "HERMES_STORE_BACKEND": "store.backend",
    "HERMES_STORE_DSN": "store.dsn",
    "HERMES_STORE_POOL_SIZE": "store.pool_size",
    "HERMES_CLUSTER_ENABLED": "cluster.enabled",
    "HERMES_CLUSTER_SHARDS": "cluster.shards",
    "HERMES_CLUSTER_LEASE_TTL": "cluster.lease_ttl",
    "HERMES_CLUSTER_HEARTBEAT": "cluster.heartbeat",
}


def _read_source(source: Any) -> dict[str, Any]:
    if source is None:
        return {}
    if isinstance(source, Mapping):
        return dict(source)
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"config file {str(path)!r} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {str(path)!r} cannot be read: {exc}") from None
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {str(path)!r} is not valid YAML: {exc}") from None
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise ConfigError(
                f"config file {str(path)!r} must hold a mapping at the top level, "
                f"not {type(data).__name__}"
            )
        return data
    raise ConfigError(
        f"config source must be a file path, a mapping or None, not {type(source).__name__}"
    )


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = tree
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[leaf] = value


def _build(cls: type, data: Any, prefix: str, unknown: list[str], ignored: list[str]) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"config key {prefix.rstrip('.')!r}: expected a mapping, got {data!r}")
    by_name = {f.name: f for f in fields(cls) if "parse" in f.metadata or "section" in f.metadata}
    kwargs: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = str(raw_key)
        dotted = prefix + key
        if not prefix and key in _LEGACY_TOP:
            if isinstance(value, Mapping) and value:
                ignored.extend(f"{dotted}.{sub}" for sub in value)
            else:
                ignored.append(dotted)
            continue
        spec = by_name.get(key)
        if spec is None:
            unknown.append(dotted)
            continue
        if "section" in spec.metadata:
            kwargs[key] = _build(spec.metadata["section"], value, dotted + ".", unknown, ignored)
        elif isinstance(value, _EnvValue):
            try:
                kwargs[key] = spec.metadata["parse"](dotted, str(value))
            except ConfigError as exc:
                raise ConfigError(f"environment variable {value.var}: {exc}") from None
        else:
            kwargs[key] = spec.metadata["parse"](dotted, value)
    return cls(**kwargs)


def load_config(source: Any = None, *, env: Mapping[str, str] | None = None) -> GatewayConfig:
    """Build a :class:`GatewayConfig` from a YAML path or mapping, ``env`` and the defaults.

    ``env`` defaults to ``os.environ``. Invalid values raise :class:`ConfigError` naming the
    key (and the variable, for env values); unknown and legacy keys are listed on the result
    and warned about once each with :class:`ConfigWarning`.
    """
    if isinstance(source, GatewayConfig):
        return source
    env = os.environ if env is None else env
    tree = _deep_copy(_read_source(source))
    for var, dotted in ENV_OVERRIDES.items():
        raw = env.get(var)
        if raw is None or raw == "":
            continue
        _set_dotted(tree, dotted, _EnvValue(var, raw))
    unknown: list[str] = []
    ignored: list[str] = []
    config = _build(GatewayConfig, tree, "", unknown, ignored)
    ignored.extend(var for var in _LEGACY_ENV if env.get(var) not in (None, ""))
    ignored_t = tuple(dict.fromkeys(ignored))
    unknown_t = tuple(dict.fromkeys(unknown))
    for key in ignored_t:
        warnings.warn(
            f"config key {key!r} is ignored: conversations are never cut by timers; "
            "use /new or /reset",
            ConfigWarning,
            stacklevel=2,
        )
    for key in unknown_t:
        warnings.warn(f"unknown config key {key!r} is ignored", ConfigWarning, stacklevel=2)
    return replace(config, ignored_keys=ignored_t, unknown_keys=unknown_t)


class _EnvValue(str):
    """A string from the environment that remembers its variable, for error messages."""

    var: str

    def __new__(cls, var: str, raw: str) -> _EnvValue:
        obj = super().__new__(cls, raw)
        obj.var = var
        return obj


def _deep_copy(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, Mapping) else v for k, v in data.items()}
