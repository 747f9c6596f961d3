"""``Batch``: the statements of one write transaction, sent to the server as few times as
possible.

An operation's handler (:mod:`~.operations`) does not execute its statements: it adds them
to the batch, and gets back a :class:`Later` for a result it needs (a row count, a new row's
id), read once the batch has been sent. The writer sends the whole transaction's statements
(``BEGIN`` first) as one multi-statement query, and ``COMMIT`` on its own afterwards (see
``writer``). A handler whose next statement depends on a result (an accept whose ingress
key is taken, the outcome of a failed attempt) asks for it :meth:`now`: what is pending is
sent, with that statement last, in one round trip.

Why one query text rather than prepared statements, pipelined: psycopg's Python costs
~25-35 µs a statement on this path (binding, a socket poll and a send per statement, even
in pipeline mode), on the one hub that also runs every turn; a group of a few hundred
statements was a third of the gateway's CPU. One send and one wait carry the whole group
instead; the server parses and plans each statement rather than reusing a prepared plan,
on its own core (measured: preparing the hot statements once per connection and sending
``EXECUTE name(...)`` instead made no difference to the server's CPU per turn, so the
simpler form stayed).

Each value is bound into the batch's text on the client as a literal (:func:`literal`):
the handlers' values are of a few plain types (``str``, ``int``, ``float``, ``bool``,
``None``, lists of those), whose literal forms PostgreSQL defines exactly; a text is an
escape string (``E'...'``) with its backslashes and single quotes doubled, which means the
same whatever ``standard_conforming_strings`` says (the writer's connection sets it on as
well), and a text holding NUL is refused, as psycopg refuses it. Any other value, or a statement with other placeholders, is bound by psycopg's own
``ClientCursor.mogrify``. (psycopg's quoting costs ~2 µs a value in Python, ~25 µs a
statement here; :func:`literal` a tenth of it.) ``tests/store/postgres/test_pipeline.py``
has the server read both forms of every kind of value and compares them.

The server runs the statements of one query in order and stops at the first that fails;
psycopg raises that statement's error, so a constraint still fails as a constraint and a
lost connection as a lost connection.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import psycopg

__all__ = ["NUL_STAND_IN", "Batch", "Later", "Result", "bind", "literal", "without_nul"]

#: Statement texts split at their ``%s`` (``None``: bound by psycopg), by text.
_SPLIT: dict[str, list[str] | None] = {}
#: At most this many texts are remembered (the handlers' are constants; a few are built).
_SPLIT_MAX = 512


class _Unbindable(Exception):
    """A value :func:`literal` has no form for (psycopg binds the statement)."""


#: What stands in for a NUL character, which PostgreSQL text cannot hold (U+FFFD).
NUL_STAND_IN = "\ufffd"


def without_nul(text: str) -> str:
    """``text`` with each NUL replaced by :data:`NUL_STAND_IN` (SQLite keeps a NUL; here a
    message with one would be refused, and the turn that answers it fail)."""
    return text.replace("\x00", NUL_STAND_IN) if "\x00" in text else text


def literal(value: Any) -> str:
    """``value`` as a PostgreSQL literal; raises ``_Unbindable`` for another type."""
    kind = type(value)
    if kind is str:
        value = without_nul(value)
        # An escape string: its meaning does not depend on standard_conforming_strings (a
        # pooler may reset what the writer SET), since backslashes are escaped as well.
        return "E'" + value.replace("\\", "\\\\").replace("'", "''") + "'"
    if value is None:
        return "NULL"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(value) if value >= 0 else f"({value})"
    if kind is float:
        if not math.isfinite(value):
            return ("'NaN'" if value != value else
                    "'Infinity'" if value > 0 else "'-Infinity'") + "::float8"
        text = repr(value)
        return text if value >= 0 else f"({text})"
    if kind is list or kind is tuple:
        if not value:
            return "'{}'"
        return "ARRAY[" + ",".join(literal(item) for item in value) + "]"
    raise _Unbindable(kind.__name__)


def _split(sql: str) -> list[str] | None:
    if sql in _SPLIT:
        return _SPLIT[sql]
    pieces = sql.split("%s")
    parts = None if any("%" in piece for piece in pieces) else pieces
    if len(_SPLIT) < _SPLIT_MAX:
        _SPLIT[sql] = parts
    return parts


def bind(sql: str, params: Sequence[Any]) -> str | None:
    """``sql`` with each ``%s`` replaced by its parameter's :func:`literal`; ``None`` when
    that cannot be done (other placeholders, a value of another type)."""
    parts = _split(sql)
    if parts is None or len(parts) != len(params) + 1:
        return None
    out = [parts[0]]
    try:
        for value, piece in zip(params, parts[1:], strict=True):
            out.append(literal(value))
            out.append(piece)
    except _Unbindable:
        return None
    return "".join(out)


class Result(NamedTuple):
    """What the server answered to one statement."""

    #: Rows inserted, updated or deleted (or returned).
    rowcount: int
    #: Its rows, for a statement that returns some (else empty).
    rows: list[tuple[Any, ...]]


class Later:
    """An operation's result, read from its statement's :class:`Result` once sent."""

    __slots__ = ("batch", "index", "read")

    def __init__(self, batch: Batch, index: int, read: Callable[[Result], Any]) -> None:
        self.batch = batch
        self.index = index
        self.read = read

    def value(self) -> Any:
        """The result (the batch must have been sent)."""
        return self.read(self.batch.results[self.index])


class Batch:
    """The statements of one transaction on ``conn`` (an autocommit connection with no
    transaction open), starting with ``BEGIN``."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._cur = psycopg.ClientCursor(conn)
        self._pending: list[str] = ["BEGIN"]
        self._begun = False
        #: The results of the statements sent so far, in order (``BEGIN``'s not counted).
        self.results: list[Result] = []
        self._once: set[Any] = set()

    def first(self, key: Any) -> bool:
        """Whether ``key`` is new to this transaction (then remembered): a statement whose
        effect lasts until the transaction ends (a row lock, a ``NOTIFY``) is sent once."""
        if key in self._once:
            return False
        self._once.add(key)
        return True

    def add(self, sql: str, params: Any = None) -> int:
        """Add a statement; returns its index among the batch's results."""
        if params is None:
            text = sql
        else:
            text = bind(sql, params) or self._cur.mogrify(sql, params)
        self._pending.append(text)
        return len(self.results) + len(self._pending) - (1 if not self._begun else 0) - 1

    def run(self, sql: str, params: Any, read: Callable[[Result], Any]) -> Later:
        """Add a statement whose result ``read`` turns into the operation's result."""
        return Later(self, self.add(sql, params), read)

    def now(self, sql: str, params: Any) -> Result:
        """Add a statement and send the batch so far: its result."""
        index = self.add(sql, params)
        self.send()
        return self.results[index]

    def send(self) -> None:
        """Send what is pending, as one query; collect every statement's result."""
        if not self._pending:
            return
        statements, self._pending = self._pending, []
        cur = self._cur
        cur.execute(";\n".join(statements))
        skip = 0 if self._begun else 1  # BEGIN's own result
        self._begun = True
        for n in range(len(statements)):
            if n >= skip:
                rows = cur.fetchall() if cur.description is not None else []
                self.results.append(Result(cur.rowcount, rows))
            if n + 1 < len(statements) and not cur.nextset():
                raise psycopg.InterfaceError(
                    f"the server answered {n + 1} of {len(statements)} statements")
