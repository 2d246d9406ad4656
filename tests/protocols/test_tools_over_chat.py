"""Tool use and structured output through the gateway's translation to a chat-completions backend, driven by the
official SDKs against a real gateway process and a loopback chat backend whose answers each test writes
(tests/protocols/chat_backend.py): what a model says that the simulator never does."""

from __future__ import annotations

import anthropic
import openai
import pytest

from app.admission.auth import hash_key
from tests.conftest import ACME_KEY, NO_BREAKER
from tests.protocols.chat_backend import ChatBackend, Chunks, Json
from tests.support import Process, free_port, write_yaml

WEATHER = {"name": "weather", "description": "The weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
ASK = [{"role": "user", "content": "Weather in Paris?"}]


class Gateway:
    def __init__(self, url: str, backend: ChatBackend) -> None:
        self.url, self.backend = url, backend

    def anthropic(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.url, api_key=ACME_KEY, max_retries=0)

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=ACME_KEY, max_retries=0)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    backend = ChatBackend().start()
    port = free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port},
        "auth": {"mode": "keys", "clients": [{"tenant": "acme", "key_sha256": hash_key(ACME_KEY)}]},
        # TGI's flavour speaks chat completions only: Messages and Responses are translated for it.
        "backends": {"chat": {"base_url": f"http://127.0.0.1:{backend.port}/v1", "model": "m-scripted",
                              "flavor": "tgi"}},
        "reliability": NO_BREAKER,
        "models": {"tools": {"backends": ["chat"], "retry": {"max_attempts": 1}},
                   "cached": {"backends": ["chat"], "retry": {"max_attempts": 1},
                              "cache": {"exact": {"enabled": True, "ttl_s": 300}}}},
    }
    tmp = tmp_path_factory.mktemp("tools-gw")
    proc = Process(["serve", "--config", str(write_yaml(tmp / "gw.yaml", config))], tmp / "gw.log")
    proc.wait_listening(port)
    yield Gateway(f"http://127.0.0.1:{port}", backend)
    proc.stop()
    backend.stop()


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
