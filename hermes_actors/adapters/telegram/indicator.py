"""Telegram's "typing…" indicator: :class:`~hermes_actors.adapters.indicator.TypingIndicator`
(shared with Discord), re-exported where it used to live."""

from hermes_actors.adapters.indicator import TYPING_INTERVAL, TypingIndicator

__all__ = ["TYPING_INTERVAL", "TypingIndicator"]
