"""The Agent protocol, turn records and the built-in agents."""
