"""The fake Discord of these tests (REST and Gateway on loopback)."""

from __future__ import annotations

import pytest

from .fake_discord import FakeDiscord


@pytest.fixture
def discord_api():
    fake = FakeDiscord()
    yield fake
    fake.close()
