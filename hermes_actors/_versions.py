"""The versions of other libraries whose private parts this project borrows, and the ranges
they were measured and tested in (issue 37 §5).

Each borrowing (see docs/architecture.md, "Borrowed internals") takes its fast path only
when the library's version lies in the tested range, and the public path otherwise; a test
(tests/test_borrowed_internals.py) asserts on the installed version that each private part
still exists with the shape relied on, so an upgrade fails loudly in CI instead of quietly
misbehaving.

The versions are read without :mod:`importlib.metadata` (importing it costs 30-45 ms, see
``_green/plugins.py``): from the module's ``__version__`` where it has one, else from the
name of its ``*.dist-info`` folder next to it.
"""

from __future__ import annotations

import os
import re
import sys

__all__ = ["TESTED", "dist_version", "in_tested_range", "version_tuple"]

#: ``{what: (lowest version, first version outside)}`` of the borrowings' tested ranges.
TESTED: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    # pykka's Envelope (``pykka._envelope``) and the attributes ``Actor.__init__`` sets
    "pykka": ((4, 0), (5, 0)),
    # gevent's plugin lookup through ``importlib.metadata.entry_points(group=...)``, and
    # ``gevent.pywsgi.Input``'s fields (``content_length``, ``position``, ...)
    "gevent": ((24, 2), (27, 0)),
    # peewee's optional ``import psycopg2`` / ``import psycopg`` at its import
    "peewee": ((3, 17), (5, 0)),
    # ``json.encoder.c_make_encoder``'s nine positional arguments (CPython)
    "python": ((3, 10), (3, 15)),
}

_NUMBERS = re.compile(r"\d+")


def version_tuple(text: str) -> tuple[int, ...]:
    """The leading numeric parts of a version (``"3.3.9"`` → ``(3, 3, 9)``; ``"26.9.0rc1"``
    → ``(26, 9, 0)``)."""
    parts: list[int] = []
    for part in text.split("."):
        match = _NUMBERS.match(part)
        if match is None:
            break
        parts.append(int(match.group()))
        if match.end() != len(part):
            break
    return tuple(parts)


def dist_version(name: str, folder: str) -> str | None:
    """The version of distribution ``name`` from its ``name-version.dist-info`` folder in
    ``folder`` (``None`` when there is none)."""
    wanted = re.sub(r"[-_.]+", "_", name).lower()
    try:
        entries = os.listdir(folder)
    except OSError:
        return None
    for entry in entries:
        if entry.endswith(".dist-info"):
            dist, _, version = entry[: -len(".dist-info")].partition("-")
            if re.sub(r"[-_.]+", "_", dist).lower() == wanted and version:
                return version
    return None


def in_tested_range(what: str, version: str | tuple[int, ...] | None) -> bool:
    """Whether ``version`` of ``what`` (a key of :data:`TESTED`) lies in its tested range;
    ``None`` (unknown) does not."""
    if version is None:
        return False
    numbers = version_tuple(version) if isinstance(version, str) else version
    low, high = TESTED[what]
    return low <= numbers < high


def python_version() -> tuple[int, ...]:
    """This interpreter's version (CPython: the one whose ``_json`` is borrowed)."""
    return tuple(sys.version_info[:2]) if sys.implementation.name == "cpython" else (0,)
