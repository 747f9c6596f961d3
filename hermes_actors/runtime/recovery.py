"""``RecoveryReport``: what ``Gateway.start()`` found and did (§1.1, §7)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["RecoveryReport"]


@dataclass
class RecoveryReport:
    """The outcome of startup recovery."""

    #: Whether the previous run ended with a graceful stop (``.clean_shutdown`` found).
    clean_shutdown: bool = False
    #: Persisted replies that never reached the ledger, recorded for one recovered delivery.
    recovered_replies: int = 0
    #: Ledger rows sent during start.
    redelivered: int = 0
    #: Session keys auto-continued (or whose recovery note rides on a waiting message).
    resumed: list[str] = field(default_factory=list)
    #: Session keys suspended by the stuck-loop guard.
    suspended: list[str] = field(default_factory=list)
    #: Durable inbox events re-submitted.
    replayed_inbox: int = 0
    #: The home held no store yet: a first start, with nothing to recover (not a crash,
    #: although no ``.clean_shutdown`` was found).
    new_home: bool = False

    def summary(self) -> str:
        """One readable line for logs and the CLI."""
        if self.new_home:
            return "recovery: new home, nothing to recover"
        return (
            f"recovery: clean_shutdown={self.clean_shutdown} "
            f"recovered_replies={self.recovered_replies} redelivered={self.redelivered} "
            f"resumed={len(self.resumed)} suspended={len(self.suspended)} "
            f"replayed_inbox={self.replayed_inbox}"
        )
