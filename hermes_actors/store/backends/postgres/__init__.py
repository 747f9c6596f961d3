"""The PostgreSQL backend: the canonical store on a database server (``store.backend: postgres``).

:class:`~hermes_actors.store.backends.postgres.backend.PostgresBackend` holds the same tables
with the same meanings as the SQLite backend and passes the same conformance suite. Needs
the ``postgres`` extra (``psycopg[binary]``, ``psycopg-pool``).
"""
