"""``TypingIndicator``: "typing…" in one chat for as long as a turn runs (Telegram, Discord).

Neither platform has a call to clear it: Telegram shows a chat action for about five
seconds, Discord a typing indicator for about ten, or until the bot's next message; so the
indicator sends the action at once and again every ``interval`` seconds (Telegram's 4 by
default) until :meth:`stop`. ``stop`` also waits for a chat action
already on its way: one that reached Telegram after the reply would show "typing…" under an
answered message. A failed action (the bot was blocked, a rate limit) ends the indicator for
this turn instead of repeating a refused call every few seconds.

The renewal waits through an injected ``wait(stopped, seconds) -> bool`` (default: the
event's own ``wait``), so tests step it without sleeping.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from hermes_actors._green import spawn

__all__ = ["TYPING_INTERVAL", "TypingIndicator"]

#: Seconds between two ``typing`` actions by default (Telegram shows one for about 5 s).
TYPING_INTERVAL = 4.0
#: Seconds ``stop`` waits for an action already being sent.
_STOP_WAIT = 10.0


def _wait(stopped: threading.Event, seconds: float) -> bool:
    return stopped.wait(seconds)


class TypingIndicator:
    """Calls ``send_action()`` (True when it went through) now and every ``interval``
    seconds until stopped."""

    def __init__(self, send_action: Callable[[], bool], interval: float = TYPING_INTERVAL, *,
                 wait: Callable[[threading.Event, float], bool] = _wait,
                 name: str = "typing") -> None:
        self._send_action = send_action
        self._name = name
        self._interval = interval
        self._wait = wait
        self._stopped = threading.Event()
        self._sending = threading.Lock()
        #: Chat actions sent so far.
        self.sent = 0
        #: Set once the renewal loop has ended.
        self.finished = threading.Event()

    def start(self) -> TypingIndicator:
        """Begin showing it (in a greenlet or a daemon thread); returns ``self``."""
        spawn(self._run, self._name)
        return self

    def _run(self) -> None:
        try:
            while not self._stopped.is_set():
                with self._sending:
                    if self._stopped.is_set() or not self._send_action():
                        return
                    self.sent += 1
                if self._stopped.is_set() or self._wait(self._stopped, self._interval):
                    return
        finally:
            self.finished.set()

    def stop(self) -> None:
        """Stop renewing; returns once no action is in flight any more."""
        self._stopped.set()
        if self._sending.acquire(timeout=_STOP_WAIT):
            self._sending.release()
