"""``EchoAgent``: answers ``echo: <message>``; the default agent and the benchmark agent."""

from __future__ import annotations

from hermes_actors.agents.base import TurnRequest, TurnResult

__all__ = ["EchoAgent"]


class EchoAgent:
    """Replies ``echo: <message>`` at once. Stateless, so every method but one is a no-op."""

    def run_turn(self, request: TurnRequest) -> TurnResult:
        """Echo the message back."""
        return TurnResult(reply=f"echo: {request.message}", status="completed")

    def interrupt(self, reason: str | None = None) -> None:
        """Nothing runs long enough to interrupt."""

    def release_clients(self) -> None:
        """No clients to release."""

    def close(self) -> None:
        """Nothing to clean up."""
