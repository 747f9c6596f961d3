"""Degraded-mode transcripts (``<session_id>.jsonl``): a torn last line costs only itself."""

from __future__ import annotations

from hermes_actors.store.backends.files.jsonl import JsonlTranscripts

SID = "20240101_000000_abcd0001"


def _message(text: str, at: float) -> dict:
    return {"role": "user", "content": text, "timestamp": at}


def test_a_torn_last_line_does_not_swallow_the_next_message(tmp_path):
    transcripts = JsonlTranscripts(tmp_path)
    transcripts.append(SID, [_message("one", 1.0)])
    with open(transcripts.path(SID), "ab") as handle:  # a crash in the middle of an append
        handle.write(b'{"role": "assistant", "cont')
    transcripts.append(SID, [_message("two", 2.0), _message("three", 3.0)])
    assert [m["content"] for m in transcripts.load(SID)] == ["one", "two", "three"]


def test_whole_lines_get_no_blank_line_between_them(tmp_path):
    transcripts = JsonlTranscripts(tmp_path)
    transcripts.append(SID, [_message("one", 1.0)])
    transcripts.append(SID, [_message("two", 2.0)])
    assert transcripts.path(SID).read_bytes().count(b"\n") == 2
    assert [m["content"] for m in transcripts.load(SID)] == ["one", "two"]


def test_discard_removes_what_it_can_and_logs_the_rest(tmp_path, caplog):
    transcripts = JsonlTranscripts(tmp_path)
    other = "20240101_000000_abcd0002"
    transcripts.append(SID, [_message("one", 1.0)])
    transcripts.path(SID).with_name(transcripts.path(SID).name + ".imported").write_text("")
    transcripts.path(other).mkdir()  # a file the disk will not remove
    transcripts.discard([other, "../escape", SID])
    assert transcripts.path(other).is_dir() and not list(tmp_path.glob(f"{SID}*"))
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        f"cannot remove the transcript file of {other}",
        "cannot remove the transcript file of ../escape"]
