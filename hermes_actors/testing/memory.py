"""``FakeMemoryProbe``: memory figures a test sets by hand."""

from __future__ import annotations

__all__ = ["FakeMemoryProbe"]

_MB = 1 << 20


class FakeMemoryProbe:
    """A memory probe whose ``anon_mb`` and ``limit_mb`` attributes are set by the test."""

    def __init__(self, anon_mb: float = 0.0, limit_mb: float | None = None) -> None:
        #: The anonymous memory in use, MB (2^20 bytes).
        self.anon_mb = anon_mb
        #: The memory limit, MB, or ``None`` when uncapped.
        self.limit_mb = limit_mb

    def anon_bytes(self) -> int:
        """``anon_mb`` in bytes."""
        return int(self.anon_mb * _MB)

    def limit_bytes(self) -> int | None:
        """``limit_mb`` in bytes, or ``None``."""
        return None if self.limit_mb is None else int(self.limit_mb * _MB)
