"""Chain expansion: the previous turn's input and output, then the new input, byte-stable from turn to turn."""

from __future__ import annotations

import itertools

import orjson

from app.conversations.chain import as_items, expand
from app.conversations.store import StoredResponse


def test_a_string_input_is_one_user_message():
    assert as_items("hello") == [{"role": "user", "content": "hello"}]


def test_without_a_previous_turn_the_input_is_unchanged():
    items = [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]
    assert expand(None, items) is items


def test_the_chain_is_previous_input_then_its_output_then_the_new_input():
    prev = StoredResponse("resp_1", [{"role": "user", "content": "one"}],
                          [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "1"}]}], {})
    assert expand(prev, "two") == [*prev.input, *prev.output, {"role": "user", "content": "two"}]


def test_each_turns_body_starts_with_the_previous_turns_bytes():
    """Three turns: the serialised input of turn n is a prefix of turn n+1's (prompt caches keep hitting)."""
    stored, bodies = None, []
    for i, text in enumerate(["first question", "second", "third"]):
        items = expand(stored, text)
        raw = orjson.dumps(items)
        bodies.append(raw)
        out = [{"id": f"msg_{i}", "type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": f"answer {i}", "annotations": []}]}]
        # What the store keeps is what it reads back: a round trip through its bytes.
        stored = StoredResponse.loads(StoredResponse(f"resp_{i}", items, out, {}).dumps())
    for earlier, later in itertools.pairwise(bodies):
        assert later[:len(earlier) - 1] == earlier[:-1]  # all but the closing bracket
