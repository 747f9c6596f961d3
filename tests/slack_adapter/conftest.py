"""The fake Slack Web API of these tests."""

from __future__ import annotations

import pytest

from .fake_slack_api import FakeSlackApi


@pytest.fixture
def slack_api():
    fake = FakeSlackApi()
    yield fake
    fake.close()
