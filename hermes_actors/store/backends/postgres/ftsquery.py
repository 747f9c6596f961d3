"""Search queries in FTS5's syntax, translated to a PostgreSQL ``tsquery`` expression.

``SessionDB.search`` takes FTS5 query syntax, and a query must mean the same on either
backend, so this module parses that syntax (the part of it a transcript search uses) and
builds the equivalent ``tsquery`` from PostgreSQL's own constructors, never by pasting
user text into a ``tsquery`` string:

* a word or a ``"quoted phrase"`` (``""`` is a quote inside one; ``a + b`` joins phrases)
  → ``phraseto_tsquery('simple', ...)``, so PostgreSQL tokenizes it as it tokenized the
  messages; a trailing ``*`` makes the last word a prefix (``'word':*``);
* ``AND``, ``OR``, ``NOT`` (binary: ``a NOT b``) with FTS5's precedence (``NOT`` binds
  tightest, then ``AND``, then ``OR``), and the implicit AND of phrases written side by
  side, which binds tighter still and joins phrases only (``(a OR b) c`` is an error in
  FTS5, so here too) → ``&&``, ``||``, ``&& !!``, fully parenthesized;
* a column filter may only name the one column, ``content:``.

Whatever FTS5 rejects is rejected here too (a lone operator, an unbalanced quote or
parenthesis, a character that is not part of a word outside quotes, another column), and
so are FTS5 features without an equivalent (``NEAR``, ``^``): :class:`QuerySyntaxError`.
"""

from __future__ import annotations

import re

__all__ = ["QuerySyntaxError", "to_tsquery_sql"]

_CONFIG = "'simple'::regconfig"
_KEYWORDS = ("AND", "OR", "NOT")
_PUNCTUATION = "():*+^"


class QuerySyntaxError(ValueError):
    """The query is not valid FTS5 syntax (or uses a feature with no equivalent)."""


def _is_word_char(ch: str) -> bool:
    # FTS5 barewords: ASCII letters, digits, '_', and every non-ASCII character
    return ch.isascii() and (ch.isalnum() or ch == "_") or not ch.isascii()


def _tokens(query: str) -> list[tuple[str, str]]:
    """``(kind, text)`` pairs: ``word``, ``string``, ``op`` (a keyword) or a punctuation."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(query)
    while i < n:
        ch = query[i]
        if ch.isspace():
            i += 1
        elif ch in _PUNCTUATION:
            out.append((ch, ch))
            i += 1
        elif ch == '"':
            text, i = [], i + 1
            while True:
                if i >= n:
                    raise QuerySyntaxError("unterminated string")
                if query[i] == '"':
                    if i + 1 < n and query[i + 1] == '"':
                        text.append('"')
                        i += 2
                        continue
                    i += 1
                    break
                text.append(query[i])
                i += 1
            out.append(("string", "".join(text)))
        elif _is_word_char(ch):
            j = i
            while j < n and _is_word_char(query[j]):
                j += 1
            word = query[i:j]
            out.append(("op" if word in _KEYWORDS else "word", word))
            i = j
        else:
            raise QuerySyntaxError(f"syntax error near {ch!r}")
    return out


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.params: list[str] = []

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise QuerySyntaxError("unexpected end of query")
        self.pos += 1
        return token

    def parse(self) -> str:
        sql = self.or_expr()
        rest = self.peek()
        if rest is not None:
            raise QuerySyntaxError(f"syntax error near {rest[1]!r}")
        return sql

    def or_expr(self) -> str:
        sql = self.and_expr()
        while self.peek() == ("op", "OR"):
            self.take()
            sql = f"({sql} || {self.and_expr()})"
        return sql

    def and_expr(self) -> str:
        sql = self.not_expr()
        while self.peek() == ("op", "AND"):
            self.take()
            sql = f"({sql} && {self.not_expr()})"
        return sql

    def not_expr(self) -> str:
        sql = self.primary()
        while self.peek() == ("op", "NOT"):
            self.take()
            sql = f"({sql} && !!{self.primary()})"
        return sql

    def column(self) -> bool:
        """Take a ``content:`` column filter if one comes next (another column is an
        error); whether there was one."""
        token = self.peek()
        if token is None or token[0] != "word" or self.pos + 1 >= len(self.tokens) or (
                self.tokens[self.pos + 1][0] != ":"):
            return False
        if token[1].lower() != "content":
            raise QuerySyntaxError(f"no such column: {token[1]}")
        self.pos += 2
        return True

    def primary(self) -> str:
        """A parenthesized query (optionally under ``content:``), or a run of phrases: FTS5's
        implicit AND joins phrases only, and binds tighter than any operator."""
        self.column()
        token = self.peek()
        if token is not None and token[0] == "(":
            self.take()
            sql = self.or_expr()
            if self.take()[0] != ")":
                raise QuerySyntaxError("unbalanced parenthesis")
            return sql
        sql = self.cnear()
        while True:
            token = self.peek()
            if token is None or token[0] not in ("word", "string"):
                return sql
            self.column()
            sql = f"({sql} && {self.cnear()})"

    def cnear(self) -> str:
        kind, text = self.take()
        if kind == "word" and text == "NEAR" and self.peek() == ("(", "("):
            raise QuerySyntaxError("NEAR queries are not supported")
        if kind not in ("word", "string"):
            raise QuerySyntaxError(f"syntax error near {text!r}")
        return self.phrase(text)

    def phrase(self, text: str) -> str:
        parts = [text]
        while self.peek() == ("+", "+"):
            self.take()
            kind, more = self.take()
            if kind not in ("word", "string"):
                raise QuerySyntaxError(f"syntax error near {more!r}")
            parts.append(more)
        joined = " ".join(parts)
        if self.peek() == ("*", "*"):
            self.take()
            words = re.findall(r"\w+", joined)
            if not words:
                raise QuerySyntaxError("a prefix query needs a word before '*'")
            lexemes = [f"'{word}'" for word in words]
            lexemes[-1] += ":*"
            self.params.append(" <-> ".join(lexemes))
            return f"to_tsquery({_CONFIG}, %s)"
        self.params.append(joined)
        return f"phraseto_tsquery({_CONFIG}, %s)"


def to_tsquery_sql(query: str) -> tuple[str, list[str]]:
    """The ``tsquery`` SQL expression of the FTS5 ``query`` and its parameters; raises
    :class:`QuerySyntaxError` for a query FTS5 would reject (or one without equivalent)."""
    tokens = _tokens(query)
    if not tokens:
        raise QuerySyntaxError("empty query")
    if any(kind == "^" for kind, _ in tokens):
        raise QuerySyntaxError("'^' (first-token queries) is not supported")
    parser = _Parser(tokens)
    return parser.parse(), parser.params
