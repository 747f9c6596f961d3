"""The Telegram adapter: long polling in, the delivery ledger out, "typing…" while a turn runs.

``client`` (the Bot API through pyTelegramBotAPI, token masked), ``mapping`` (updates to
events, replies to messages: pure), ``poller`` (``getUpdates``, acknowledged after
durability), ``indicator`` (the renewed chat action) and ``adapter`` (the platform the
gateway sees). Importing this package imports pyTelegramBotAPI; nothing else in
``hermes_actors`` does unless ``platforms`` lists ``telegram``.
"""

from hermes_actors.adapters.telegram.adapter import TelegramAdapter, check_token
from hermes_actors.adapters.telegram.client import BotClient, TelegramError, mask_token

__all__ = ["BotClient", "TelegramAdapter", "TelegramError", "check_token", "mask_token"]
