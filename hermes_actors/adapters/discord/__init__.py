"""The Discord adapter: the Gateway in (messages taken once durable, under the adapter lease
on a cluster), REST out through the delivery ledger, "typing…" while a turn runs.

``mapping`` (Gateway payloads to messages, the thread directory, replies to parts: pure),
``bridge`` (the process hikari runs in, on plain asyncio), ``client`` (this process's end
of it) and ``adapter`` (the platform the gateway sees). Importing this package imports
neither hikari nor aiohttp: only the bridge process does, when ``platforms`` lists
``discord``.
"""

from hermes_actors.adapters.discord.adapter import INTENTS, DiscordAdapter, check_token
from hermes_actors.adapters.discord.client import BridgeClient, BridgeError, DiscordError

__all__ = ["INTENTS", "BridgeClient", "BridgeError", "DiscordAdapter", "DiscordError",
           "check_token"]
