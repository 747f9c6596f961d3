"""The Slack adapter: the Events API in (``POST /slack/events``, signed, acknowledged after
durability), the delivery ledger out (``chat.postMessage``).

``mapping`` (events to messages, replies to parts: pure) and ``adapter`` (the platform the
gateway sees, and the events route of the HTTP server). Importing this package imports
slack_sdk (lazily, when an adapter is built); nothing else in ``hermes_actors`` does unless
``platforms`` lists ``slack``.
"""

from hermes_actors.adapters.slack.adapter import (
    EVENTS_PATH,
    SlackAdapter,
    SlackError,
    check_secrets,
)

__all__ = ["EVENTS_PATH", "SlackAdapter", "SlackError", "check_secrets"]
