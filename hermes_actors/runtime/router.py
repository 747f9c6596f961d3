"""``SessionRouter``: session key → live ``SessionActor``, created on demand, retired when idle.

Live actors are bounded by retirement: an idle actor asks to be retired while handling an
``IdleCheck``; the router removes it only if it is still the registered actor and its inbox is
empty, under the same lock every ``tell`` takes. Since all inbound messages pass through that
lock, nothing can slip into a retiring actor's inbox, and the next message simply starts a new
actor (whose state lives in the store).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pykka

__all__ = ["SessionRouter"]

log = logging.getLogger("hermes_actors.router")


class SessionRouter:
    """Thread-safe map of live session actors."""

    def __init__(self, start_actor: Callable[[str], pykka.ActorRef]) -> None:
        self._start_actor = start_actor
        self._lock = threading.Lock()
        self._actors: dict[str, pykka.ActorRef] = {}
        self.started = 0
        self.retired = 0
        self._closed = False

    def tell(self, session_key: str, message: Any) -> None:
        """Deliver ``message`` to the session's actor, starting one if none is live."""
        self._deliver(session_key, lambda ref: ref.tell(message))

    def request(self, session_key: str, message: Any) -> pykka.Future:
        """Like :meth:`tell`, but the actor's answer comes back in the returned future."""
        return self._deliver(session_key, lambda ref: _ask_live(ref, message))

    def _deliver(self, session_key: str, send: Callable[[pykka.ActorRef], Any]) -> Any:
        with self._lock:
            if self._closed:
                raise RuntimeError("the gateway's session actors are stopped")
            for _ in range(2):
                ref = self._actors.get(session_key)
                if ref is None:
                    ref = self._start_actor(session_key)
                    self._actors[session_key] = ref
                    self.started += 1
                try:
                    return send(ref)
                except pykka.ActorDeadError:
                    # It died (a bug): its queue is gone, but the inbox table still has the
                    # events; start a fresh actor for this and later messages.
                    log.error("session actor was dead, restarting key=%s", session_key)
                    self._actors.pop(session_key, None)
            raise RuntimeError(f"could not start a session actor for {session_key!r}")

    def ask(self, session_key: str, message: Any, default: Any = None,
            timeout: float | None = 10) -> Any:
        """Ask the live actor of ``session_key``; ``default`` when none is live."""
        with self._lock:
            ref = self._actors.get(session_key)
        if ref is None:
            return default
        try:
            return ref.ask(message, timeout=timeout)
        except pykka.ActorDeadError:
            return default

    def try_retire(self, session_key: str, ref: pykka.ActorRef,
                   inbox_empty: Callable[[], bool]) -> bool:
        """Unregister ``ref`` if it is current and has nothing waiting; the actor then stops."""
        with self._lock:
            if self._actors.get(session_key) is not ref or not inbox_empty():
                return False
            del self._actors[session_key]
            self.retired += 1
            return True

    def live(self) -> list[tuple[str, pykka.ActorRef]]:
        """A snapshot of the live actors."""
        with self._lock:
            return list(self._actors.items())

    def remove_where(self, belongs: Callable[[str], bool]) -> list[tuple[str, pykka.ActorRef]]:
        """Unregister the actors of the keys ``belongs`` picks (a cluster node lost their
        shard) and return them, for the caller to stop; a later message starts a new one."""
        with self._lock:
            gone = [(key, ref) for key, ref in self._actors.items() if belongs(key)]
            for key, _ in gone:
                del self._actors[key]
        return gone

    def __len__(self) -> int:
        with self._lock:
            return len(self._actors)

    def broadcast(self, message: Any) -> list[pykka.Future]:
        """Ask every live actor; returns the futures (dead actors are skipped)."""
        futures = []
        for _key, ref in self.live():
            try:
                futures.append(ref.ask(message, block=False))
            except pykka.ActorDeadError:
                continue
        return futures

    def stop_all(self, timeout: float = 10) -> None:
        """Stop every live actor; no new actor starts after this."""
        with self._lock:
            self._closed = True
            refs = list(self._actors.values())
            self._actors.clear()
        for ref in refs:
            try:
                ref.stop(block=True, timeout=timeout)
            except (pykka.ActorDeadError, pykka.Timeout):
                pass


def _ask_live(ref: pykka.ActorRef, message: Any) -> pykka.Future:
    """``ref.ask(message, block=False)``, raising for a dead actor as ``tell`` does (pykka
    puts that error into the future instead, where a restart could not react to it)."""
    if not ref.is_alive():
        raise pykka.ActorDeadError(f"{ref} not found")
    return ref.ask(message, block=False)
