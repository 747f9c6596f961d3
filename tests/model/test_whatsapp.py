"""canonical_whatsapp_identifier (§3, §17.7, §17.39)."""

from __future__ import annotations

import pytest

from hermes_actors.model.whatsapp import canonical_whatsapp_identifier as canonical

PHONE = "+60123456789"
LID = "123456789012345"


class TestPhoneForms:
    """Every spelling of one phone number gives the same E.164 value."""

    @pytest.mark.parametrize(
        "raw",
        [
            "60123456789@s.whatsapp.net",
            "+60 12-345 6789",
            "60123456789:12@s.whatsapp.net",
            "60123456789@c.us",
            "60123456789:3@c.us",
            "60123456789",
            "+60123456789",
            "  60123456789@S.WhatsApp.Net  ",
            "(60) 12.345.6789",
        ],
    )
    def test_spellings_of_one_phone(self, raw):
        assert canonical(raw) == PHONE

    def test_canonical_form_is_stable(self):
        assert canonical(canonical("60123456789@s.whatsapp.net")) == PHONE

    @pytest.mark.parametrize(
        ("raw", "expected"), [("1234567", "+1234567"), ("123456789012345", "+123456789012345")]
    )
    def test_seven_to_fifteen_digits_are_phone_like(self, raw, expected):
        assert canonical(raw) == expected

    @pytest.mark.parametrize("raw", ["123456", "1234567890123456", "12ab34567", "+"])
    def test_outside_the_phone_range_is_returned_trimmed(self, raw):
        assert canonical(f"  {raw} ") == raw


class TestLids:
    """A LID is replaced by its phone alias when known, else kept as lid:<digits>."""

    def test_unmapped_lid(self):
        assert canonical(f"{LID}@lid") == f"lid:{LID}"

    def test_lid_device_suffix_is_dropped(self):
        assert canonical(f"{LID}:7@lid") == f"lid:{LID}"

    @pytest.mark.parametrize("phone", ["60123456789", "+60123456789", "+60 12-345 6789"])
    def test_mapped_lid_becomes_the_phone(self, phone):
        assert canonical(f"{LID}@lid", {LID: phone}) == PHONE

    def test_alias_map_keyed_by_int_or_full_lid(self):
        assert canonical(f"{LID}@lid", {int(LID): "60123456789"}) == PHONE
        assert canonical(f"{LID}@lid", {f"{LID}@lid": "60123456789"}) == PHONE

    def test_alias_that_is_not_a_phone_leaves_the_lid(self):
        assert canonical(f"{LID}@lid", {LID: "nobody"}) == f"lid:{LID}"

    def test_aliases_apply_only_to_values_that_carried_lid(self):
        aliases = {"60123456789": "+44 7700 900123"}
        assert canonical("60123456789", aliases) == PHONE
        assert canonical("60123456789@s.whatsapp.net", aliases) == PHONE
        assert canonical(f"lid:{LID}", {LID: "60123456789"}) == f"lid:{LID}"


class TestOtherValues:
    """Groups and anything unrecognised pass through trimmed."""

    def test_group_ids_are_left_as_they_are(self):
        assert canonical(" 120363012345678901@g.us ") == "120363012345678901@g.us"
        assert canonical("120363012345678901@g.us", {"120363012345678901": "60123456789"}) == (
            "120363012345678901@g.us"
        )

    def test_unknown_text_is_trimmed(self):
        assert canonical("  status@broadcast ") == "status@broadcast"
        assert canonical(" alice ") == "alice"

    def test_domain_is_dropped_even_when_not_a_phone(self):
        assert canonical("abc@s.whatsapp.net") == "abc"

    def test_empty_and_none(self):
        assert canonical("") == ""
        assert canonical("   ") == ""
        assert canonical(None) == ""
