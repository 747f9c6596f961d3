"""Starting concurrent work cheaply: a greenlet under gevent, a daemon thread otherwise.

Under ``gevent.monkey.patch_all()`` a ``threading.Thread`` is a greenlet wrapped in a
thread object, and ``Thread.start()`` blocks its caller until the new greenlet has run (a
hub round trip). Session actors and turn workers are started by the thousand, so there they
are spawned as bare greenlets: no wait, no thread bookkeeping. Without gevent nothing
changes: real daemon threads, as pykka's ``ThreadingActor`` starts them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pykka

from hermes_actors.store.executor import gevent_threading_patched

__all__ = ["LightActor", "spawn"]


def spawn(fn: Callable[[], Any], name: str) -> None:
    """Run ``fn()`` concurrently: a bare greenlet under gevent, else a daemon thread."""
    if gevent_threading_patched():
        import gevent

        gevent.spawn(fn)
    else:
        threading.Thread(target=fn, name=name, daemon=True).start()


class LightActor(pykka.ThreadingActor):
    """A ``ThreadingActor`` whose loop is a bare greenlet under gevent (see module doc)."""

    def _start_actor_loop(self) -> None:
        if gevent_threading_patched():
            import gevent

            gevent.spawn(self._actor_loop)
        else:
            super()._start_actor_loop()
