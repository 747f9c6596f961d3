"""``to_json``: the one compact JSON text form the project writes (UTF-8 kept as is).

One module-level encoder serves every caller: ``json.dumps(value, ensure_ascii=False)``
builds a new ``JSONEncoder`` at each call, which on the turn path costs more than
encoding a short value. The output is exactly ``json.dumps``'s with those options, so
texts written before and after compare equal (the routing rows' recovery marks rely on it).
"""

from __future__ import annotations

import json

__all__ = ["to_json"]

#: ``json.dumps(value, ensure_ascii=False)`` without building an encoder per call.
to_json = json.JSONEncoder(ensure_ascii=False).encode
