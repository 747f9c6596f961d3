"""``LightActor`` and ``GreenFuture``: pykka actors that are bare greenlets under gevent.

A :class:`LightActor`'s inbox and futures are gevent's (compiled) queue and event under
gevent, instead of ``queue.Queue`` and ``ThreadingFuture``, whose patched ``Condition``
objects are pure Python: every ask paid for building one. Its loop is a bare greenlet (no
``Thread.start()`` round trip). Without gevent nothing changes: a daemon thread, pykka's own
inbox and futures.
"""

from __future__ import annotations

import queue
import sys
from typing import Any

import pykka

from hermes_actors._green import gevent_threading_patched, spawn

__all__ = ["GreenFuture", "LightActor"]


class GreenFuture(pykka.Future):
    """A pykka future on a gevent event, for greenlets of one hub (see module doc)."""

    def __init__(self) -> None:
        super().__init__()
        import gevent.event

        self._done = gevent.event.Event()
        self._result: tuple[Any, Any] | None = None

    def get(self, *, timeout: float | None = None) -> Any:
        """The value (or raise the exception) once set; ``pykka.Timeout`` after ``timeout``."""
        try:
            return super().get(timeout=timeout)  # a get hook (map, filter, ...) answers
        except NotImplementedError:
            pass
        if not self._done.wait(timeout):
            raise pykka.Timeout(f"{timeout} seconds")
        assert self._result is not None  # set before the event
        value, exc_info = self._result
        if exc_info is not None:
            exc_type, exc_value, exc_traceback = exc_info
            if exc_value is None:
                exc_value = exc_type()
            if exc_value.__traceback__ is not exc_traceback:
                raise exc_value.with_traceback(exc_traceback)
            raise exc_value
        return value

    def set(self, value: Any = None) -> None:
        """Resolve with ``value`` (once)."""
        if self._result is not None or self._get_hook is not None:
            raise queue.Full
        self._result = (value, None)
        self._done.set()

    def set_exception(self, exc_info: Any = None) -> None:
        """Resolve with an exception (``sys.exc_info()`` by default; once)."""
        if exc_info is None:
            exc_info = sys.exc_info()
        if self._result is not None or self._get_hook is not None:
            raise queue.Full
        self._result = (None, exc_info)
        self._done.set()

    def set_get_hook(self, func: Any) -> None:
        """See ``pykka.Future.set_get_hook``."""
        if self._result is not None:
            raise queue.Full
        super().set_get_hook(func)


class LightActor(pykka.ThreadingActor):
    """A ``ThreadingActor`` that is a bare greenlet under gevent (see module doc)."""

    @staticmethod
    def _create_actor_inbox() -> Any:
        if gevent_threading_patched():
            import gevent.queue

            return gevent.queue.Queue()
        return pykka.ThreadingActor._create_actor_inbox()

    @staticmethod
    def _create_future() -> pykka.Future:
        if gevent_threading_patched():
            return GreenFuture()
        return pykka.ThreadingFuture()

    def _start_actor_loop(self) -> None:
        if gevent_threading_patched():
            spawn(self._actor_loop, "actor")
        else:
            super()._start_actor_loop()
