"""The actors (session, supervisor, cache), the Gateway facade and their helpers."""
