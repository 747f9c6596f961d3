"""DSNs as they may be shown: passwords masked in every spelling, scrubbed from any text."""

from __future__ import annotations

import pytest

from hermes_actors.model.dsn import MASK, is_dsn, mask_dsn, password_of, scrub


class TestMask:
    """The password goes, the rest stays readable."""

    @pytest.mark.parametrize(("dsn", "masked"), [
        ("postgresql://u:pw@h:5432/db", f"postgresql://u:{MASK}@h:5432/db"),
        ("postgres://u@h/db?sslmode=require&password=pw",
         f"postgres://u@h/db?sslmode=require&password={MASK}"),
        ("postgresql://u:@/db?host=/tmp/s", "postgresql://u:@/db?host=/tmp/s"),
        ("host=h password=pw dbname=d", f"host=h password={MASK} dbname=d"),
        ("host=h password = 'p w\\'x' dbname=d", f"host=h password = {MASK} dbname=d"),
        ("postgresq://u:pw@h/db", f"postgresq://u:{MASK}@h/db"),  # a mistyped scheme too
        ("host=h dbname=d", "host=h dbname=d"),
        # the client key's password, and a URI without a user part
        ("host=h sslpassword=kp password=pw", f"host=h sslpassword={MASK} password={MASK}"),
        ("postgresql://u@h/db?sslpassword=kp", f"postgresql://u@h/db?sslpassword={MASK}"),
        ("postgresql:///db?host=/tmp&password=pw&sslmode=require",
         f"postgresql:///db?host=/tmp&password={MASK}&sslmode=require"),
    ])
    def test_mask(self, dsn, masked):
        assert mask_dsn(dsn) == masked

    @pytest.mark.parametrize(("dsn", "password"), [
        ("postgresql://u:p%40ss@h/db", "p@ss"),
        ("postgresql://u@h/db?password=x%26y", "x&y"),
        ("host=h password='a b\\'c'", "a b'c"),
        ("host=h dbname=d", None),
        ("postgresql://u:@h/db", None),
    ])
    def test_password_of(self, dsn, password):
        assert password_of(dsn) == password

    def test_scrub_removes_the_password_in_any_spelling(self):
        dsn = "postgresql://u:p%40ss@h/db"
        text = f"failed for {dsn}: bad password p@ss (p%40ss)"
        assert "p@ss" not in scrub(text, dsn) and "p%40ss" not in scrub(text, dsn)

    @pytest.mark.parametrize(("text", "shape"), [
        ("postgresql://h/db", True), ("POSTGRES://h", True), ("host=h", True),
        ("dbname = x", True), ("hunter2", False), ("mysql://h/db", False), ("", False),
    ])
    def test_is_dsn(self, text, shape):
        assert is_dsn(text) is shape
