"""Which shard a session belongs to: a stable hash of its session key.

Every node of a cluster, whatever its Python version, platform or ``PYTHONHASHSEED``, must
put a session key in the same shard, and so must the database (a statement that fences a
write by the shard's lease, a status query counting sessions per shard). Python's ``hash()``
is salted per process, so it cannot serve. The hash is the first four bytes of the SHA-256
digest of the key's UTF-8 bytes, read as a big-endian unsigned 32-bit number, modulo the
shard count:

    shard = int.from_bytes(sha256(key.encode("utf-8")).digest()[:4], "big") % shards

SHA-256 because it is in every Python's ``hashlib`` (FIPS builds included, unlike MD5) and in
PostgreSQL (``sha256(bytea)``, version 11 and later), where the migration that creates the
lease table defines the same function as ``cluster_shard(key text, shards integer)``;
a test holds the two to the same answers. 32 bits are plenty: with at most
:data:`~hermes_actors.config.MAX_SHARDS` shards the modulo's bias is below one in a million.
A plain modulo (no consistent hashing) is enough because the shard count never changes for
a cluster: it is fixed when the first node creates it.

This mapping is part of the database's meaning. Changing it would move sessions between
shards under running nodes; it must never change (the known answers in the tests guard it).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from hermes_actors.config import MAX_SHARDS

__all__ = ["MAX_SHARDS", "SQL_FUNCTION", "ShardSet", "check_shard_count", "shard_of"]

#: The database function computing :func:`shard_of` (created by the lease migration).
SQL_FUNCTION = "cluster_shard"


def check_shard_count(shards: int) -> int:
    """``shards`` when it is a valid shard count (1 to :data:`MAX_SHARDS`), else
    ``ValueError``."""
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"a shard count is an integer from 1 to {MAX_SHARDS}, not {shards!r}")
    return shards


#: Keys whose shard was computed, and it (``(key, shards) -> shard``): a node asks for the
#: shard of a session several times a turn (its dispatch, the fence, the notice). Emptied
#: when it holds :data:`_CACHED` keys.
_SHARDS: dict[tuple[str, int], int] = {}
_CACHED = 65_536


def shard_of(session_key: str, shards: int) -> int:
    """The shard (``0 <= shard < shards``) of ``session_key`` (see the module docstring)."""
    check_shard_count(shards)
    found = _SHARDS.get((session_key, shards))
    if found is not None:
        return found
    digest = hashlib.sha256(session_key.encode("utf-8")).digest()
    shard = int.from_bytes(digest[:4], "big") % shards
    if len(_SHARDS) >= _CACHED:
        _SHARDS.clear()
    _SHARDS[(session_key, shards)] = shard
    return shard


@dataclass(frozen=True)
class ShardSet:
    """Some shards of a cluster of ``total`` shards; called with a session key, whether the key's
    shard is among them (a key filter that a database can also apply, with
    ``cluster_shard(key, total) = ANY(wanted)``)."""

    #: The cluster's shard count.
    total: int
    #: The shards wanted.
    wanted: frozenset[int]

    def __call__(self, session_key: str) -> bool:
        return shard_of(session_key, self.total) in self.wanted
