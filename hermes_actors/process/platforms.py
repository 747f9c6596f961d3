"""The chat platforms ``run`` serves beyond its HTTP API: ``platforms: [telegram, slack,
whatsapp, discord]``.

Each is checked in two steps so a mistake costs nothing: what the configuration and the
environment say (a platform without an adapter, a missing or malformed secret) before the
home is even claimed, then the platform itself (``getMe``, ``auth.test``, Discord's
``/users/@me``: a rejected token)
before recovery starts. Both are configuration errors (exit 2) with a message naming the
setting, never the secret; an unreachable API server is a runtime failure (exit 1).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from hermes_actors.config import GatewayConfig
from hermes_actors.errors import CommandFailed, ConfigError, HermesActorsError

__all__ = ["ADAPTERS", "connect_platforms", "platform_adapters"]

#: The platforms ``platforms`` may list: those with an adapter.
ADAPTERS = ("telegram", "slack", "whatsapp", "discord")
_TITLES = {"whatsapp": "WhatsApp"}


def platform_adapters(config: GatewayConfig, env: Mapping[str, str] | None = None
                      ) -> list[Any]:
    """The adapters ``config.platforms`` turns on; a platform listed without an adapter (or
    also served by the HTTP API) is a :class:`ConfigError`."""
    missing = [p for p in config.platforms if p not in ADAPTERS]
    if missing:
        raise ConfigError(
            f"platforms lists {', '.join(missing)}, but hermes-actors has no adapter for "
            f"{'it' if len(missing) == 1 else 'them'} (adapters: {', '.join(ADAPTERS)}; an "
            "HTTP client posting as a platform is configured in http.platforms)")
    for platform in config.platforms:
        if platform in config.http.platforms:
            raise ConfigError(f"{platform} is listed in both platforms and http.platforms: a "
                              f"platform has one adapter (remove it from http.platforms)")
    env = os.environ if env is None else env
    adapters: list[Any] = []
    if "telegram" in config.platforms:
        from hermes_actors.adapters.telegram import TelegramAdapter, check_token

        settings = config.telegram
        token = check_token(env.get(settings.token_env), settings.token_env)
        adapters.append(TelegramAdapter(settings, token))
    if "slack" in config.platforms:
        from hermes_actors.adapters import slack

        if config.slack.mode == "socket":  # Socket Mode: a pull adapter (a lease in a cluster)
            bot_token, app_token = slack.check_socket_secrets(env, config.slack)
            adapters.append(slack.SlackSocketAdapter(config.slack, bot_token, app_token))
        else:
            bot_token, signing_secret = slack.check_secrets(env, config.slack)
            adapters.append(slack.SlackAdapter(config.slack, bot_token, signing_secret))
    if "whatsapp" in config.platforms:
        from hermes_actors.adapters.whatsapp import WhatsAppAdapter, read_secrets

        try:
            secrets = read_secrets(config.whatsapp, env)
        except ConfigError:
            for adapter in adapters:
                adapter.close()
            raise
        adapters.append(WhatsAppAdapter(config.whatsapp, secrets))
    if "discord" in config.platforms:
        from hermes_actors.adapters import discord

        try:
            token = discord.check_token(env.get(config.discord.token_env),
                                        config.discord.token_env)
        except ConfigError:
            for adapter in adapters:
                adapter.close()
            raise
        adapters.append(discord.DiscordAdapter(config.discord, token))
    return adapters


def connect_platforms(adapters: list[Any]) -> None:
    """Check each platform adapter against its service (``getMe``, ``auth.test``, the
    phone number, ``/users/@me``)."""
    for adapter in adapters:
        try:
            adapter.connect()
        except ConfigError:
            raise
        except HermesActorsError as exc:  # not reached: TelegramError, SlackError, ...
            title = _TITLES.get(adapter.platform, adapter.platform.capitalize())
            raise CommandFailed(f"cannot start the {title} adapter: {exc}") from None
