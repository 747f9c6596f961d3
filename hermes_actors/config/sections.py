"""The configuration's sections (§13): frozen dataclasses whose fields carry their parser in
``metadata`` (see :mod:`hermes_actors.config.loading`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermes_actors.config._parsers import (
    _aliases,
    _bool,
    _chat_ids,
    _choice,
    _command,
    _home_channels,
    _memory_budget,
    _number,
    _opt,
    _opt_str,
    _path,
    _platform_list,
    _positive_days,
    _section,
    _str,
    _token,
    _url,
)
from hermes_actors.errors import ConfigError
from hermes_actors.model.context import HomeChannel
from hermes_actors.model.dsn import is_dsn, remember

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
class RetentionConfig:
    """``retention``: conversations idle longer than ``days`` are deleted whole by
    housekeeping, in bounded batches (issue 39); ``None``: every conversation is kept."""

    days: float | None = _opt(_positive_days, None)


@dataclass(frozen=True)
class PrivacyConfig:
    """``privacy``: prompt redaction."""

    redact_pii: bool = _opt(_bool, False)


@dataclass(frozen=True)
class HttpConfig:
    """``http``: the standalone process's HTTP adapter."""

    host: str = _opt(_str, "127.0.0.1")
    port: int = _opt(_number(0, integer=True, maximum=65535), 8642)
    #: The bearer token every route but ``/healthz`` needs; ``None``: no token.
    token: str | None = field(default=None, repr=False, metadata={"parse": _token})
    #: The bearer token of the operator routes (``/v1/admin/...``); ``None``: they are off
    #: (404). Neither token opens the other's routes.
    admin_token: str | None = field(default=None, repr=False, metadata={"parse": _token})
    max_body: int = _opt(_number(1, integer=True), 1_048_576)
    #: Seconds a request body may take to arrive (slow clients get 408).
    body_timeout: float = _opt(_number(0.001), 10.0)
    platforms: tuple[str, ...] = _opt(_platform_list, ("webhook", "api_server"))
    #: Open ``GET /v1/stream`` connections at most; more are answered 503.
    max_streams: int = _opt(_number(1, integer=True), 256)
    #: Seconds between keep-alive comments on an idle stream.
    stream_keepalive: float = _opt(_number(0.01), 15.0)
    #: Connections served at once; further ones wait (in the listen backlog) for a slot.
    max_connections: int = _opt(_number(1, integer=True, maximum=100_000), 1000)
    #: Seconds the request line and headers together may take to arrive (then 408).
    header_timeout: float = _opt(_number(0.001), 10.0)
    #: Seconds a kept-alive connection may stay idle between requests before it is closed.
    keepalive_timeout: float = _opt(_number(0.001), 15.0)

    def __post_init__(self) -> None:
        if self.admin_token is not None and self.admin_token == self.token:
            raise ConfigError("config key 'http.admin_token': must differ from http.token "
                              "(the ingress token must not open the operator routes)")


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


#: The Graph API root (with its version) the WhatsApp Cloud API is served from.
DEFAULT_GRAPH_API_URL = "https://graph.facebook.com/v21.0"


def _phone_number_id(key: str, value: Any) -> str | None:
    """The WhatsApp business phone number's id (digits, as Meta's dashboard shows it)."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return str(value)
    if isinstance(value, str) and value.strip().isdigit():
        return value.strip()
    raise ConfigError(f"config key {key!r}: expected the phone number id (digits, from the "
                      f"WhatsApp API setup page), got {value!r}")


@dataclass(frozen=True)
class SlackConfig:
    """``slack``: the Slack adapter (the Events API, or Socket Mode), on when ``platforms``
    lists ``slack``."""

    #: The environment variable holding the bot token (``xoxb-...``; never in the file).
    bot_token_env: str = _opt(_str, "SLACK_BOT_TOKEN")
    #: The environment variable holding the app's signing secret (``events`` mode).
    signing_secret_env: str = _opt(_str, "SLACK_SIGNING_SECRET")
    #: How events come in: ``events`` (Slack posts them to ``/slack/events``) or
    #: ``socket`` (Socket Mode: the gateway opens a websocket to Slack).
    mode: str = _opt(_choice("events", "socket"), "events")
    #: The environment variable holding the app-level token (``xapp-...``; ``socket`` mode).
    app_token_env: str = _opt(_str, "SLACK_APP_TOKEN")
    #: Another Web API root (a test's fake); ``None``: ``https://slack.com/api/``.
    api_base_url: str | None = _opt(_url, None)


@dataclass(frozen=True)
class WhatsAppConfig:
    """``whatsapp``: the WhatsApp Cloud API adapter (on when ``platforms`` lists
    ``whatsapp``), and LID → phone aliases for canonical identifiers."""

    lid_aliases: dict[str, str] = _opt(_aliases, None)
    #: The environment variable holding the access token (never in the file).
    token_env: str = _opt(_str, "WHATSAPP_TOKEN")
    #: The environment variable holding the app secret (webhook signatures).
    app_secret_env: str = _opt(_str, "WHATSAPP_APP_SECRET")
    #: The environment variable holding the webhook verify token (the subscription check).
    verify_token_env: str = _opt(_str, "WHATSAPP_VERIFY_TOKEN")
    #: The business phone number's id: replies are sent from it.
    phone_number_id: str | None = _opt(_phone_number_id, None)
    #: Another Graph API root (a test's fake); ``None``: Meta's (:data:`DEFAULT_GRAPH_API_URL`).
    api_base_url: str | None = _opt(_url, None)

    def __post_init__(self) -> None:
        if self.lid_aliases is None:
            object.__setattr__(self, "lid_aliases", {})
        if self.api_base_url is None:
            object.__setattr__(self, "api_base_url", DEFAULT_GRAPH_API_URL)


def _gateway_url(key: str, value: Any) -> str | None:
    """A Discord Gateway URL (``wss://...``; ``ws://`` for a test's fake on loopback)."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower().startswith(("ws://", "wss://")):
        return value.strip().rstrip("/")
    raise ConfigError(f"config key {key!r}: expected a ws:// or wss:// URL, got {value!r}")


@dataclass(frozen=True)
class DiscordConfig:
    """``discord``: the Discord adapter (the Gateway in, REST out), on when ``platforms``
    lists ``discord``."""

    #: The environment variable holding the bot token (never in the file).
    token_env: str = _opt(_str, "DISCORD_BOT_TOKEN")
    #: Another REST API root, with its version (a test's fake); ``None``:
    #: ``https://discord.com/api/v10``.
    api_base_url: str | None = _opt(_url, None)
    #: Another Gateway URL; ``None``: the one ``GET /gateway/bot`` names.
    gateway_url: str | None = _opt(_gateway_url, None)
    #: Channel ids answered (a guild channel, a thread, a DM channel; a thread is answered
    #: when it or its parent channel is listed); empty: every channel the bot can read.
    allowed_channels: tuple[str, ...] = _opt(_chat_ids, ())


#: The store backends ``store.backend`` names.
STORE_BACKENDS = ("sqlite", "postgres")
#: Connections the PostgreSQL backend keeps for reads by default (writes have their own).
DEFAULT_POOL_SIZE = 4
#: SQLite's ``synchronous`` levels ``store.synchronous`` may name: ``full`` (the default)
#: syncs the log at every commit, so a committed (acknowledged) message survives a power
#: loss; ``normal`` survives a process crash, but an OS crash may lose the last commits.
SYNCHRONOUS_LEVELS = ("full", "normal")


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
    remember(value.strip())  # (its password is scrubbed from whatever this process prints)
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
    #: SQLite's ``PRAGMA synchronous`` on every connection that writes (``SYNCHRONOUS_LEVELS``).
    synchronous: str = _opt(_choice(*SYNCHRONOUS_LEVELS), "full")

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
    retention: RetentionConfig = _section(RetentionConfig)
    privacy: PrivacyConfig = _section(PrivacyConfig)
    delivery_ledger: bool = _opt(_bool, True)
    write_sessions_json: bool = _opt(_bool, True)
    http: HttpConfig = _section(HttpConfig)
    platforms: tuple[str, ...] = _opt(_platform_list, ())
    home_channels: dict[str, HomeChannel] = _opt(_home_channels, None)
    whatsapp: WhatsAppConfig = _section(WhatsAppConfig)
    telegram: TelegramConfig = _section(TelegramConfig)
    slack: SlackConfig = _section(SlackConfig)
    discord: DiscordConfig = _section(DiscordConfig)
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
