"""``Errands``: slow effects of an actor, run in order off its mailbox.

The agent cache decides in its mailbox which agents to release or close, but the calls
themselves (``commit_memory`` reads a whole transcript from the store, ``close`` may end a
browser) are agent code of unknown speed: they go to this one worker actor, which runs them
in the order they were handed over. The owning actor never waits for them in its mailbox:
:meth:`Errands.settled` gives it a future to hand to whoever waits (housekeeping, shutdown),
and a caller that needs to know when its own errands are done hands over a completion
callback as the last errand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pykka

from hermes_actors._green.actor import LightActor

__all__ = ["Errands"]


class _Worker(LightActor):
    use_daemon_thread = True

    def on_receive(self, message: Any) -> Any:
        if type(message) is list:  # errands handed over together
            for errand in message:
                errand()
        elif message is not None:
            message()
        return None


class Errands:
    """One ordered worker for one actor's slow effects."""

    def __init__(self) -> None:
        self._ref = _Worker.start()
        self._held: list[Callable[[], Any]] | None = None
        self._depth = 0

    def run(self, errand: Callable[[], Any]) -> None:
        """Run ``errand()`` after every errand handed over before it (it must not raise:
        wrap agent code in ``call_agent``)."""
        if self._held is not None:
            self._held.append(errand)
        else:
            self._ref.tell(errand)

    def __enter__(self) -> Errands:
        """``with errands:``: the errands handed over inside the block go to the worker as
        one message when it ends, in their order (a checkin's eviction and its completion
        callback: one message to the worker instead of two). For the owning actor's own
        use; nested blocks send with the outermost. (The errands themselves are the
        context manager: a generator-based one cost four Python frames more a checkin.)"""
        self._depth += 1
        if self._depth == 1:
            self._held = []
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._depth -= 1
        if self._depth:
            return
        held, self._held = self._held, None
        if held:
            self._ref.tell(held[0] if len(held) == 1 else held)

    def settled(self) -> pykka.Future:
        """A future answered once every errand handed over so far has run (asking for it
        does not wait)."""
        return self._ref.ask(None, block=False)

    def stop(self) -> None:
        """Stop the worker once the errands handed over so far have run."""
        self._ref.stop(block=False)
