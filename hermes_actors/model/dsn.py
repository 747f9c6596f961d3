"""Database connection strings (DSNs) as they may be shown: the server, never a secret.

A DSN names a server and often carries its password, either in a URI
(``postgresql://user:secret@host/db``, ``?password=secret``) or as ``key=value`` pairs
(``host=h password=secret``), and sometimes the client key's (``sslpassword``). Every text
that shows a DSN (configuration errors, ``run``'s start errors, ``db`` and ``cluster``
commands, log lines, store errors and the HTTP bodies made of them) shows it through
:func:`mask_dsn`, which prints **only** ``host``, ``port``, ``dbname`` and ``user``; any text
that may echo a DSN (a driver's error) passes through :func:`scrub` first.

The DSN is read by libpq's own parser (``psycopg.conninfo.conninfo_to_dict``), so what is
shown is exactly what libpq will connect to, whatever the password holds (``?``, ``#``,
``@``, percent escapes). psycopg is an optional extra (``postgres``): without it a
conservative parser reads only the plainest spellings, and anything else is shown as
:data:`HIDDEN`. A DSN that does not parse is never echoed, not even in part.
"""

from __future__ import annotations

import re
import urllib.parse

__all__ = ["HIDDEN", "MASK", "dsn_secrets", "is_dsn", "mask_dsn", "password_of", "remember",
           "scrub"]

#: What stands in for a password in a scrubbed text.
MASK = "***"
#: What stands in for a DSN that cannot be shown safely (it does not parse).
HIDDEN = "<dsn hidden>"
#: What a DSN naming no host, port, database or user (libpq's defaults) is shown as.
DEFAULTS = "<dsn: libpq defaults>"
#: The parameters shown, in this order.
SHOWN = ("host", "port", "dbname", "user")
#: The parameters that hold a secret.
SECRETS = ("password", "sslpassword")

_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*)://", re.IGNORECASE)
#: The plainest URI the fallback parser reads (no psycopg): an optional user part (whose
#: password is skipped, up to the first ``@``), one host, a port, a database; any query is
#: ignored. A host or database holding ``@`` does not match: the password may hide there.
_PLAIN_URI = re.compile(
    r"^postgres(?:ql)?://"
    r"(?:(?P<user>[A-Za-z0-9._~%!$&'()*+,;=-]*)(?::[^@/]*)?@)?"
    r"(?P<host>[A-Za-z0-9._~%-]*|\[[0-9A-Fa-f:.]+\])"
    r"(?::(?P<port>[0-9]+))?"
    r"(?:/(?P<dbname>[A-Za-z0-9._~%+-]*))?"
    r"(?:\?[^@]*)?$",
    re.IGNORECASE)
#: A ``key=value`` pair with a bare value (the fallback parser reads no quotes).
_PAIR = re.compile(r"^(\w+)=(\S*)$")
#: A password as a URI query parameter (up to ``&`` or ``#``) or as a bare/quoted pair.
_QUERY_SECRET = re.compile(r"[?&](?:ssl)?password=([^&#\s]*)", re.IGNORECASE)
_PAIR_SECRET = re.compile(r"\b(?:ssl)?password\s*=\s*('(?:[^'\\]|\\.)*'?|\S*)", re.IGNORECASE)
#: In any text: a password pair/parameter, or a URI's user part with a password.
_TEXT_SECRET = re.compile(r"(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s&'\"]*)",
                          re.IGNORECASE)
_TEXT_USERINFO = re.compile(r"\b([a-z][a-z0-9+.-]*://[^:@/\s]*:)[^\s]*@", re.IGNORECASE)


def is_dsn(text: str) -> bool:
    """Whether ``text`` has the shape of a PostgreSQL DSN (a URI, or ``key=value`` pairs)."""
    text = text.strip()
    return bool(re.match(r"^postgres(?:ql)?://", text, re.IGNORECASE)) or bool(
        re.match(r"^\w+\s*=", text))


def _libpq_parse(dsn: str) -> dict[str, str] | None:
    """libpq's reading of ``dsn``; ``None`` when it does not parse; raises ImportError
    without psycopg."""
    from psycopg import conninfo

    try:
        return {k: str(v) for k, v in conninfo.conninfo_to_dict(dsn).items()}
    except Exception:  # (psycopg.ProgrammingError: never echoed, it may quote the DSN)
        return None


def _fallback_parse(dsn: str) -> dict[str, str] | None:
    """The shown parameters of the plainest DSNs, without psycopg; ``None`` otherwise."""
    text = dsn.strip()
    if _SCHEME.match(text):
        match = _PLAIN_URI.match(text)
        if match is None:
            return None
        return {k: urllib.parse.unquote(v) for k, v in match.groupdict().items() if v}
    if "'" in text or "\\" in text:
        return None
    params: dict[str, str] = {}
    for token in re.sub(r"\s*=\s*", "=", text).split():
        pair = _PAIR.match(token)
        if pair is None:
            return None
        params[pair.group(1).lower()] = pair.group(2)
    return params


def _parse(dsn: str) -> dict[str, str] | None:
    try:
        return _libpq_parse(dsn)
    except ImportError:
        return _fallback_parse(dsn)


def _quote(value: str) -> str:
    if value and not re.search(r"[\s'\\]", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def mask_dsn(dsn: str) -> str:
    """``dsn`` as it may be shown: ``host=... port=... dbname=... user=...`` (those it
    names), nothing else; :data:`HIDDEN` when it does not parse or looks unsafe."""
    params = _parse(dsn) if isinstance(dsn, str) else None
    if params is None:
        return HIDDEN
    shown = [(k, params[k]) for k in SHOWN if params.get(k)]
    port = params.get("port", "")
    # a password libpq read as something else (``u:a/b@h``: host ``u``, port ``a``)
    if any("@" in v for _, v in shown) or not re.fullmatch(r"[0-9,]*", port):
        return HIDDEN
    if not shown:
        return DEFAULTS
    return " ".join(f"{k}={_quote(v)}" for k, v in shown)


def dsn_secrets(dsn: str) -> list[str]:
    """Every secret ``dsn`` may carry (longest first): the ``password`` and ``sslpassword``
    libpq reads, and, read without libpq, every spelling a password may have been meant
    in (a URI's user part up to its first or last ``@``, query parameters, pairs)."""
    found: set[str] = set()
    params = _parse(dsn)
    if params is not None:
        found.update(params[k] for k in SECRETS if params.get(k))
    scheme = _SCHEME.match(dsn)
    if scheme is not None:
        rest = dsn[scheme.end():]
        user, sep, _ = rest.partition("@")[0].partition(":")
        if sep:
            for end in (rest.find("@"), rest.rfind("@")):
                if end > len(user) + 1:
                    found.add(rest[len(user) + 1:end])
        found.update(m.group(1) for m in _QUERY_SECRET.finditer(dsn))
    for match in _PAIR_SECRET.finditer(dsn):
        value = match.group(1)
        found.add(value)
        if value.startswith("'"):
            found.add(re.sub(r"\\(.)", r"\1", value[1:-1] if value.endswith("'") else value[1:]))
    spelled: set[str] = set()
    for secret in found:
        for form in (secret, urllib.parse.unquote(secret), urllib.parse.quote(secret, safe=""),
                     urllib.parse.quote(secret)):
            if form:
                spelled.add(form)
    return sorted(spelled, key=len, reverse=True)


def password_of(dsn: str) -> str | None:
    """The password ``dsn`` carries (as libpq reads it, or without psycopg as written,
    URI-decoded), or ``None``."""
    params = _parse(dsn)
    if params is not None and params.get("password"):
        return params["password"]
    if params is not None:
        return None
    secrets = dsn_secrets(dsn)
    return urllib.parse.unquote(secrets[-1]) if secrets else None


#: The DSNs this process was given (see :func:`remember`), with their secrets.
_REMEMBERED: dict[str, tuple[str, ...]] = {}
#: The shortest remembered secret scrubbed from texts that name no DSN (a shorter one would
#: garble every text it occurs in; the text that names its DSN is scrubbed of it anyway).
_SHORTEST = 4


def remember(dsn: str) -> None:
    """Note that this process uses ``dsn``: from now on :func:`scrub` removes its secrets
    from any text, even one that does not name it (a log line, an HTTP body, an error)."""
    if dsn and dsn not in _REMEMBERED:
        _REMEMBERED[dsn] = tuple(s for s in dsn_secrets(dsn) if len(s) >= _SHORTEST)


def scrub(text: str, dsn: str | None = None) -> str:
    """``text`` (a driver's error, a log line, an error's message) without a secret:
    ``dsn`` and every remembered DSN become :func:`mask_dsn`, every secret they carry (in
    any spelling) becomes :data:`MASK`, and any ``password=...`` or ``scheme://user:...@``
    left in the text is masked too."""
    remembered = dict(_REMEMBERED)
    dsns = sorted({one for one in (dsn, *remembered) if one}, key=len, reverse=True)
    for one in dsns:
        if one in text:
            text = text.replace(one, mask_dsn(one))
    secrets = set(dsn_secrets(dsn)) if dsn else set()
    for found in remembered.values():
        secrets.update(found)
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, MASK)
    text = _TEXT_SECRET.sub(lambda m: m.group(1) + MASK, text)
    return _TEXT_USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)
