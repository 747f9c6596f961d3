"""Silence markers: an agent's way of saying "no reply to this one".

An agent in a group chat, or woken by an internal event, may decide that nothing needs to be
said and answer with a bare marker such as ``[SILENT]`` or ``NO_REPLY``. Models dress the
marker up (``**NO_REPLY**``, ``no reply.``, ``[ silent ]``), so the check is tolerant of case,
spacing and edge punctuation, but strict about content: a reply that *mentions* a marker
among other words is a real reply and must be delivered. An empty reply is a different case
(nothing was produced) and is not silence.
"""

from __future__ import annotations

import string
import unicodedata

__all__ = ["SILENCE_MARKERS", "SILENCE_NOTICE", "is_silence_marker"]

#: The marker words, after normalisation (upper case, single spaces, edges stripped).
SILENCE_MARKERS = frozenset({"SILENT", "NO_REPLY", "NO REPLY"})

#: What a human is told when the agent answered their message with a silence marker only.
SILENCE_NOTICE = "The agent chose not to reply."


def _is_edge_noise(char: str) -> bool:
    """Whitespace or punctuation that may wrap a marker (``[``, ``*``, ``.``, ``。``)."""
    return (
        char.isspace() or char in string.punctuation or unicodedata.category(char).startswith("P")
    )


def _normalise(text: str) -> str:
    start, end = 0, len(text)
    while start < end and _is_edge_noise(text[start]):
        start += 1
    while end > start and _is_edge_noise(text[end - 1]):
        end -= 1
    return " ".join(text[start:end].split()).upper()


def is_silence_marker(text: str | None) -> bool:
    """Whether ``text`` is nothing but a silence marker (``[SILENT]``, ``SILENT``,
    ``NO_REPLY``, ``NO REPLY``), ignoring case, runs of whitespace and edge punctuation.

    ``None`` and empty text are not silence.
    """
    if not text or not isinstance(text, str):
        return False
    upper = text.upper()
    if "SILENT" not in upper and "REPLY" not in upper:
        # Every marker has one of these words, unbroken by whitespace; ``upper()`` maps each
        # character alone, so a marker's word stays a substring of the whole text's upper
        # case. Most replies are decided here, without the walk over their edges.
        return False
    return _normalise(text) in SILENCE_MARKERS
