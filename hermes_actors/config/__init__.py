"""Configuration (§13): a YAML file or mapping, ``HERMES_*`` environment overrides, defaults.

Precedence is env > file > defaults. Every section is a frozen dataclass whose fields carry
their own parser in ``metadata``, so one generic walker validates the whole tree, names the
dotted key in every error and collects unknown and legacy keys without a hand-written branch
per key.

The package: the leaf parsers (``_parsers``), the sections (``sections``) and the loading
(``loading``); everything public is re-exported here.
"""

from __future__ import annotations

from hermes_actors.config.loading import ENV_OVERRIDES, load_config, require_config
from hermes_actors.config.sections import (
    DEFAULT_POOL_SIZE,
    MAX_SHARDS,
    STORE_BACKENDS,
    SYNCHRONOUS_LEVELS,
    AgentCacheConfig,
    AgentConfig,
    ClusterConfig,
    DiscordConfig,
    GatewayConfig,
    HousekeepingConfig,
    HttpConfig,
    OpenAIConfig,
    PrivacyConfig,
    RestartStormConfig,
    RetentionConfig,
    SlackConfig,
    StoreConfig,
    TelegramConfig,
    WhatsAppConfig,
)
from hermes_actors.model.context import HomeChannel

__all__ = [
    "AgentCacheConfig",
    "AgentConfig",
    "ClusterConfig",
    "DEFAULT_POOL_SIZE",
    "DiscordConfig",
    "ENV_OVERRIDES",
    "GatewayConfig",
    "HomeChannel",
    "HousekeepingConfig",
    "HttpConfig",
    "MAX_SHARDS",
    "OpenAIConfig",
    "PrivacyConfig",
    "RestartStormConfig",
    "RetentionConfig",
    "SlackConfig",
    "STORE_BACKENDS",
    "StoreConfig",
    "SYNCHRONOUS_LEVELS",
    "TelegramConfig",
    "WhatsAppConfig",
    "load_config",
    "require_config",
]
