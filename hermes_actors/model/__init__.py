"""Records and pure functions of the session domain: sources, events, entries, keys, context."""
