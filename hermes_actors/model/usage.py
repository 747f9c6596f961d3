"""An agent's token counters (``TurnResult.usage``, §9) as the store records them.

The counters come from code the runtime does not control (a host's agent, a command agent's
JSON, a server's answer), and they are bookkeeping: a value that is not a count is left
out, never allowed to fail the turn whose reply it rides with.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

__all__ = ["MAX_TOKENS", "TokenUsage", "token_usage"]

#: The largest count taken (a database stores 64-bit integers; no turn comes near this).
MAX_TOKENS = 2**53


class TokenUsage(NamedTuple):
    """The counters of one turn that the ``sessions`` row records."""

    #: The prompt's size, which becomes ``last_prompt_tokens``; ``None`` when not given.
    prompt_tokens: int | None = None
    #: Tokens read, added to the row.
    input_tokens: int = 0
    #: Tokens written, added to the row.
    output_tokens: int = 0

    @property
    def empty(self) -> bool:
        """Whether there is nothing to record."""
        return self.prompt_tokens is None and not self.input_tokens and not self.output_tokens


def _count(value: Any) -> int | None:
    """A whole number from 0 to :data:`MAX_TOKENS` (an int, a finite float, a string of
    digits), or ``None`` for anything else."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        # (a count has at most 16 digits; int() of thousands would raise ValueError)
        value = int(text) if text.isascii() and text.isdigit() and len(text) <= 20 else None
    elif isinstance(value, float):
        value = int(value) if math.isfinite(value) else None
    if not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
        return None
    return value


def token_usage(usage: Any) -> TokenUsage:
    """The counters of ``usage`` (a mapping of ``prompt_tokens``, ``input_tokens``,
    ``output_tokens``); anything that is not a count, or not a mapping, is left out."""
    if not isinstance(usage, Mapping):
        return TokenUsage()
    return TokenUsage(
        prompt_tokens=_count(usage.get("prompt_tokens")),
        input_tokens=_count(usage.get("input_tokens")) or 0,
        output_tokens=_count(usage.get("output_tokens")) or 0,
    )
