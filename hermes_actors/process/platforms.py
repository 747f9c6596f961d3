"""The chat platforms ``run`` serves beyond its HTTP API: ``platforms: [telegram]``.

Each is checked in two steps so a mistake costs nothing: what the configuration and the
environment say (a missing or malformed token) before the home is even claimed, then the
platform itself (``getMe``: a rejected token) before recovery starts. Both are
configuration errors (exit 2) with a message naming the setting, never the token; an
unreachable Bot API server is a runtime failure (exit 1).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from hermes_actors.config import GatewayConfig
from hermes_actors.errors import CommandFailed, ConfigError

__all__ = ["connect_platforms", "platform_adapters"]


def platform_adapters(config: GatewayConfig, env: Mapping[str, str] | None = None
                      ) -> list[Any]:
    """The adapters ``config.platforms`` turns on (only ``telegram`` has one so far)."""
    if "telegram" not in config.platforms:
        return []
    if "telegram" in config.http.platforms:
        raise ConfigError("telegram is listed in both platforms and http.platforms: a "
                          "platform has one adapter (remove it from http.platforms)")
    from hermes_actors.adapters.telegram import TelegramAdapter, check_token

    env = os.environ if env is None else env
    settings = config.telegram
    token = check_token(env.get(settings.token_env), settings.token_env)
    return [TelegramAdapter(settings, token)]


def connect_platforms(adapters: list[Any]) -> None:
    """Check each platform adapter against its service (``getMe`` for Telegram)."""
    from hermes_actors.adapters.telegram import TelegramError

    for adapter in adapters:
        try:
            adapter.connect()
        except TelegramError as exc:
            raise CommandFailed(f"cannot start the Telegram adapter: {exc}") from None
