"""Splitting a long reply into messages a platform accepts, in order (Telegram, Slack).

Cut at the last paragraph break that fits, else the last line break, else the last space,
else hard at the limit, counting UTF-16 code units (what the Bot API counts; stricter than
characters, so a Slack limit in characters is kept too).
"""

from __future__ import annotations

__all__ = ["split_message", "utf16_length"]

_SEPARATORS = ("\n\n", "\n", " ")


def utf16_length(text: str) -> int:
    """The length of ``text`` as the Bot API counts it (UTF-16 code units)."""
    return len(text.encode("utf-16-le")) // 2


def _fitting(text: str, limit: int) -> int:
    """How many code points of ``text`` fit in ``limit`` UTF-16 code units."""
    units = 0
    for index, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > limit:
            return index
    return len(text)


def _cut(window: str) -> tuple[int, str]:
    """Where to end a chunk within ``window``, and the separator found there."""
    for separator in _SEPARATORS:
        index = window.rfind(separator)
        if index > 0:
            return index + len(separator), separator
    return len(window), ""


def split_message(text: str, limit: int) -> list[str]:
    """``text`` as messages of at most ``limit`` UTF-16 code units, in order.

    Cut at the last paragraph break that fits, else the last line break, else the last
    space, else hard at the limit. The whitespace at a cut is dropped (Telegram would trim
    it anyway) and no chunk is blank; every other character is kept, in order. A text that
    fits is returned unchanged, as one message.
    """
    if limit < 2:
        raise ValueError("limit must be at least 2 UTF-16 code units")
    chunks: list[str] = []
    rest = text
    while utf16_length(rest) > limit:
        cut, separator = _cut(rest[:_fitting(rest, limit)])
        head = rest[:cut].rstrip()
        if head:
            chunks.append(head)
        rest = rest[cut:]
        if separator:
            rest = rest.lstrip("\n" if "\n" in separator else " ")
    if rest.strip() or not chunks:
        chunks.append(rest)
    return chunks
