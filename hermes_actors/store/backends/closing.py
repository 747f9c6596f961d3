"""Closing a database backend once, whichever thread calls ``close`` first."""

from __future__ import annotations

import threading

__all__ = ["ClosesOnce"]


class ClosesOnce:
    """Mixin of a backend's idempotent ``close``: ``_closed`` (read freely, a plain
    attribute) turns true at the first :meth:`_first_close`, which alone returns true.
    The backend sets ``_closed = False`` (an instance attribute: its reads stay cheap) and
    ``_close_lock`` in its ``__init__``."""

    _closed: bool
    _close_lock: threading.Lock

    def _first_close(self) -> bool:
        with self._close_lock:
            if self._closed:
                return False
            self._closed = True
            return True
