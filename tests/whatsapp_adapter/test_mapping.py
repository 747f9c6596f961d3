"""The pure rules of the WhatsApp adapter: signature, challenge, webhook bodies to events,
replies split."""

from __future__ import annotations

import json

import pytest

from hermes_actors.adapters.whatsapp.mapping import (
    challenge_answer,
    recipient,
    signature_ok,
    split_message,
    webhook_events,
)
from hermes_actors.model.events import MessageType

from .fake_graph_api import APP_SECRET, PHONE_NUMBER_ID, sign, statuses, text_message, webhook


class TestSignature:
    def test_good_signature(self):
        body = json.dumps(text_message("60123456789", "hi")).encode()
        assert signature_ok(body, sign(body), APP_SECRET)
        assert signature_ok(body, sign(body).upper().replace("SHA256=", "sha256="), APP_SECRET)

    @pytest.mark.parametrize("header", [None, "", "sha256=", "sha1=abc", "sha256=zz",
                                        "deadbeef"])
    def test_missing_or_malformed(self, header):
        assert not signature_ok(b"{}", header, APP_SECRET)

    def test_other_secret_or_other_body(self):
        body = b'{"entry": []}'
        assert not signature_ok(body, sign(body, "another-secret"), APP_SECRET)
        assert not signature_ok(body + b" ", sign(body), APP_SECRET)  # the RAW body counts
        assert not signature_ok(body, sign(body), "")


class TestChallenge:
    def test_answered(self):
        query = {"hub.mode": "subscribe", "hub.verify_token": "v", "hub.challenge": "1158201444"}
        assert challenge_answer(query, "v") == "1158201444"

    @pytest.mark.parametrize("query", [
        {"hub.mode": "subscribe", "hub.verify_token": "wrong", "hub.challenge": "1"},
        {"hub.mode": "unsubscribe", "hub.verify_token": "v", "hub.challenge": "1"},
        {"hub.verify_token": "v", "hub.challenge": "1"},
        {"hub.mode": "subscribe", "hub.verify_token": "v"},
    ])
    def test_refused(self, query):
        assert challenge_answer(query, "v") is None


class TestEvents:
    def test_text_dm(self):
        [event], skipped = webhook_events(
            text_message("60123456789", "hello", wamid="wamid.A", name="Siti"))
        source = event.source
        assert (source.platform, source.chat_type, source.chat_id, source.user_id) == (
            "whatsapp", "dm", "+60123456789", "+60123456789")
        assert (source.user_name, source.message_id, event.text) == ("Siti", "wamid.A", "hello")
        assert event.message_type is MessageType.TEXT and skipped == 0
        assert event.metadata == {"whatsapp": {"phone_number_id": PHONE_NUMBER_ID}}

    def test_redelivery_has_the_same_ingress_key(self):
        body = text_message("60123456789", "hello", wamid="wamid.A")
        [first], _ = webhook_events(body)
        [again], _ = webhook_events(body)
        assert first.ingress_key == again.ingress_key and first.event_id != again.event_id

    def test_lid_sender_through_the_aliases(self):
        body = text_message("123456789012345@lid", "hi")
        [event], _ = webhook_events(body, aliases={"123456789012345": "60123456789"})
        assert event.source.chat_id == "+60123456789"
        [unmapped], _ = webhook_events(body)
        assert unmapped.source.chat_id == "lid:123456789012345"

    @pytest.mark.parametrize(("kind", "expected"), [
        ("image", MessageType.PHOTO), ("audio", MessageType.VOICE),
        ("document", MessageType.DOCUMENT), ("video", MessageType.DOCUMENT)])
    def test_media(self, kind, expected):
        message = {"from": "60123456789", "id": "wamid.M", "type": kind,
                   kind: {"id": "MEDIA1", "mime_type": "x/y", "caption": "look"}}
        [event], _ = webhook_events(webhook({"messages": [message]}))
        assert event.message_type is expected
        assert event.media_urls == ("whatsapp-media:MEDIA1",) and event.text == "look"

    def test_statuses_and_unknown_content_are_not_messages(self):
        assert webhook_events(statuses("60123456789")) == ([], 0)
        reaction = {"from": "60123456789", "id": "wamid.R", "type": "reaction",
                    "reaction": {"message_id": "wamid.X", "emoji": "x"}}
        assert webhook_events(webhook({"messages": [reaction]})) == ([], 1)

    def test_several_messages_in_order_and_another_number_skipped(self):
        body = webhook({"messages": [
            {"from": "601", "id": "wamid.1", "type": "text", "text": {"body": "one"}},
            {"from": "60123456789", "id": "wamid.2", "type": "text", "text": {"body": "two"}}]})
        body["entry"].append(webhook({"messages": [
            {"from": "60123456789", "id": "wamid.3", "type": "text", "text": {"body": "x"}}]}
        )["entry"][0])
        body["entry"][1]["changes"][0]["value"]["metadata"]["phone_number_id"] = "999"
        events, skipped = webhook_events(body, phone_number_id=PHONE_NUMBER_ID)
        assert [e.text for e in events] == ["one", "two"] and skipped == 1

    def test_the_business_numbers_own_message_is_not_a_message(self):
        own = {"from": "15550100", "id": "wamid.OWN", "type": "text", "text": {"body": "me"}}
        other = {**own, "from": "60123456789", "id": "wamid.OTHER"}
        events, skipped = webhook_events(webhook({"messages": [own, other]}),
                                         phone_number_id=PHONE_NUMBER_ID)
        assert [e.source.message_id for e in events] == ["wamid.OTHER"] and skipped == 1

    @pytest.mark.parametrize("body", [[], "x", {"entry": "x"}])
    def test_not_a_webhook(self, body):
        with pytest.raises(ValueError):
            webhook_events(body)


class TestReplies:
    def test_recipient_digits(self):
        assert recipient("+60123456789") == "60123456789"

    def test_split_in_order(self):
        paragraphs = [f"part {n}: " + "x" * 1000 for n in range(7)]
        text = "\n\n".join(paragraphs)
        parts = split_message(text)
        assert len(parts) == 2 and all(len(p) <= 4096 for p in parts)
        assert "\n\n".join(parts) == text
        assert split_message("short") == ["short"]
        assert "".join(split_message("y" * 9000)) == "y" * 9000
