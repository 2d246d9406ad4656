"""Chat completions as the openai SDK reads them through the gateway, in front of a loopback chat backend whose answers
each test writes (tests/protocols/chat_backend.py): what a reasoning model, a refusal or a tool call looks like when the
gateway rebuilt the answer from the backend's stream, and when the cache serves it again as a stream."""

from __future__ import annotations

import openai
import pytest

from tests.conftest import NO_BREAKER
from tests.protocols.chat_backend import ChatBackend, Chunks, Json
from tests.protocols.chat_gateway import AUTH, serve

CACHED = {"exact": {"enabled": True, "ttl_s": 300}, "finish_reasons": ["stop", "tool_calls"]}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    backend = ChatBackend().start()
    url = f"http://127.0.0.1:{backend.port}/v1"
    config = {
        "auth": AUTH,
        # vLLM's flavour: a JSON client's call is streamed upstream and its answer assembled from the chunks (as
        # for llama.cpp's); the plain one is called as the client calls it.
        "backends": {"vllm": {"base_url": url, "model": "m-scripted", "flavor": "vllm"},
                     "plain": {"base_url": url, "model": "m-scripted"}},
        "reliability": NO_BREAKER,
        "models": {"streamed": {"backends": ["vllm"], "retry": {"max_attempts": 1}},
                   "cached": {"backends": ["plain"], "retry": {"max_attempts": 1}, "cache": CACHED},
                   "semantic": {"backends": ["plain"], "retry": {"max_attempts": 1},
                                "cache": {**CACHED, "semantic": {"enabled": True, "threshold": 0.9}}}},
        # A generous embedding wait: these tests check behaviour on a shared 2-core machine, not speed.
        "cache": {"embedding": {"timeout_ms": 5000}},
    }
    yield from serve(tmp_path_factory.mktemp("chat-gw"), backend, config)


@pytest.fixture(autouse=True)
def _fresh(gateway):
    gateway.backend.answers.clear()
    gateway.backend.bodies.clear()


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


# vLLM's reasoning parsers answer a JSON call with `message.reasoning_content` (`reasoning` since v0.10.2) and stream
# it as `delta.reasoning_content` / `delta.reasoning` pieces (docs.vllm.ai, "Reasoning Outputs"); llama.cpp names it
# `reasoning_content` both ways. The JSON client gets what the backend's own JSON answer would have said.
@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_a_json_answer_rebuilt_from_the_backends_stream_keeps_its_reasoning_and_stop_reason(gateway, field):
    gateway.backend.queue(Chunks([{"role": "assistant", "content": ""}, {field: "Six times "}, {field: "seven."},
                                  {"content": "42"}], extra={"stop_reason": "###"}))
    answer = gateway.openai().chat.completions.create(model="streamed", messages=ask("6 x 7?"), stop=["###"])
    assert gateway.backend.bodies[-1]["stream"] is True  # the call was streamed upstream
    choice = answer.choices[0]
    assert choice.message.content == "42"
    assert choice.message.model_extra[field] == "Six times seven."
    assert choice.model_extra["stop_reason"] == "###"


def test_a_refusal_streamed_by_the_backend_is_the_json_answers_refusal(gateway):
    gateway.backend.queue(Chunks([{"role": "assistant", "content": None, "refusal": ""},
                                  {"refusal": "I can't "}, {"refusal": "help with that."}]))
    message = gateway.openai().chat.completions.create(model="streamed", messages=ask("Help me.")).choices[0].message
    assert (message.content, message.refusal) == (None, "I can't help with that.")


CALL = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]


# A hit asked for as a stream is replayed from the stored JSON answer: the SDK's stream helper must end with the
# message the JSON answer had (its reasoning, its refusal, its content null beside a tool call), and its last chunk
# the choice's own fields (vLLM's stop_reason).
@pytest.mark.parametrize("answer", [
    Json({"role": "assistant", "content": "42", "reasoning_content": "Six times seven."}, extra={"stop_reason": "###"}),
    Json({"role": "assistant", "content": None, "refusal": "I can't help with that."}),
    Json({"role": "assistant", "content": None, "tool_calls": [CALL]}, "tool_calls"),
], ids=["reasoning", "refusal", "tool call"])
def test_a_streamed_hit_ends_with_the_message_the_json_answer_had(gateway, answer):
    client = gateway.openai()
    gateway.backend.queue(answer)
    question = ask(f"Question {len(answer.message)} {answer.finish_reason} {sorted(answer.message)}")
    miss = client.chat.completions.create(model="cached", messages=question, tools=TOOLS, temperature=0).choices[0]
    gateway.settle()
    raw = client.chat.completions.with_raw_response.create(model="cached", messages=question, tools=TOOLS, temperature=0,
                                                           stream=True)
    assert raw.headers["x-slipstream-cache"] == "hit"
    last = list(raw.parse())[-1].choices[0]  # the choice's own fields come with its finish reason
    assert (last.finish_reason, last.model_extra) == (miss.finish_reason, miss.model_extra)
    with client.chat.completions.stream(model="cached", messages=question, tools=TOOLS, temperature=0) as stream:
        hit = stream.get_final_completion().choices[0]
    assert len(gateway.backend.bodies) == 1  # both served from the cache
    assert (hit.message.content, hit.message.refusal) == (miss.message.content, miss.message.refusal)
    assert hit.message.model_extra.get("reasoning_content") == miss.message.model_extra.get("reasoning_content")
    assert [(c.function.name, c.function.arguments) for c in hit.message.tool_calls or ()] == \
           [(c.function.name, c.function.arguments) for c in miss.message.tool_calls or ()]


# A semantic hit counts the answer's tokens only (no model read this prompt): its completion_tokens, and the breakdown
# of them a reasoning model reports (completion_tokens_details.reasoning_tokens), which was dropped.
def test_a_semantic_hit_keeps_the_answers_token_breakdown(gateway):
    usage = {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21,
             "completion_tokens_details": {"reasoning_tokens": 7}}
    gateway.backend.queue(Json({"role": "assistant", "content": "Hold reset.", "reasoning_content": "Routers..."},
                               usage=usage))
    client = gateway.openai()
    client.chat.completions.create(model="semantic", messages=ask("How do I reset my router password?"), temperature=0)
    gateway.settle()
    raw = client.chat.completions.with_raw_response.create(
        model="semantic", messages=ask("how do i reset my router password"), temperature=0)
    assert raw.headers["x-slipstream-cache"] == "semantic-hit"
    hit = raw.parse()
    assert (hit.usage.prompt_tokens, hit.usage.completion_tokens) == (0, 9)
    assert hit.usage.completion_tokens_details.reasoning_tokens == 7
    assert hit.choices[0].message.model_extra["reasoning_content"] == "Routers..."


def test_a_stream_event_that_is_not_json_ends_the_stream_with_an_error_and_is_never_cached(gateway):
    # A proxy's page or a crashing server's half line mid-stream: relayed as it came, the SDK raised a
    # JSONDecodeError (not the APIError of a broken stream) and the gateway took the stream for complete.
    gateway.backend.queue(Chunks([{"role": "assistant", "content": "Hel"}], end="garbage"),
                          Chunks([{"role": "assistant", "content": "Hello."}]))
    client = gateway.openai()
    with pytest.raises(openai.APIError, match="not JSON"):
        for _ in client.chat.completions.create(model="cached", messages=ask("Hi?"), temperature=0, stream=True):
            pass
    gateway.settle()
    again = client.chat.completions.create(model="cached", messages=ask("Hi?"), temperature=0, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in again if c.choices) == "Hello."
    assert len(gateway.backend.bodies) == 2  # the broken stream was not cached
