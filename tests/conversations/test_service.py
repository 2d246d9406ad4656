"""The conversations service: not-found answers that cannot tell another tenant's id from none, a bound that refuses, never cuts."""

from __future__ import annotations

import asyncio

import pytest

from app.config import ResponsesConfig
from app.conversations.chain import ChainTooLong
from app.conversations.service import Conversations, PreviousResponseNotFound, StoreUnavailable, input_items_page
from app.conversations.store import MemoryResponseStore, StoredResponse


def service(**config) -> Conversations:
    return Conversations(MemoryResponseStore(1 << 20, 60), ResponsesConfig(**config))


RESPONSE = {"id": "resp_1", "object": "response", "output": [{"type": "message", "role": "assistant", "content": []}]}


def test_a_kept_turn_is_the_previous_of_the_next_for_its_tenant_only():
    async def go():
        conv = service()
        assert await conv.keep("acme", [{"role": "user", "content": "hi"}], RESPONSE)
        assert (await conv.previous("acme", "resp_1")).output == RESPONSE["output"]
        with pytest.raises(PreviousResponseNotFound) as other:
            await conv.previous("globex", "resp_1")
        with pytest.raises(PreviousResponseNotFound) as unknown:
            await conv.previous("acme", "resp_nope")
        assert other.value.param == unknown.value.param == "previous_response_id"
        assert other.value.status == 400 and other.value.code == "previous_response_not_found"
        assert other.value.message.replace("resp_1", "X") == unknown.value.message.replace("resp_nope", "X")
    asyncio.run(go())


def test_a_chain_past_the_bound_is_refused_as_context_length_exceeded():
    conv = service(max_entry_bytes=2048)
    with pytest.raises(ChainTooLong) as err:
        conv.check_size([{"role": "user", "content": "x" * 4096}])
    assert err.value.code == "context_length_exceeded" and err.value.status == 400


def test_a_store_that_does_not_answer_in_time_is_a_503_not_a_silent_cut():
    class Hanging(MemoryResponseStore):
        async def get(self, tenant, response_id):
            await asyncio.sleep(5)

    async def go():
        conv = Conversations(Hanging(1 << 20, 60), ResponsesConfig(timeout_ms=50))
        with pytest.raises(StoreUnavailable) as err:
            await conv.previous("acme", "resp_1")
        assert err.value.status == 503
    asyncio.run(go())


def test_input_items_list_in_openai_order_with_stable_ids_and_pages():
    turn = StoredResponse("resp_9", [{"role": "user", "content": "a"}, {"id": "msg_x", "type": "message",
                                     "role": "assistant", "content": []}, {"role": "user", "content": "b"}], [], {})
    first = input_items_page(turn, 2, "desc", None)
    assert [i["id"] for i in first["data"]] == ["resp_9_in_2", "msg_x"] and first["has_more"] is True
    rest = input_items_page(turn, 2, "desc", first["last_id"])
    assert [i["id"] for i in rest["data"]] == ["resp_9_in_0"] and rest["has_more"] is False
    assert input_items_page(turn, 20, "asc", None)["data"][0]["type"] == "message"
