"""Sessions sharded across gateway processes that share one PostgreSQL store (issue 20).

Every session key maps to one of a fixed number of shards (:mod:`.shards`); each shard has a
lease in the database: an owner node, an epoch that grows at every acquisition (the fencing
token the owner's writes carry) and an expiry. Nodes heartbeat, renew their leases, and
acquire or give away shards to converge on a fair share (:mod:`.balance`, pure decisions);
:mod:`.membership` runs those rounds and tells its host which shards it gained and lost.
The records and the protocol of the lease table are in :mod:`.records`; its SQL is
:mod:`hermes_actors.store.backends.postgres.leases`, an in-memory twin for tests
:mod:`hermes_actors.testing.leases`.

The package sits between ``config`` and ``store`` in the layers: the store may hash session
keys to shards (the owner's ingress channel, fenced writes), the runtime wires a
:class:`~.membership.LeaseManager` to its actors. PostgreSQL's transactions decide who owns
what; there is no consensus of our own. See ``docs/cluster.md``.
"""
