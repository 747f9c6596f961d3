"""Database connection strings (DSNs) as they may be shown: with the password masked.

A DSN names a server and often carries its password, either in a URI
(``postgresql://user:secret@host/db``, ``?password=secret``) or as ``key=value`` pairs
(``host=h password=secret``). Configuration errors, log lines and store errors show a DSN
only through :func:`mask_dsn`, and pass any text that may echo one (a driver's error) through
:func:`scrub` first. Pure text functions, no driver: the configuration validates a DSN
before any database package is imported, and a DSN that does not parse is masked too.
"""

from __future__ import annotations

import re
import urllib.parse

__all__ = ["MASK", "is_dsn", "mask_dsn", "password_of", "scrub"]

#: What stands in for a password.
MASK = "***"

#: A URI's scheme and user part (any scheme: a mistyped one is masked too).
_URI = re.compile(r"^([a-z][a-z0-9+.-]*://)([^@/?#]*)@", re.IGNORECASE)
#: ``password=...`` (or ``sslpassword=...``, the client key's) as a URI query parameter (up
#: to ``&`` or ``#``).
_QUERY_PASSWORD = re.compile(r"([?&](?:ssl)?password=)[^&#]*", re.IGNORECASE)
#: ``password = value`` (or ``sslpassword``) as a key/value pair: quoted (``'...'`` with
#: ``\\'`` escapes) or bare.
_PAIR_PASSWORD = re.compile(r"(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)",
                            re.IGNORECASE)


def is_dsn(text: str) -> bool:
    """Whether ``text`` has the shape of a PostgreSQL DSN (a URI, or ``key=value`` pairs)."""
    text = text.strip()
    return bool(re.match(r"^postgres(?:ql)?://", text, re.IGNORECASE)) or bool(
        re.match(r"^\w+\s*=", text))


def mask_dsn(dsn: str) -> str:
    """``dsn`` with its password (in the user part, a ``password`` parameter or pair)
    replaced by :data:`MASK`; the rest (user, host, database) stays readable."""
    match = _URI.match(dsn)
    if match is not None:
        user, sep, password = match.group(2).partition(":")
        masked = match.group(1) + user + sep + (MASK if password else "") + "@"
        dsn = masked + dsn[match.end():]
    if match is not None or "://" in dsn.split("?", 1)[0]:  # a URI (with a user or not)
        return _QUERY_PASSWORD.sub(lambda m: m.group(1) + MASK, dsn)
    return _PAIR_PASSWORD.sub(lambda m: m.group(1) + MASK, dsn)


def password_of(dsn: str) -> str | None:
    """The password ``dsn`` carries (as written, URI-decoded), or ``None``."""
    match = _URI.match(dsn)
    if match is not None:
        _, sep, password = match.group(2).partition(":")
        if sep and password:
            return urllib.parse.unquote(password)
        query = _QUERY_PASSWORD.search(dsn)
        if query is not None:
            value = dsn[query.end(1):query.end()]
            return urllib.parse.unquote(value) or None
        return None
    pair = _PAIR_PASSWORD.search(dsn)
    if pair is None or not pair.group(2):
        return None
    value = pair.group(2)
    if value.startswith("'"):
        value = re.sub(r"\\(.)", r"\1", value[1:-1] if value.endswith("'") else value[1:])
    return value or None


def scrub(text: str, dsn: str) -> str:
    """``text`` (a driver's error, a log line) without the password of ``dsn``: every
    occurrence of it, raw or URI-encoded, and ``dsn`` itself, become masked."""
    text = text.replace(dsn, mask_dsn(dsn))
    password = password_of(dsn)
    if password:
        for form in {password, urllib.parse.quote(password, safe=""),
                     urllib.parse.quote(password)}:
            text = text.replace(form, MASK)
    return text
