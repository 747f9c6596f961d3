"""Fixtures of the Telegram adapter's tests: a fake Bot API server on loopback per test."""

from __future__ import annotations

import pytest

from .fake_bot_api import FakeBotApi


@pytest.fixture
def bot_api():
    """A running :class:`FakeBotApi`, closed after the test."""
    api = FakeBotApi()
    yield api
    api.close()
