"""One op dispatch for the database backends: which handler applies each operation.

A backend's handler class (:class:`~hermes_actors.store.backends.sqlite.operations.SqliteOps`,
:class:`~hermes_actors.store.backends.postgres.operations.PostgresOps`) names the method
that applies an op after the op's class (``CreateSession`` → ``_create_session``); the table
from op type to bound method is built once here, so an ``apply`` is one dict lookup and one
call on every backend, and a backend keeps only its SQL. An op whose method a backend lacks
is refused by name. The cache of session ids known to have a ``sessions`` row (which saves
a statement per append) is shared the same way.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Callable
from typing import Any, NoReturn

from cachetools import LRUCache

from hermes_actors.errors import StoreError
from hermes_actors.store.ops import Op

__all__ = ["KNOWN_SESSIONS", "OpHandlers", "handler_name"]

#: How many session ids with a ``sessions`` row the writer remembers.
KNOWN_SESSIONS = 100_000

_WORD = re.compile(r"(?<!^)(?=[A-Z])")


def handler_name(op_type: type) -> str:
    """The method that applies ``op_type`` (``LedgerClaim`` → ``_ledger_claim``)."""
    return "_" + _WORD.sub("_", op_type.__name__).lower()


class OpHandlers:
    """Base of a database backend's op handlers: the dispatch table and the known sessions.

    ``backend`` names the backend in the refusal of an op it has no handler for.
    """

    def __init__(self, backend: str) -> None:
        self._backend = backend
        #: Session ids known to have a ``sessions`` row. An LRU map of bounded size: it
        #: would otherwise grow with every session ever seen, and forgetting an old id only
        #: costs one ``ON CONFLICT DO NOTHING`` insert at its next append.
        self._known: LRUCache[str, bool] = LRUCache(maxsize=KNOWN_SESSIONS)
        self._known_in_txn: set[str] = set()
        self._handlers: dict[type, Callable[..., Any]] = {
            op_type: getattr(self, handler_name(op_type))
            for op_type in typing.get_args(Op) if hasattr(self, handler_name(op_type))}

    def refuse(self, op: Op) -> NoReturn:
        """Raise for an op this backend has no handler for."""
        raise StoreError(f"{self._backend} cannot apply {type(op).__name__}")

    def committed(self, ok: bool) -> None:
        """Tell the handlers whether the surrounding transaction committed."""
        if ok:
            self._known.update(dict.fromkeys(self._known_in_txn, True))
        self._known_in_txn = set()
