"""Persistence: SessionDB (SQLite through peewee), SessionStore, mirror and degraded mode."""
