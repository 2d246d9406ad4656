"""/v1/responses passed through to a backend that speaks Responses itself, one whose answers each test writes (a
loopback stand-in for vLLM's /v1/responses), driven with the official openai SDK against a real gateway process:
what such a backend says that the gateway mends, and what it relays as it came."""

from __future__ import annotations

from collections import deque

import pytest
from aiohttp import web

from app.admission.auth import hash_key
from tests.conftest import ACME_KEY, NO_BREAKER
from tests.protocols.chat_backend import LoopbackServer
from tests.protocols.chat_gateway import serve


class ResponsesStandIn(LoopbackServer):
    """POST /v1/responses answered with the next queued response object (its model the one asked for)."""

    def __init__(self) -> None:
        self.answers: deque[dict] = deque()
        super().__init__()

    def queue(self, *answers: dict) -> None:
        self.answers.extend(answers)

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/responses", self._responses)]

    async def _responses(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({**self.answers.popleft(), "model": body["model"]})


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    backend = ResponsesStandIn().start()
    config = {
        "auth": {"mode": "keys", "clients": [{"tenant": "acme", "key_sha256": hash_key(ACME_KEY)}]},
        "backends": {"vllm": {"base_url": f"http://127.0.0.1:{backend.port}/v1", "model": "m-vllm",
                              "flavor": "vllm", "apis": ["responses"]}},
        "reliability": NO_BREAKER,
        "models": {"native": {"backends": ["vllm"], "retry": {"max_attempts": 1}}},
    }
    yield from serve(tmp_path_factory.mktemp("responses-native"), backend, config)


def _response(status: str, output: list[dict], reason: str | None = None) -> dict:
    return {"id": "resp_vllm", "object": "response", "created_at": 1, "status": status, "error": None,
            "incomplete_details": {"reason": reason} if reason else None, "output": output, "tools": [],
            "parallel_tool_calls": True, "tool_choice": "auto", "metadata": {},
            "usage": {"input_tokens": 9, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 16,
                      "output_tokens_details": {"reasoning_tokens": 6}, "total_tokens": 25}}


REASONING = {"id": "rs_1", "type": "reasoning", "summary": [], "status": "completed",
             "content": [{"type": "reasoning_text", "text": "The user wants a long story."}]}
MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
           "content": [{"type": "output_text", "text": "Once upon a time", "annotations": [], "logprobs": []}]}


def test_a_native_answer_cut_by_max_output_tokens_says_incomplete_on_the_item_the_cut_fell_in(gateway):
    # vLLM marks every item `completed` inside a response cut by max_output_tokens (vllm-project/vllm#57998);
    # OpenAI marks the item the cut fell in `incomplete` (the message here), and only that one.
    gateway.backend.queue(_response("incomplete", [REASONING, MESSAGE], "max_output_tokens"))
    client = gateway.openai()
    r = client.responses.create(model="native", input="Tell me a long story.", max_output_tokens=16)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert [(i.type, i.status) for i in r.output] == [("reasoning", "completed"), ("message", "incomplete")]
    assert r.output_text == "Once upon a time"
    stored = client.responses.retrieve(r.id)
    assert [i.status for i in stored.output] == ["completed", "incomplete"]


@pytest.mark.parametrize("answer", [
    _response("completed", [REASONING, MESSAGE]),
    # OpenAI's own cut inside the reasoning: that item has no status to mend.
    _response("incomplete", [{**REASONING, "status": None}], "max_output_tokens"),
], ids=["complete", "cut-in-a-reasoning-item-without-a-status"])
def test_a_native_answer_with_nothing_to_mend_is_relayed_as_it_came(gateway, answer):
    gateway.backend.queue(answer)
    r = gateway.openai().responses.create(model="native", input="Tell me a story.")
    assert [i.status for i in r.output] == [i["status"] for i in answer["output"]]
