"""``to_json``: the one compact JSON text form the project writes (UTF-8 kept as is).

The output is exactly ``json.dumps(value, ensure_ascii=False)``'s, so texts written before
and after compare equal (the routing rows' recovery marks rely on it). It calls the C
encoder directly: ``json.dumps`` builds a ``JSONEncoder`` per call and ``encode`` adds two
Python layers, which on the turn path cost more than encoding a short routing entry
(4.2 → 3.6 µs each; a turn writes two or three). A fresh C encoder per call keeps its
circular-reference table private, so threads never share one, and a failed call leaves
nothing behind for the next. Only on CPython in the tested range (``_versions.TESTED``):
elsewhere ``JSONEncoder.encode``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json import encoder as _encoder
from typing import Any

from hermes_actors._versions import in_tested_range, python_version

__all__ = ["to_json"]

_fallback = json.JSONEncoder(ensure_ascii=False)
_make: Any = getattr(_encoder, "c_make_encoder", None)
_quote: Any = getattr(_encoder, "c_encode_basestring", None)


def _c_to_json(value: object) -> str:
    """``json.dumps(value, ensure_ascii=False)`` through the C encoder."""
    # (markers, default, quote, indent, key separator, item separator, sort_keys, skipkeys,
    #  allow_nan): the options json.dumps uses by default.
    return "".join(_make({}, _fallback.default, _quote, None, ": ", ", ", False, False, True)(
        value, 0))


#: ``json.dumps(value, ensure_ascii=False)``, faster (see the module doc).
to_json: Callable[[Any], str] = (
    _c_to_json if _make is not None and _quote is not None
    and in_tested_range("python", python_version()) else _fallback.encode)
