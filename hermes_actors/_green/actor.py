"""``LightActor`` and ``GreenFuture``: pykka actors that are bare greenlets under gevent.

Under gevent a :class:`LightActor`'s inbox is a :class:`GreenInbox` and its futures are on
gevent's (compiled) event, instead of ``queue.Queue`` and ``ThreadingFuture``, whose patched
``Condition`` objects are pure Python: every ask paid for building one. Its loop is a bare
greenlet (no ``Thread.start()`` round trip). Without gevent nothing changes: a daemon thread,
pykka's own inbox and futures.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import uuid
from collections import deque
from typing import Any

import pykka

from hermes_actors._green import _patched, gevent_threading_patched, spawn
from hermes_actors._versions import dist_version, in_tested_range

#: pykka's version, from its dist-info (it has no ``__version__``).
PYKKA_VERSION = dist_version("pykka", os.path.dirname(os.path.dirname(pykka.__file__)))
#: Whether :class:`LightRef` and :class:`LightActor` borrow pykka's internals (its private
#: ``_envelope.Envelope``, the attributes its ``Actor.__init__`` sets): only in the tested
#: range of pykka (``_versions.TESTED``); outside it they use pykka's public methods.
BORROW_PYKKA = in_tested_range("pykka", PYKKA_VERSION)
if BORROW_PYKKA:
    from pykka._envelope import Envelope

__all__ = ["GreenFuture", "GreenInbox", "LightActor", "LightRef"]


class GreenInbox:
    """An actor's mailbox under gevent: a FIFO with one reader, the actor's loop.

    What pykka asks of an inbox (``put``, ``get``, ``empty``) and no more. gevent's own
    ``Queue`` was the inbox before; an actor is idle between most of its messages, and each
    ``get`` that had to wait ended in gevent's cleanup of its waiter list raising and catching
    a ``ValueError`` whose message formats the waiter's ``repr`` (about 2.5 a turn, 1.3 % of
    a turn's instructions), after two Python-level timeout calls. Here the reader parks on a
    bare ``Waiter`` and ``put`` wakes it through the loop, as gevent's queue does.

    Like gevent's queue it belongs to the hub it was made in: ``put`` from a greenlet of that
    hub's thread (or the hub itself), never from another native thread.
    """

    __slots__ = ("_items", "_reader", "_loop")
    _Waiter: Any = None  # gevent's, imported with the first inbox

    def __init__(self) -> None:
        import gevent

        if GreenInbox._Waiter is None:
            from gevent.hub import Waiter

            GreenInbox._Waiter = Waiter
        self._items: deque[Any] = deque()
        self._reader: Any = None  # the parked reader's Waiter
        self._loop = gevent.get_hub().loop

    def put(self, item: Any) -> None:
        """Append ``item``; wake the reader if it waits."""
        self._items.append(item)
        reader = self._reader
        if reader is not None:
            self._reader = None
            self._loop.run_callback(reader.switch, None)

    def get(self) -> Any:
        """The oldest item, waiting for one."""
        items = self._items
        while not items:
            reader = self._reader = self._Waiter()
            try:
                reader.get()
            finally:  # (a greenlet killed while it waits leaves no reader behind)
                if self._reader is reader:
                    self._reader = None
        return items.popleft()

    def empty(self) -> bool:
        """Whether no item waits."""
        return not self._items

    def qsize(self) -> int:
        """How many items wait."""
        return len(self._items)


class GreenFuture(pykka.Future):
    """A pykka future for greenlets of one hub (see module doc), on a gevent event that the
    first ``get`` which has to wait makes."""

    _Event: Any = None  # gevent's, imported with the first future

    def __init__(self) -> None:
        super().__init__()
        #: gevent's event, made by the first ``get`` that has to wait: most answers are set
        #: before anyone asks for them (a turn's agent checkout is answered while the turn's
        #: start commits), and making an event was 2 % of a turn.
        self._done: Any = None
        self._result: tuple[Any, Any] | None = None

    def get(self, *, timeout: float | None = None) -> Any:
        """The value (or raise the exception) once set; ``pykka.Timeout`` after ``timeout``."""
        if self._get_hook is not None:  # a get hook (map, filter, ...) answers
            return super().get(timeout=timeout)
        # (pykka's own get() answers a future without a hook by raising NotImplementedError,
        # which cost a raise and a catch at every ask before this test)
        result = self._result
        if result is None:
            done = self._done
            if done is None:
                if GreenFuture._Event is None:
                    import gevent.event

                    GreenFuture._Event = gevent.event.Event
                done = self._done = self._Event()
            if not done.wait(timeout):
                raise pykka.Timeout(f"{timeout} seconds")
            result = self._result
            assert result is not None  # set before the event
        value, exc_info = result
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
        if self._done is not None:  # (a getter waits)
            self._done.set()

    def set_exception(self, exc_info: Any = None) -> None:
        """Resolve with an exception (``sys.exc_info()`` by default; once)."""
        if exc_info is None:
            exc_info = sys.exc_info()
        if self._result is not None or self._get_hook is not None:
            raise queue.Full
        self._result = (None, exc_info)
        if self._done is not None:
            self._done.set()

    def set_get_hook(self, func: Any) -> None:
        """See ``pykka.Future.set_get_hook``."""
        if self._result is not None:
            raise queue.Full
        super().set_get_hook(func)


#: Makes pykka's (slotted) envelope without running its ``__init__``: a C call.
_new_envelope = object.__new__


class LightRef(pykka.ActorRef):
    """pykka's ``ActorRef`` with ``tell`` and ``ask`` two Python frames lighter each.

    They do what pykka's do, but test the stopped flag directly instead of through
    ``is_alive()``, and build the envelope without its ``__init__`` frame: a turn sends
    four tells and one ask.
    """

    def tell(self, message: Any) -> None:
        """See ``pykka.ActorRef.tell``."""
        if not BORROW_PYKKA:
            return super().tell(message)
        if self.actor_stopped.is_set():
            raise pykka.ActorDeadError(f"{self} not found")
        envelope = _new_envelope(Envelope)
        envelope.message, envelope.reply_to = message, None
        self.actor_inbox.put(envelope)

    def ask(self, message: Any, *, block: bool = True, timeout: float | None = None) -> Any:
        """See ``pykka.ActorRef.ask``."""
        if not BORROW_PYKKA:
            return super().ask(message, block=block, timeout=timeout)
        future = self.actor_class._create_future()
        if self.actor_stopped.is_set():
            try:
                raise pykka.ActorDeadError(f"{self} not found")
            except pykka.ActorDeadError:
                future.set_exception()
        else:
            envelope = _new_envelope(Envelope)
            envelope.message, envelope.reply_to = message, future
            self.actor_inbox.put(envelope)
        if block:
            return future.get(timeout=timeout)
        return future


class LightActor(pykka.ThreadingActor):
    """A ``ThreadingActor`` that is a bare greenlet under gevent (see module doc), with a
    :class:`LightRef` for its ref."""

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        # pykka's ``Actor.__init__`` (pykka 4), with a LightRef for its ref: calling it and
        # then replacing the ref built two refs an actor (a test holds the attributes to
        # pykka's own). Outside the tested range of pykka: its own, then the ref replaced.
        if not BORROW_PYKKA:
            super().__init__()
            self._actor_ref = LightRef(self)
            return
        self.actor_urn = uuid.uuid4().urn
        self.actor_inbox = self._create_actor_inbox()
        self.actor_stopped = threading.Event()
        self._actor_ref = LightRef(self)

    @staticmethod
    def _create_actor_inbox() -> Any:
        if gevent_threading_patched():
            return GreenInbox()
        return pykka.ThreadingActor._create_actor_inbox()

    @staticmethod
    def _create_future() -> pykka.Future:
        if _patched or gevent_threading_patched():  # (no call once patched: every ask)
            return GreenFuture()
        return pykka.ThreadingFuture()

    def _start_actor_loop(self) -> None:
        if gevent_threading_patched():
            spawn(self._actor_loop, "actor")
        else:
            super()._start_actor_loop()
