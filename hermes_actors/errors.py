"""The exception hierarchy.

Every error a user can cause derives from :class:`HermesActorsError` and carries a message a
person can act on; the CLI turns these into one line and an exit code instead of a traceback.
"""

from __future__ import annotations

__all__ = [
    "CommandFailed",
    "ConfigError",
    "ConfigWarning",
    "FencedError",
    "HermesActorsError",
    "HomeInUseError",
    "StoreBusyError",
    "StoreError",
    "StoreRejectedError",
    "StoreUnavailableError",
    "StoreUnreachableError",
    "UnknownPlatformError",
    "UsageError",
]


class HermesActorsError(Exception):
    """Base of every error raised on purpose by hermes_actors."""


class ConfigError(HermesActorsError, ValueError):
    """A configuration value is invalid; the message names the key and what is accepted."""


class ConfigWarning(UserWarning):
    """A configuration key was ignored (legacy) or not recognised (unknown)."""


class UnknownPlatformError(HermesActorsError, ValueError):
    """A platform name is neither built in nor registered with ``Platform.register``."""

    def __init__(self, name: object) -> None:
        #: The rejected platform name.
        self.platform = name
        super().__init__(
            f"unknown platform {name!r}: use one of the built-in platforms "
            "or register it with Platform.register()"
        )


class HomeInUseError(HermesActorsError):
    """Another gateway holds the home (its ``gateway.lock``); the message names its pid."""


class StoreError(HermesActorsError):
    """The session store could not do what was asked (the message says why)."""


class FencedError(StoreError):
    """A cluster node's write for a session of ``shard`` was refused because the node no
    longer holds the shard under ``epoch`` (its lease expired or another node took it): the
    write's transaction did nothing, and the node must stop serving the shard."""

    def __init__(self, message: str, shard: int, epoch: int | None) -> None:
        super().__init__(message)
        #: The shard whose tenure was refused.
        self.shard = shard
        #: The tenure the write carried (``None``: the node held the shard under none).
        self.epoch = epoch

    def __reduce__(self) -> tuple:
        # pickled whole (a writer in another process reports it to its parent)
        return (type(self), (str(self), self.shard, self.epoch))


class StoreRejectedError(StoreError):
    """The store refused a write for the values it carries (a lone surrogate, an integer
    over 64 bits, a constraint): the same write is refused again, so retrying cannot help."""


class StoreUnavailableError(StoreError):
    """The store's database cannot be opened or written (the message says why): an embedded
    host gets it at start; a running gateway falls back to degraded mode instead."""


class StoreBusyError(StoreError):
    """The store's writes are backed up (its write queue is full): nothing of the call was
    written; the caller may try again shortly. Not an outage (the database answers, only
    slower than writes come in): the HTTP API answers 503 with ``Retry-After``."""


class StoreUnreachableError(StoreUnavailableError):
    """The store's database server cannot be reached when the store opens (the message says
    why, never with a password). Unlike a broken home database there is no degraded mode to
    start in: the database is shared beyond this home, so a local stand-in would split the
    state. An embedded host gets it from ``Gateway.start()``; the CLI exits with code 2."""


class UsageError(HermesActorsError):
    """The command line asks for something impossible (exit code 2)."""


class CommandFailed(HermesActorsError):
    """A command ran but failed (exit code 1); the message is printed as is."""
