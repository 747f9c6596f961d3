"""Platform adapters: the protocol, the in-memory adapter and the HTTP adapter."""
