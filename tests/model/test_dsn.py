"""DSNs as they may be shown: only host, port, dbname and user, read by libpq's own parser
(a conservative parser without psycopg); every secret scrubbed from any text."""

from __future__ import annotations

import builtins

import pytest

from hermes_actors.model import dsn as dsn_module
from hermes_actors.model.dsn import (
    HIDDEN,
    dsn_secrets,
    is_dsn,
    mask_dsn,
    password_of,
    remember,
    scrub,
)

SECRET = "Xy?9#secret"

#: (DSN, what is shown, the secrets it holds): every spelling of a password.
CASES = [
    # the DSN: ``?`` and ``#`` in the user part's password
    (f"postgresql://hermes:{SECRET}@h/db", "host=h dbname=db user=hermes", [SECRET]),
    # an unescaped ``@``: libpq reads ``ss@h`` as the host, so nothing is shown
    ("postgresql://hermes:p@ss@h:5433/db", HIDDEN, ["p@ss"]),
    ("postgresql://hermes:p%40s%23s%3F@h/db", "host=h dbname=db user=hermes", ["p@s#s?"]),
    ("postgres://u@h/db?sslmode=require&password=pw1x",
     "host=h dbname=db user=u", ["pw1x"]),
    ("postgresql://u@h/db?sslpassword=keypw&password=pw1x", "host=h dbname=db user=u",
     ["keypw", "pw1x"]),
    ("host=h password=pw1x dbname=d", "host=h dbname=d", ["pw1x"]),
    ("host=h password = 'p w\\'x' dbname=d user=u", "host=h dbname=d user=u", ["p w'x"]),
    ("host=h sslpassword=keypw password=pw1x port=6432",
     "host=h port=6432", ["keypw", "pw1x"]),
    ("postgresql:///db?host=/tmp/s&password=pw1x", "host=/tmp/s dbname=db", ["pw1x"]),
    ("host=h dbname=d", "host=h dbname=d", []),
]


class TestMask:
    """Only host, port, dbname and user are shown."""

    @pytest.mark.parametrize(("dsn", "shown", "secrets"), CASES)
    def test_shown_fields_only(self, dsn, shown, secrets):
        assert mask_dsn(dsn) == shown
        for secret in secrets:
            assert secret not in mask_dsn(dsn)

    @pytest.mark.parametrize("dsn", [
        f"host=h password='{SECRET}",          # an unterminated quote
        f"postgresql://hermes:{SECRET}@h:port/db",  # a port that is no number
        f"host=h {SECRET}",                     # a bare word
        "postgresql://u:a/b@h/db",              # libpq reads the password as host:port
        "hunter2",
    ])
    def test_a_dsn_that_does_not_parse_is_never_echoed(self, dsn):
        assert mask_dsn(dsn) == HIDDEN

    @pytest.mark.parametrize(("dsn", "shown", "secrets"), CASES)
    def test_every_secret_is_found(self, dsn, shown, secrets):
        found = dsn_secrets(dsn)
        for secret in secrets:
            assert secret in found

    @pytest.mark.parametrize(("dsn", "password"), [
        ("postgresql://u:p%40ss@h/db", "p@ss"),
        (f"postgresql://u:{SECRET}@h/db", SECRET),
        ("postgresql://u@h/db?password=x%26y", "x&y"),
        ("host=h password='a b\\'c'", "a b'c"),
        ("host=h dbname=d", None),
        ("postgresql://u:@h/db", None),
    ])
    def test_password_of(self, dsn, password):
        assert password_of(dsn) == password

    @pytest.mark.parametrize(("dsn", "secrets"), [(c[0], c[2]) for c in CASES] + [
        (f"host=h password='{SECRET}", [SECRET]),
        (f"postgresql://hermes:{SECRET}@h:port/db", [SECRET]),
    ])
    def test_scrub_removes_every_secret_in_any_spelling(self, dsn, secrets):
        import urllib.parse

        text = (f"failed for {dsn}: " + " ".join(
            f"bad {s} ({urllib.parse.quote(s, safe='')})" for s in secrets))
        clean = scrub(text, dsn)
        for secret in secrets:
            assert secret not in clean
            assert urllib.parse.quote(secret, safe="") not in clean

    def test_scrub_masks_password_pairs_and_user_parts_in_any_text(self):
        clean = scrub("x password=abc y postgresql://u:zz9@h/db sslpassword='q r'")
        assert "abc" not in clean and "zz9" not in clean and "q r" not in clean

    def test_a_remembered_dsn_is_scrubbed_from_texts_that_do_not_name_it(self):
        remember("postgresql://rem:Remembered?#1@h/db")
        assert "Remembered" not in scrub("driver said: Remembered?#1 is wrong")

    @pytest.mark.parametrize(("text", "shape"), [
        ("postgresql://h/db", True), ("POSTGRES://h", True), ("host=h", True),
        ("dbname = x", True), ("hunter2", False), ("mysql://h/db", False), ("", False),
    ])
    def test_is_dsn(self, text, shape):
        assert is_dsn(text) is shape


class TestWithoutPsycopg:
    """psycopg is an optional extra: without it only the plainest DSNs are read."""

    @pytest.fixture(autouse=True)
    def _no_psycopg(self, monkeypatch):
        real = builtins.__import__

        def fake(name, *args, **kwargs):
            if name == "psycopg" or name.startswith("psycopg."):
                raise ImportError(name)
            return real(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", fake)
        with pytest.raises(ImportError):
            dsn_module._libpq_parse("host=h")

    @pytest.mark.parametrize(("dsn", "shown"), [
        (f"postgresql://hermes:{SECRET}@h/db", "host=h dbname=db user=hermes"),
        ("postgresql://hermes:pw@h:5433/db?password=x", "host=h port=5433 dbname=db "
                                                        "user=hermes"),
        ("host=h password=pw1x dbname=d", "host=h dbname=d"),
        ("postgresql://hermes:p@ss@h/db", HIDDEN),
        ("postgresql://u:a/b@h/db", HIDDEN),
        (f"host=h password='{SECRET}' dbname=d", HIDDEN),
        (f"host=h {SECRET}", HIDDEN),
    ])
    def test_conservative_mask(self, dsn, shown):
        assert mask_dsn(dsn) == shown
        assert SECRET not in mask_dsn(dsn) and "pw" not in mask_dsn(dsn)

    def test_scrub_still_removes_the_password(self):
        dsn = f"postgresql://hermes:{SECRET}@h/db"
        assert SECRET not in scrub(f"{dsn} / {SECRET}", dsn)
