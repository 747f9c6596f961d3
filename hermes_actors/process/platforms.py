"""The chat platforms ``run`` serves beyond its HTTP API: ``platforms: [telegram, whatsapp]``.

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
    """The adapters ``config.platforms`` turns on (``telegram``, ``whatsapp``)."""
    env = os.environ if env is None else env
    adapters: list[Any] = []
    for name in ("telegram", "whatsapp"):
        if name in config.platforms and name in config.http.platforms:
            raise ConfigError(f"{name} is listed in both platforms and http.platforms: a "
                              "platform has one adapter (remove it from http.platforms)")
    if "telegram" in config.platforms:
        from hermes_actors.adapters.telegram import TelegramAdapter, check_token

        settings = config.telegram
        token = check_token(env.get(settings.token_env), settings.token_env)
        adapters.append(TelegramAdapter(settings, token))
    if "whatsapp" in config.platforms:
        from hermes_actors.adapters.whatsapp import WhatsAppAdapter, read_secrets

        try:
            secrets = read_secrets(config.whatsapp, env)
        except ConfigError:
            for adapter in adapters:
                adapter.close()
            raise
        adapters.append(WhatsAppAdapter(config.whatsapp, secrets))
    return adapters


def connect_platforms(adapters: list[Any]) -> None:
    """Check each platform adapter against its service (``getMe`` for Telegram, the phone
    number for WhatsApp)."""
    from hermes_actors.errors import HermesActorsError

    for adapter in adapters:
        try:
            adapter.connect()
        except ConfigError:
            raise
        except HermesActorsError as exc:  # TelegramError, WhatsAppError: not reached
            title = {"telegram": "Telegram", "whatsapp": "WhatsApp"}.get(
                adapter.platform, adapter.platform)
            raise CommandFailed(f"cannot start the {title} adapter: {exc}") from None
