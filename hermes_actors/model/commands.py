"""The gateway's chat commands: one registry for the parser, recovery and ``/help`` (§2, §8).

Each command is one :class:`CommandSpec` row of :data:`REGISTRY`: its canonical name, the
words that spell it, whether it becomes an agent turn, and the line ``/help`` shows. The
parser recognises only these words, so a slash word without a row goes to the agent (agents
have commands of their own), and adding a command is one row here plus its handler in the
session core. Recovery asks :func:`becomes_turn` whether a waiting message will run the
agent (a recovery note can ride only on such a message).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "COMMANDS",
    "REGISTRY",
    "Command",
    "CommandSpec",
    "help_text",
    "parse_command",
    "spec",
]


class CommandSpec(NamedTuple):
    """One chat command."""

    #: The canonical name (``/reset`` has its own name: its answer names it).
    name: str
    #: The words that spell it, the first one shown by ``/help`` (case-insensitive).
    words: tuple[str, ...]
    #: What follows the word in ``/help`` (``<prompt>``), empty for none.
    arguments: str
    #: Whether the command (with its arguments) becomes an agent turn.
    turn: bool
    #: ``/help``'s description of it.
    summary: str


#: Every command the gateway itself answers, in ``/help`` order.
REGISTRY: tuple[CommandSpec, ...] = (
    CommandSpec("new", ("/new",), "", False,
                "start a new conversation (the running turn is cut; the old one stays in "
                "the history)"),
    CommandSpec("reset", ("/reset",), "", False, "the same as /new"),
    CommandSpec("stop", ("/stop",), "", False,
                "stop the running turn and drop the message waiting behind it"),
    CommandSpec("queue", ("/queue", "/q"), "<prompt>", True,
                "run <prompt> as its own turn after the ones already waiting"),
    CommandSpec("status", ("/status",), "", False,
                "show the session, its queue and the running turn"),
    CommandSpec("help", ("/help",), "", False, "list these commands"),
)

#: Command words recognised from a message's text, mapped to their canonical name.
COMMANDS: dict[str, str] = {word: s.name for s in REGISTRY for word in s.words}

_BY_NAME = {s.name: s for s in REGISTRY}


class Command(NamedTuple):
    """A recognised command: its canonical name and the text after the command word."""

    name: str
    args: str

    @property
    def becomes_turn(self) -> bool:
        """Whether this command runs the agent (``/queue`` with a prompt)."""
        return _BY_NAME[self.name].turn and bool(self.args)


def spec(name: str) -> CommandSpec:
    """The registry row of the command ``name`` (``KeyError`` for an unknown one)."""
    return _BY_NAME[name]


def parse_command(text: str) -> Command | None:
    """Recognise a command word of :data:`REGISTRY` at the start of ``text``.

    Command words are case-insensitive and end at any whitespace (a tab, a newline, a
    no-break space); a Telegram-style ``/stop@botname`` is accepted.
    """
    stripped = text.strip()
    if not stripped.startswith("/"):
        return None
    word, *rest = stripped.split(None, 1)
    name = COMMANDS.get(word.split("@", 1)[0].lower())
    if name is None:
        return None
    return Command(name, rest[0].strip() if rest else "")


def help_text() -> str:
    """``/help``'s answer: one line per command."""
    lines = []
    for row in REGISTRY:
        usage = f"{row.words[0]} {row.arguments}".rstrip()
        lines.append(f"{usage} — {row.summary}")
    return "\n".join(lines)
