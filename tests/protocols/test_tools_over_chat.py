"""Tool use, structured output and thinking through the gateway's translation to a chat-completions backend, driven by the
official SDKs against a real gateway process and a loopback chat backend whose answers each test writes
(tests/protocols/chat_backend.py): what a model says that the simulator never does."""

from __future__ import annotations

import anthropic
import openai
import pytest

from app.admission.auth import hash_key
from tests.conftest import ACME_KEY, ADMIN_KEY, NO_BREAKER
from tests.protocols.chat_backend import ChatBackend, Chunks, Json
from tests.protocols.chat_gateway import serve

WEATHER = {"name": "weather", "description": "The weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
ASK = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    backend = ChatBackend().start()
    config = {
        "auth": {"mode": "keys", "clients": [{"tenant": "acme", "key_sha256": hash_key(ACME_KEY)}],
                 "admin_keys": [hash_key(ADMIN_KEY)]},  # for /admin/cache/flush
        # TGI's flavour speaks chat completions only: Messages and Responses are translated for it.
        "backends": {"chat": {"base_url": f"http://127.0.0.1:{backend.port}/v1", "model": "m-scripted",
                              "flavor": "tgi"}},
        "reliability": NO_BREAKER,
        "models": {"tools": {"backends": ["chat"], "retry": {"max_attempts": 1}},
                   "cached": {"backends": ["chat"], "retry": {"max_attempts": 1},
                              "cache": {"exact": {"enabled": True, "ttl_s": 300}}},
                   # Answers that call a tool are cached too: they carry the tool calls' ids.
                   "cached-calls": {"backends": ["chat"], "retry": {"max_attempts": 1},
                                    "cache": {"exact": {"enabled": True, "ttl_s": 300},
                                              "finish_reasons": ["stop", "tool_calls"]}}},
    }
    yield from serve(tmp_path_factory.mktemp("tools-gw"), backend, config)


@pytest.fixture(autouse=True)
def _fresh(gateway):
    gateway.backend.answers.clear()
    gateway.backend.bodies.clear()


def test_a_tool_call_cut_by_max_tokens_is_a_max_tokens_stop_not_a_bad_gateway(gateway):
    # The model ran out of tokens inside the call's arguments: the chat answer says `length` and its arguments
    # are not JSON yet. Anthropic answers such a turn with the incomplete tool_use block and stop_reason
    # max_tokens, and clients retry with a larger max_tokens on that; a 502 told them the backend failed (and
    # the SDK retried the same request, cut the same way).
    cut = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"ci'}}]}
    gateway.backend.queue(Json(cut, "length"))
    message = gateway.anthropic().messages.create(model="tools", max_tokens=3, tools=[WEATHER], messages=ASK)
    assert message.stop_reason == "max_tokens"
    assert [(b.type, b.id, b.name) for b in message.content] == [("tool_use", "call_1", "weather")]


def test_a_tool_call_cut_by_max_tokens_in_a_stream_ends_the_same_way(gateway):
    gateway.backend.queue(Chunks([{"role": "assistant", "tool_calls": [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"ci'}}]}],
        finish_reason="length"))
    with gateway.anthropic().messages.stream(model="tools", max_tokens=3, tools=[WEATHER], messages=ASK) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "max_tokens"
    assert [(b.type, b.id, b.name) for b in final.content] == [("tool_use", "call_1", "weather")]


def test_a_strict_tool_reaches_the_backend_strict(gateway):
    # Anthropic's strict tool use guarantees the input matches the schema; chat's function.strict asks the same
    # of the backend. Dropped, the client's guarantee was gone without a word.
    gateway.backend.queue(Json({"role": "assistant", "content": "Sunny."}))
    gateway.anthropic().messages.create(model="tools", max_tokens=16, tools=[{**WEATHER, "strict": True}],
                                        messages=ASK)
    assert gateway.backend.bodies[0]["tools"][0]["function"]["strict"] is True


def test_a_json_schema_output_format_asks_the_backend_for_that_schema(gateway):
    # Structured outputs (output_config.format): the answer must be JSON of the schema. A chat backend is asked
    # with response_format json_schema, which vLLM, llama.cpp and OpenAI enforce; dropped, the client got free
    # text where it parses JSON.
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
              "additionalProperties": False}
    gateway.backend.queue(Json({"role": "assistant", "content": '{"answer": "sunny"}'}))
    message = gateway.anthropic().messages.create(model="tools", max_tokens=32, messages=ASK,
                                                  output_config={"format": {"type": "json_schema", "schema": schema}})
    assert gateway.backend.bodies[0]["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "output", "schema": schema, "strict": True}}
    assert message.content[0].text == '{"answer": "sunny"}'


def test_an_output_format_a_chat_backend_cannot_honour_is_refused_naming_it(gateway):
    with pytest.raises(anthropic.BadRequestError) as exc:
        gateway.anthropic().messages.create(model="tools", max_tokens=32, messages=ASK,
                                            output_config={"format": {"type": "xml"}})  # type: ignore[typeddict-item]
    assert "output_config.format" in exc.value.message
    assert gateway.backend.bodies == []


# Gemini's OpenAI-compatible endpoint streams parallel calls without an index (or all at index 0), each with an id
# of its own: a call with a new id is a new call, whatever its index says.
PARALLEL_WITHOUT_INDEX = [
    {"role": "assistant", "tool_calls": [{"id": "call_paris", "type": "function",
                                          "function": {"name": "weather", "arguments": '{"city": '}}]},
    {"tool_calls": [{"function": {"arguments": '"Paris"}'}}]},
    {"tool_calls": [{"id": "call_rome", "type": "function",
                     "function": {"name": "weather", "arguments": '{"city": "Rome"}'}}]},
]


def test_parallel_calls_streamed_without_an_index_stay_two_tool_use_blocks(gateway):
    gateway.backend.queue(Chunks(PARALLEL_WITHOUT_INDEX, finish_reason="tool_calls"))
    with gateway.anthropic().messages.stream(model="tools", max_tokens=64, tools=[WEATHER], messages=ASK) as stream:
        final = stream.get_final_message()
    assert [(b.type, b.id, b.input) for b in final.content] == [  # type: ignore[union-attr]
        ("tool_use", "call_paris", {"city": "Paris"}), ("tool_use", "call_rome", {"city": "Rome"})]
    assert final.stop_reason == "tool_use"


def test_parallel_calls_streamed_without_an_index_stay_two_function_calls_in_responses(gateway):
    gateway.backend.queue(Chunks(PARALLEL_WITHOUT_INDEX, finish_reason="tool_calls"))
    tools = [{"type": "function", "name": "weather", "parameters": WEATHER["input_schema"]}]
    with gateway.openai().responses.stream(model="tools", input="Weather in Paris?", tools=tools) as stream:
        final = stream.get_final_response()
    assert [(i.type, i.call_id, i.arguments) for i in final.output] == [  # type: ignore[union-attr]
        ("function_call", "call_paris", '{"city": "Paris"}'), ("function_call", "call_rome", '{"city": "Rome"}')]
    assert final.status == "completed"


# vLLM (since its reasoning_content was removed) and OpenRouter name a reasoning model's chain of thought
# `reasoning`; llama.cpp and DeepSeek `reasoning_content`. Either is the answer's reasoning item.
@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_a_chat_backends_reasoning_is_the_responses_reasoning_item_by_either_name(gateway, field):
    gateway.backend.queue(Json({"role": "assistant", field: "Two plus two.", "content": "4"}))
    response = gateway.openai().responses.create(model="tools", input="2+2?")
    reasoning = [i for i in response.output if i.type == "reasoning"]
    assert [c.text for c in reasoning[0].content or ()] == ["Two plus two."]
    assert response.output_text == "4"


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_a_chat_backends_streamed_reasoning_is_streamed_as_reasoning_text_by_either_name(gateway, field):
    gateway.backend.queue(Chunks([{"role": "assistant", field: "Two plus "}, {field: "two."}, {"content": "4"}]))
    with gateway.openai().responses.stream(model="tools", input="2+2?") as stream:
        deltas = [e.delta for e in stream if e.type == "response.reasoning_text.delta"]
        final = stream.get_final_response()
    assert deltas == ["Two plus ", "two."]
    assert [i.type for i in final.output] == ["reasoning", "message"] and final.output_text == "4"


# vLLM names the stop string that ended a choice in `stop_reason` (SGLang in `matched_stop`): Anthropic's
# stop_reason "stop_sequence" and the string, which a client that sent stop_sequences reads to know which fired.
def test_a_stop_sequence_the_backend_names_is_a_stop_sequence_stop(gateway):
    gateway.backend.queue(Json({"role": "assistant", "content": "one, two"}, "stop", extra={"stop_reason": "three"}))
    message = gateway.anthropic().messages.create(model="tools", max_tokens=16, messages=ASK,
                                                  stop_sequences=["three", "four"])
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "three")


def test_a_stop_sequence_the_backend_names_ends_a_stream_as_a_stop_sequence_stop(gateway):
    gateway.backend.queue(Chunks([{"role": "assistant", "content": "one, two"}], extra={"matched_stop": "four"}))
    with gateway.anthropic().messages.stream(model="tools", max_tokens=16, messages=ASK,
                                             stop_sequences=["three", "four"]) as stream:
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "four")


def test_an_answer_ended_without_a_named_stop_string_is_an_end_turn(gateway):
    gateway.backend.queue(Json({"role": "assistant", "content": "one"}, "stop", extra={"stop_reason": None}))
    message = gateway.anthropic().messages.create(model="tools", max_tokens=16, messages=ASK, stop_sequences=["x"])
    assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)


# A chat stream that breaks is never a complete Responses stream: it ends with an error event, which the openai SDK
# raises as APIError (not a connection cut short, not a completed response), and is neither stored nor cached.
def _stream_responses(gateway, model: str = "tools") -> None:
    with gateway.openai().responses.stream(model=model, input="Hello?", temperature=0) as stream:
        for _ in stream:
            pass


def test_a_chunk_that_is_not_json_ends_a_responses_stream_with_an_error_event(gateway):
    gateway.backend.queue(Chunks([{"role": "assistant", "content": "Hel"}], end="garbage"))
    with pytest.raises(openai.APIError, match="not JSON"):
        _stream_responses(gateway)


def test_a_responses_stream_ended_without_a_finish_reason_is_an_error_and_never_cached(gateway):
    gateway.backend.queue(Chunks([{"role": "assistant", "content": "Hel"}], finish_reason=None),
                          Chunks([{"role": "assistant", "content": "Hello."}]))
    with pytest.raises(openai.APIError, match="before it was complete"):
        _stream_responses(gateway, "cached")
    _stream_responses(gateway, "cached")  # the backend answers again: nothing was cached
    assert len(gateway.backend.bodies) == 2


# The anthropic SDK's tool runner asks the server to hold the conversation (`thread`: create, then continue with
# only the new turn). The gateway keeps no such threads; passed on or dropped, the next turn reached the model
# without its history. Anthropic's refusal for a request it cannot thread (thread_unsupported_request) makes the
# runner send every turn whole instead.
def test_a_tool_runner_that_asks_for_a_thread_is_answered_with_the_whole_conversation(gateway):
    from anthropic import beta_tool

    @beta_tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"Sunny in {city}."

    calls = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]}
    gateway.backend.queue(Json(calls, "tool_calls"), Json({"role": "assistant", "content": "It is sunny."}))
    runner = gateway.anthropic().beta.messages.tool_runner(model="tools", max_tokens=64, tools=[weather], messages=ASK)
    final = runner.until_done()
    assert final.content[0].text == "It is sunny."  # type: ignore[union-attr]
    second = gateway.backend.bodies[-1]
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "tool"]
    assert second["messages"][2] == {"role": "tool", "tool_call_id": "call_1", "content": "Sunny in Paris."}
    assert second["tools"][0]["function"]["name"] == "weather"


def test_a_request_for_a_thread_is_refused_as_anthropic_refuses_one_it_cannot_thread(gateway):
    with pytest.raises(anthropic.BadRequestError) as exc:
        gateway.anthropic().beta.messages.create(model="tools", max_tokens=16, messages=ASK, thread={"type": "create"})
    assert exc.value.body["error"]["details"]["error_code"] == "thread_unsupported_request"  # type: ignore[index]
    assert "thread" in exc.value.message
    assert gateway.backend.bodies == []


# OpenAI's chat completions answer a refused request (structured outputs above all) with message.refusal and no
# content: Anthropic's stop_reason "refusal", with the model's words as the text, not an empty end_turn.
def test_a_chat_refusal_is_a_refusal_stop_with_its_words(gateway):
    gateway.backend.queue(Json({"role": "assistant", "content": None, "refusal": "I can't help with that."}))
    message = gateway.anthropic().messages.create(model="tools", max_tokens=16, messages=ASK)
    assert message.stop_reason == "refusal"
    assert [(b.type, b.text) for b in message.content] == [("text", "I can't help with that.")]  # type: ignore[union-attr]


def test_a_streamed_chat_refusal_is_a_refusal_stop_with_its_words(gateway):
    gateway.backend.queue(Chunks([{"role": "assistant", "refusal": "I can't"}, {"refusal": " help with that."}]))
    with gateway.anthropic().messages.stream(model="tools", max_tokens=16, messages=ASK) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "refusal"
    assert [(b.type, b.text) for b in final.content] == [("text", "I can't help with that.")]  # type: ignore[union-attr]


def test_a_chat_refusal_is_a_responses_refusal_part(gateway):
    gateway.backend.queue(Json({"role": "assistant", "content": None, "refusal": "I can't help with that."}))
    response = gateway.openai().responses.create(model="tools", input="Hello?")
    assert [(i.type, [(c.type, c.refusal) for c in i.content]) for i in response.output] == [  # type: ignore[union-attr]
        ("message", [("refusal", "I can't help with that.")])]


def test_a_streamed_chat_refusal_is_streamed_as_a_responses_refusal(gateway):
    gateway.backend.queue(Chunks([{"role": "assistant", "refusal": "I can't"}, {"refusal": " help with that."}]))
    with gateway.openai().responses.stream(model="tools", input="Hello?") as stream:
        deltas = [e.delta for e in stream if e.type == "response.refusal.delta"]
        final = stream.get_final_response()
    assert deltas == ["I can't", " help with that."]
    assert [(c.type, c.refusal) for c in final.output[0].content] == [  # type: ignore[union-attr]
        ("refusal", "I can't help with that.")]


# Thinking over chat. Claude Code asks for thinking on some models and sends earlier turns' thinking blocks back;
# refused, every request of a chat-only alias was a 400. A reasoning model behind chat completions answers with
# its reasoning beside the content (`reasoning_content`: llama.cpp, DeepSeek; `reasoning`: vLLM, OpenRouter),
# which becomes the thinking block Anthropic puts before the answer.
THINK = {"type": "enabled", "budget_tokens": 2048}
REASONED_USAGE = {"prompt_tokens": 12, "completion_tokens": 40, "total_tokens": 52,
                  "completion_tokens_details": {"reasoning_tokens": 31}}


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_thinking_over_chat_relays_the_backends_reasoning_as_a_thinking_block_before_the_answer(gateway, field):
    gateway.backend.queue(Json({"role": "assistant", field: "Paris is in France.", "content": "Sunny."},
                               usage=REASONED_USAGE))
    message = gateway.anthropic().messages.create(model="tools", max_tokens=4096, thinking=THINK, messages=ASK)
    assert [b.model_dump() for b in message.content] == [
        {"type": "thinking", "thinking": "Paris is in France.", "signature": ""},
        {"type": "text", "text": "Sunny.", "citations": None}]
    assert message.usage.output_tokens == 40  # the reasoning tokens counted in, as Anthropic counts thinking


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_a_thinking_stream_over_chat_opens_with_the_thinking_block_in_anthropics_order(gateway, field):
    gateway.backend.queue(Chunks([{"role": "assistant", field: "Paris is "}, {field: "in France."},
                                  {"content": "Sun"}, {"content": "ny."}], usage=REASONED_USAGE))
    with gateway.anthropic().messages.stream(model="tools", max_tokens=4096, thinking={"type": "adaptive"},
                                             messages=ASK) as stream:
        events = [(e.type, getattr(e, "index", None), getattr(getattr(e, "delta", None), "type", None))
                  for e in stream if e.type.startswith("content_block")]
        final = stream.get_final_message()
    assert events == [
        ("content_block_start", 0, None), ("content_block_delta", 0, "thinking_delta"),
        ("content_block_delta", 0, "thinking_delta"), ("content_block_delta", 0, "signature_delta"),
        ("content_block_stop", 0, None),
        ("content_block_start", 1, None), ("content_block_delta", 1, "text_delta"),
        ("content_block_delta", 1, "text_delta"), ("content_block_stop", 1, None)]
    assert [b.model_dump() for b in final.content] == [
        {"type": "thinking", "thinking": "Paris is in France.", "signature": ""},
        {"type": "text", "text": "Sunny.", "citations": None}]
    assert final.usage.output_tokens == 40


def test_thinking_asked_of_a_backend_that_does_not_reason_is_the_plain_answer(gateway):
    gateway.backend.queue(Json({"role": "assistant", "content": "Sunny."}),
                          Chunks([{"role": "assistant", "content": "Sunny."}]))
    message = gateway.anthropic().messages.create(model="tools", max_tokens=4096, thinking=THINK, messages=ASK)
    assert [b.type for b in message.content] == ["text"]
    with gateway.anthropic().messages.stream(model="tools", max_tokens=4096, thinking=THINK, messages=ASK) as stream:
        final = stream.get_final_message()
    assert [(b.type, b.text) for b in final.content] == [("text", "Sunny.")]  # type: ignore[union-attr]


# An agent's history as Claude Code sends it back: the assistant turn's thinking (signed by Anthropic, or made
# here with no signature) and redacted thinking, then its tool call.
HISTORY: list = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "I should call the tool.", "signature": "EqQBCkYIARgC"},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Paris"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "Sunny."}]}]
HISTORY_AS_CHAT = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "Let me look.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "Sunny."}]


def test_thinking_in_the_history_is_dropped_on_the_way_to_a_chat_backend(gateway):
    # Chat backends take no reasoning back (vLLM's docs say not to send it), as Anthropic ignores earlier turns'.
    gateway.backend.queue(Json({"role": "assistant", "reasoning": "It said sunny.", "content": "It is sunny."}))
    message = gateway.anthropic().messages.create(model="tools", max_tokens=4096, thinking=THINK, tools=[WEATHER],
                                                  messages=HISTORY)
    assert gateway.backend.bodies[0]["messages"] == HISTORY_AS_CHAT
    assert [b.type for b in message.content] == ["thinking", "text"]


@pytest.mark.parametrize("thinking", [{"type": "disabled"}, None])
def test_thinking_turned_off_keeps_the_reasoning_out_and_the_history_served(gateway, thinking):
    # A conversation whose earlier turns thought, now without thinking: the history is served as above, and the
    # backend's reasoning is not relayed (the client did not ask for thinking blocks).
    gateway.backend.queue(Json({"role": "assistant", "reasoning_content": "Hm.", "content": "It is sunny."}))
    extra = {} if thinking is None else {"thinking": thinking}
    message = gateway.anthropic().messages.create(model="tools", max_tokens=64, tools=[WEATHER], messages=HISTORY,
                                                  **extra)
    assert gateway.backend.bodies[0]["messages"] == HISTORY_AS_CHAT
    assert [b.type for b in message.content] == ["text"]


def test_only_a_well_formed_thinking_is_served_a_malformed_one_is_refused_in_anthropics_shape(gateway):
    bad = [({"type": "enabled"}, "thinking.budget_tokens"),  # Anthropic requires the budget
           ({"type": "enabled", "budget_tokens": 512}, "thinking.budget_tokens"),  # at least 1024
           ({"type": "sometimes"}, "thinking.type"),
           ("yes", "thinking")]
    for thinking, param in bad:
        with pytest.raises(anthropic.BadRequestError) as exc:
            gateway.anthropic().messages.create(model="tools", max_tokens=4096, messages=ASK,
                                                thinking=thinking)  # type: ignore[arg-type]
        assert exc.value.status_code == 400
        assert exc.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
        assert param.split(".")[-1] in exc.value.message, thinking
    assert gateway.backend.bodies == []
    gateway.backend.queue(Json({"role": "assistant", "content": "Sunny."}))
    assert gateway.anthropic().messages.create(model="tools", max_tokens=4096, messages=ASK, thinking=THINK).content


def test_a_cached_answer_with_thinking_replays_the_same_as_json_and_as_a_stream(gateway):
    gateway.backend.queue(Json({"role": "assistant", "reasoning_content": "Paris is in France.",
                                "content": "Sunny."}))
    client = gateway.anthropic()
    ask = {"model": "cached", "max_tokens": 4096, "thinking": THINK, "messages": ASK,
           "extra_body": {"temperature": 0}}  # only a deterministic answer is cached
    first = client.messages.create(**ask)
    gateway.settle()
    again = client.messages.create(**ask)
    with client.messages.stream(**ask) as stream:
        streamed = stream.get_final_message()
    assert len(gateway.backend.bodies) == 1  # both answered from the cache
    assert [b.model_dump() for b in first.content] == [b.model_dump() for b in again.content] \
        == [b.model_dump() for b in streamed.content]
    assert first.content[0].type == "thinking"


CALLS_PARIS = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_first", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}},
    {"id": "call_second", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Lyon"}'}}]}


def test_a_cached_chat_completion_replays_its_tool_calls_with_ids_of_their_own(gateway):
    # A client answers each tool call by its id (the tool message's tool_call_id) and keeps the calls of every
    # answer it got: two answers naming the same call_ ids are one set of calls twice. OpenAI's ids are unique
    # to one answer, so a cache hit (JSON or streamed) gets new ones, as it gets a message id of its own.
    gateway.backend.queue(Json(CALLS_PARIS, "tool_calls"))
    client = gateway.openai()
    tool = {"type": "function", "function": {"name": "weather", "parameters": WEATHER["input_schema"]}}
    ask = {"model": "cached-calls", "messages": ASK, "tools": [tool], "temperature": 0}
    first = client.chat.completions.create(**ask)
    gateway.settle()
    raw = client.chat.completions.with_raw_response.create(**ask)
    assert raw.headers["x-slipstream-cache"] == "hit"
    again = raw.parse()
    chunks = list(client.chat.completions.create(**ask, stream=True))
    assert len(gateway.backend.bodies) == 1  # both answered from the cache
    streamed = [c.id for chunk in chunks if chunk.choices for c in chunk.choices[0].delta.tool_calls or () if c.id]
    answers = [[c.id for c in first.choices[0].message.tool_calls], [c.id for c in again.choices[0].message.tool_calls],
               streamed]
    assert answers[0] == ["call_first", "call_second"]
    assert len({i for ids in answers for i in ids}) == 6 and all(i.startswith("call_") for ids in answers for i in ids)
    # The rest of each call is the answer the cache holds.
    assert [(c.function.name, c.function.arguments) for c in again.choices[0].message.tool_calls] == \
        [("weather", '{"city": "Paris"}'), ("weather", '{"city": "Lyon"}')]


def test_a_cached_message_replays_its_tool_use_blocks_with_ids_of_their_own(gateway):
    # Anthropic's tool_use ids are unique to one message; a client pairs each tool_result with its tool_use by it.
    gateway.backend.queue(Json(CALLS_PARIS, "tool_calls"))
    client = gateway.anthropic()
    ask = {"model": "cached-calls", "max_tokens": 64, "messages": ASK, "tools": [WEATHER],
           "extra_body": {"temperature": 0}}  # only a deterministic answer is cached
    first = client.messages.create(**ask)
    gateway.settle()
    raw = client.messages.with_raw_response.create(**ask)
    assert raw.headers["x-slipstream-cache"] == "hit"
    again = raw.parse()
    with client.messages.stream(**ask) as stream:
        streamed = stream.get_final_message()
    assert len(gateway.backend.bodies) == 1  # both answered from the cache
    answers = [[b.id for b in m.content if b.type == "tool_use"] for m in (first, again, streamed)]
    assert answers[0] == ["call_first", "call_second"]  # the backend's ids, as a chat backend named them
    assert len({i for ids in answers for i in ids}) == 6 and all(len(ids) == 2 for ids in answers)
    assert [(b.name, b.input) for b in streamed.content if b.type == "tool_use"] == \
        [("weather", {"city": "Paris"}), ("weather", {"city": "Lyon"})]
    assert streamed.stop_reason == again.stop_reason == "tool_use"


PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def test_an_image_a_tool_returned_reaches_a_chat_backend_in_a_user_message_after_the_tool_messages(gateway):
    # A chat `tool` message carries text only (OpenAI's chat API, vLLM and most backends refuse an image part
    # there), so the tool's text stays in its tool message and its images follow the tool messages in a user
    # message naming the call, before the rest of the turn: as /v1/responses translates a function_call_output
    # (tests/protocols/responses/test_over_chat.py). Refused before, so every screenshot tool failed here.
    gateway.backend.queue(Json({"role": "assistant", "content": "A black pixel."}))
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}}
    message = gateway.anthropic().messages.create(model="tools", max_tokens=16, tools=[WEATHER], messages=[
        {"role": "user", "content": "Take a screenshot."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "text", "text": "Taken."}, image]},
                                     {"type": "text", "text": "What is in it?"}]}])
    assert message.content[0].text == "A black pixel."
    sent = gateway.backend.bodies[0]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]
    assert sent[2]["tool_call_id"] == "toolu_1" and sent[2]["content"].startswith("Taken.\n")
    assert sent[3]["content"] == [{"type": "text", "text": "The image returned by tool call toolu_1:"},
                                  {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}},
                                  {"type": "text", "text": "What is in it?"}]
