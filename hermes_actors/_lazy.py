"""``lazy_exports``: a package's public names, imported on first use (PEP 562).

Used by packages whose import must stay cheap: ``hermes_actors`` (so the standalone process
can patch gevent before anything imports ``threading``) and ``hermes_actors.store`` (so the
database writer process imports only the database layer).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(namespace: dict[str, Any], exports: dict[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` for ``namespace`` (a module's globals):
    each name of ``exports`` comes from its module at first use and is then cached."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
