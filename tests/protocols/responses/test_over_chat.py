"""/v1/responses translated for a chat-completions backend whose answers each test writes (tests/protocols/chat_backend.py),
driven with the official openai SDK against a real gateway process: what a model says that the simulator never does."""

from __future__ import annotations

import openai
import pytest
from pydantic import BaseModel

from app.admission.auth import hash_key
from tests.conftest import ACME_KEY, ADMIN_KEY, GLOBEX_KEY, NO_BREAKER
from tests.protocols.chat_backend import ChatBackend, Chunks, Json
from tests.protocols.chat_gateway import serve

WEATHER = {"type": "function", "name": "weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    backend = ChatBackend().start()
    config = {
        "auth": {"mode": "keys", "clients": [{"tenant": "acme", "key_sha256": hash_key(ACME_KEY)},
                                             {"tenant": "globex", "key_sha256": hash_key(GLOBEX_KEY)}],
                 "admin_keys": [hash_key(ADMIN_KEY)]},
        "backends": {"chat": {"base_url": f"http://127.0.0.1:{backend.port}/v1", "model": "m-scripted",
                              "flavor": "tgi"},  # TGI's flavour speaks chat completions only: Responses is translated
                     # The same server as llama.cpp: its flavour's Responses are translated too (its own endpoint
                     # is not used by default).
                     "llama": {"base_url": f"http://127.0.0.1:{backend.port}/v1", "model": "m-scripted",
                               "flavor": "llamacpp"}},
        "reliability": NO_BREAKER,
        "models": {"tools": {"backends": ["chat"], "retry": {"max_attempts": 1}},
                   "on-llama": {"backends": ["llama"], "retry": {"max_attempts": 1}},
                   "cached": {"backends": ["chat"], "retry": {"max_attempts": 1},
                              # Answers that call a tool are cached too: they carry every kind of item id.
                              "cache": {"exact": {"enabled": True, "ttl_s": 300},
                                        "finish_reasons": ["stop", "tool_calls"]}}},
    }
    yield from serve(tmp_path_factory.mktemp("responses-over-chat"), backend, config)


@pytest.fixture(autouse=True)
def _fresh(gateway):
    gateway.backend.answers.clear()
    gateway.backend.bodies.clear()


# --- a cut answer: the item the cut fell in says incomplete ----------------------------------------------------

REASONED_CALL_CUT = {"role": "assistant", "content": None, "reasoning_content": "Paris, so call weather.",
                     "tool_calls": [{"id": "call_1", "type": "function",
                                     "function": {"name": "weather", "arguments": '{"ci'}}]}


def test_a_call_cut_by_max_output_tokens_is_an_incomplete_item_after_a_completed_reasoning_item(gateway):
    # The reasoning ended before the call began; the cap fell inside the call's arguments. OpenAI marks only the
    # item the cut fell in `incomplete` (ResponseFunctionToolCall.status): a client that runs completed calls
    # must not run this one.
    gateway.backend.queue(Json(REASONED_CALL_CUT, "length"))
    client = gateway.openai()
    r = client.responses.create(model="tools", input="Weather in Paris?", tools=[WEATHER], max_output_tokens=8)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert [(i.type, i.status) for i in r.output] == [("reasoning", "completed"), ("function_call", "incomplete")]
    assert [i.status for i in client.responses.retrieve(r.id).output] == ["completed", "incomplete"]


def test_a_streamed_call_cut_by_max_output_tokens_is_done_incomplete_in_every_event_and_the_stored_turn(gateway):
    gateway.backend.queue(Chunks([{"role": "assistant", "reasoning_content": "Paris, so call weather."},
                                  {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                   "function": {"name": "weather", "arguments": '{"ci'}}]}],
                                 finish_reason="length"))
    client = gateway.openai()
    events = list(client.responses.create(model="tools", input="Weather in Paris?", tools=[WEATHER],
                                          max_output_tokens=8, stream=True))
    done = [(e.item.type, e.item.status) for e in events if e.type == "response.output_item.done"]
    assert done == [("reasoning", "completed"), ("function_call", "incomplete")]
    final = events[-1]
    assert final.type == "response.incomplete"
    assert [i.status for i in final.response.output] == ["completed", "incomplete"]
    assert [i.status for i in client.responses.retrieve(final.response.id).output] == ["completed", "incomplete"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_message_a_content_filter_stopped_is_incomplete_for_that_reason(gateway, stream):
    client = gateway.openai()
    if stream:
        gateway.backend.queue(Chunks([{"role": "assistant", "content": "Here is how to"}], finish_reason="content_filter"))
        r = list(client.responses.create(model="tools", input="Tell me.", stream=True))[-1].response
    else:
        gateway.backend.queue(Json({"role": "assistant", "content": "Here is how to"}, "content_filter"))
        r = client.responses.create(model="tools", input="Tell me.")
    assert r.status == "incomplete" and r.incomplete_details.reason == "content_filter"
    assert [(i.type, i.status) for i in r.output] == [("message", "incomplete")]


# --- an exact-cache hit: a response of its own, never the first answer's ids ---------------------------------

ANSWER_WITH_EVERY_ITEM = {"role": "assistant", "content": "Let me look.", "reasoning_content": "Paris: call weather.",
                          "tool_calls": [{"id": "call_first", "type": "function",
                                          "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]}


def _ids(response) -> list[str]:
    return [response.id, *(i.id for i in response.output), *(i.call_id for i in response.output if i.type == "function_call")]


def _first_answer_cached(gateway, question: str):
    gateway.backend.queue(Json(ANSWER_WITH_EVERY_ITEM, "tool_calls"))
    first = gateway.openai().responses.create(model="cached", input=question, tools=[WEATHER], temperature=0)
    gateway.settle()
    return first


def test_a_cache_hit_is_a_response_with_ids_of_its_own_as_json_and_as_a_stream(gateway):
    # Clients dedupe output items and pair tool outputs by their ids (msg_, fc_, rs_, call_): two responses that
    # share them are one response twice, to a client. OpenAI never gives two responses the same ids.
    client = gateway.openai()
    first = _first_answer_cached(gateway, "Weather in Paris, please?")
    raw = client.responses.with_raw_response.create(model="cached", input="Weather in Paris, please?", tools=[WEATHER],
                                                    temperature=0)
    assert raw.headers["x-slipstream-cache"] == "hit"
    again = raw.parse()
    with client.responses.with_streaming_response.create(model="cached", input="Weather in Paris, please?",
                                                         tools=[WEATHER], temperature=0, stream=True) as raw_stream:
        assert raw_stream.headers["x-slipstream-cache"] == "hit"
        events = list(raw_stream.parse())
    streamed = events[-1].response
    assert gateway.backend.bodies and len(gateway.backend.bodies) == 1  # both were served by the cache
    answers = (first, again, streamed)
    assert [[i.type for i in r.output] for r in answers] == [["reasoning", "message", "function_call"]] * 3
    assert streamed.output_text == again.output_text == first.output_text == "Let me look."
    assert len({i for r in answers for i in _ids(r)}) == 3 * len(_ids(first))  # no id shared by two responses
    # Every event of the replayed stream names the replay's own items.
    named = {e.item_id for e in events if hasattr(e, "item_id")} | {e.item.id for e in events if hasattr(e, "item")}
    assert named == {i.id for i in streamed.output}


def test_a_stored_cache_hit_is_retrieved_and_chained_by_its_own_ids_for_its_tenant_only(gateway):
    client = gateway.openai()
    first = _first_answer_cached(gateway, "Weather in Paris, now?")
    again = client.responses.create(model="cached", input="Weather in Paris, now?", tools=[WEATHER], temperature=0)
    stored = client.responses.retrieve(again.id)
    assert _ids(stored) == _ids(again) and _ids(client.responses.retrieve(first.id)) == _ids(first)
    assert not set(_ids(stored)) & set(_ids(first))
    with pytest.raises(openai.NotFoundError):
        gateway.openai(GLOBEX_KEY).responses.retrieve(again.id)
    # The client answers the call it saw, by the replay's call_id: the chain sends that call and its output.
    call = again.output[-1]
    gateway.backend.queue(Json({"role": "assistant", "content": "Sunny in Paris."}))
    follow = client.responses.create(model="tools", previous_response_id=again.id, tools=[WEATHER],
                                     input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
    assert follow.previous_response_id == again.id and follow.output_text == "Sunny in Paris."
    sent = gateway.backend.bodies[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["tool_calls"][0]["id"] == sent[2]["tool_call_id"] == call.call_id


# --- images in a function_call_output ----------------------------------------------------------------------

PIXEL = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
SCREENSHOT = {"type": "function", "name": "screenshot", "description": "A screenshot of a page.",
              "parameters": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}}


def _calls_then(outputs: list[dict]) -> list[dict]:
    return [{"role": "user", "content": "What do the two pages show?"},
            {"type": "function_call", "call_id": "call_a", "name": "screenshot", "arguments": '{"url": "a"}'},
            {"type": "function_call", "call_id": "call_b", "name": "screenshot", "arguments": '{"url": "b"}'},
            *outputs]


def test_a_tools_images_reach_a_chat_backend_in_a_user_message_after_the_tool_messages(gateway):
    # A chat `tool` message carries text only (OpenAI's chat API, vLLM and most backends refuse an image part
    # there): the tool's text stays in its tool message, and its images follow the run of tool messages in a
    # user message that names the call they came from, never dropped.
    gateway.backend.queue(Json({"role": "assistant", "content": "Page a shows a black pixel."}))
    r = gateway.openai().responses.create(model="tools", tools=[SCREENSHOT], input=_calls_then([
        {"type": "function_call_output", "call_id": "call_a",
         "output": [{"type": "input_text", "text": "Screenshot of a."}, {"type": "input_image", "image_url": PIXEL}]},
        {"type": "function_call_output", "call_id": "call_b", "output": "Page b did not load."},
        {"role": "user", "content": "Describe them."}]))
    assert r.status == "completed" and r.output_text == "Page a shows a black pixel."
    sent = gateway.backend.bodies[0]["messages"]
    # The images and the user's next words are one user turn (strict templates refuse two in a row: chat_turns).
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool", "user"]
    assert [m["tool_call_id"] for m in sent[2:4]] == ["call_a", "call_b"]
    assert {p["type"] for p in sent[2]["content"]} == {"text"} and sent[2]["content"][0]["text"] == "Screenshot of a."
    assert sent[3]["content"] == "Page b did not load."
    assert sent[4]["content"] == [{"type": "text", "text": "The image returned by tool call call_a:"},
                                  {"type": "image_url", "image_url": {"url": PIXEL}},
                                  {"type": "text", "text": "Describe them."}]


def test_images_that_end_the_input_follow_every_tool_message_of_the_turn(gateway):
    gateway.backend.queue(Chunks([{"role": "assistant", "content": "Two pixels."}]))
    image = {"type": "input_image", "image_url": PIXEL, "detail": "low"}
    with gateway.openai().responses.stream(model="tools", tools=[SCREENSHOT], input=_calls_then([
            {"type": "function_call_output", "call_id": "call_a", "output": [image]},
            {"type": "function_call_output", "call_id": "call_b", "output": [image, image]}])) as stream:
        assert stream.get_final_response().output_text == "Two pixels."
    sent = gateway.backend.bodies[0]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool", "user"]
    assert [[p["type"] for p in m["content"]] for m in sent[2:4]] == [["text"], ["text"]]  # what the images became
    picture = {"type": "image_url", "image_url": {"url": PIXEL, "detail": "low"}}
    assert sent[4]["content"] == [{"type": "text", "text": "The image returned by tool call call_a:"}, picture,
                                  {"type": "text", "text": "The images returned by tool call call_b:"}, picture, picture]


def test_a_file_in_a_function_call_output_is_refused_naming_it_as_a_file_in_a_user_turn_is(gateway):
    # A chat backend takes no file part in either place: refused in OpenAI's error shape, the backend never asked.
    with pytest.raises(openai.BadRequestError) as exc:
        gateway.openai().responses.create(model="tools", tools=[SCREENSHOT], input=_calls_then([
            {"type": "function_call_output", "call_id": "call_a", "output": [
                {"type": "input_text", "text": "Saved."}, {"type": "input_file", "file_url": "https://example.com/a.pdf"}]},
            {"type": "function_call_output", "call_id": "call_b", "output": "ok"}]))
    assert exc.value.body["param"] == "input[3].output[1].type" and exc.value.body["type"] == "invalid_request_error"
    assert gateway.backend.bodies == []


# --- a backend's malformed finish_reason ------------------------------------------------------------------------

@pytest.mark.parametrize("reason", [["stop"], {"type": "length"}, 7])
def test_a_finish_reason_that_is_not_a_string_still_ends_the_answer_as_completed(gateway, reason):
    # Servers have put a list or an object there: the answer ended, not cut, and it completes as it was said.
    gateway.backend.queue(Json({"role": "assistant", "content": "Sunny."}, reason),
                          Chunks([{"role": "assistant", "content": ""}, {"content": "Sunny."}], reason))
    client = gateway.openai()
    r = client.responses.create(model="tools", input="Weather in Paris?")
    assert (r.status, r.output_text) == ("completed", "Sunny.")
    events = list(client.responses.create(model="tools", input="Weather in Paris?", stream=True))
    assert events[-1].type == "response.completed" and events[-1].response.output_text == "Sunny."


# --- request fields with a chat meaning, or none to honour ------------------------------------------------------

def test_max_tool_calls_is_answered_since_it_caps_only_built_in_tools_which_never_reach_a_chat_backend(gateway):
    # OpenAI: "the maximum number of total calls to built-in tools". Hosted tools are refused over chat, so there
    # is nothing for it to cap: a 400 for it refused a request OpenAI answers (function tools are not counted).
    gateway.backend.queue(Json({"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]},
        "tool_calls"))
    r = gateway.openai().responses.create(model="tools", input="Weather in Paris?", tools=[WEATHER], max_tool_calls=1)
    assert [i.type for i in r.output] == ["function_call"]
    assert "max_tool_calls" not in gateway.backend.bodies[0]


@pytest.mark.parametrize("stream", [False, True])
def test_text_verbosity_reaches_a_chat_backend_as_chats_verbosity(gateway, stream):
    # openai-agents sends ModelSettings(verbosity=...) as text.verbosity; chat completions names it `verbosity`.
    # It changes the answer: dropped, the model answered at its default length without a word.
    class City(BaseModel):
        name: str

    client = gateway.openai()
    if stream:
        gateway.backend.queue(Chunks([{"role": "assistant", "content": '{"name": "Paris"}'}]))
        with client.responses.stream(model="tools", input="A city?", text_format=City, text={"verbosity": "low"}) as s:
            parsed = s.get_final_response().output_parsed
    else:
        gateway.backend.queue(Json({"role": "assistant", "content": '{"name": "Paris"}'}))
        parsed = client.responses.parse(model="tools", input="A city?", text_format=City,
                                        text={"verbosity": "low"}).output_parsed
    assert parsed == City(name="Paris")
    sent = gateway.backend.bodies[0]
    assert sent["verbosity"] == "low" and sent["response_format"]["json_schema"]["name"] == "City"


@pytest.mark.parametrize("stream", [False, True])
def test_the_answer_echoes_the_request_settings_openai_echoes(gateway, stream):
    # OpenAI's response object repeats these settings of the request (the SDK's Response fields): a client that
    # logs or checks them read null for what it had sent.
    asked = {"top_logprobs": 2, "max_tool_calls": 3, "safety_identifier": "user-7f3a", "prompt_cache_key": "forecasts",
             "prompt_cache_retention": "24h"}
    client = gateway.openai()
    if stream:
        gateway.backend.queue(Chunks([{"role": "assistant", "content": "Sunny."}]))
        events = list(client.responses.create(model="tools", input="Weather?", stream=True, **asked))
        answers = [events[0].response, events[-1].response]
    else:
        gateway.backend.queue(Json({"role": "assistant", "content": "Sunny."}))
        answers = [client.responses.create(model="tools", input="Weather?", **asked)]
    answers.append(client.responses.retrieve(answers[-1].id))
    for r in answers:
        assert {k: getattr(r, k) for k in asked} == asked and r.background is False


CLOCK = {"type": "function", "name": "clock", "description": "The time in a city.",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.mark.parametrize("mode", ["auto", "required"])
def test_allowed_tools_send_a_chat_backend_only_the_allowed_tools_with_the_mode_as_the_tool_choice(gateway, mode):
    # OpenAI's tool_choice {"type": "allowed_tools", "mode", "tools"}: the model may call only the named tools, the
    # request keeping its whole list. A chat backend knows no such choice: it is sent the allowed tools alone.
    gateway.backend.queue(Json({"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]},
        "tool_calls"))
    choice = {"type": "allowed_tools", "mode": mode, "tools": [{"type": "function", "name": "weather"}]}
    r = gateway.openai().responses.create(model="tools", input="Weather in Paris?", tools=[WEATHER, CLOCK],
                                          tool_choice=choice)
    assert [i.name for i in r.output] == ["weather"]
    assert r.tool_choice.type == "allowed_tools" and [t.name for t in r.tools] == ["weather", "clock"]
    sent = gateway.backend.bodies[0]
    assert [t["function"]["name"] for t in sent["tools"]] == ["weather"] and sent["tool_choice"] == mode


def test_allowed_tools_naming_a_tool_the_request_lacks_is_refused_naming_the_param(gateway):
    with pytest.raises(openai.BadRequestError) as err:
        gateway.openai().responses.create(model="tools", input="Time?", tools=[WEATHER], tool_choice={
            "type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "clock"}]})
    assert err.value.body["param"] == "tool_choice.tools" and gateway.backend.bodies == []



# --- earlier turns' reasoning ----------------------------------------------------------------------------------

def test_reasoning_items_given_back_reach_llama_cpp_as_their_turns_reasoning_content_and_no_other_backend(gateway):
    # llama.cpp's own /v1/responses sends a reasoning item back as reasoning_content on its turn's assistant message
    # (its chat template renders it; thinking models continue a tool loop from it). Its Responses are translated by
    # default, so the translation does the same for it; other chat backends take no reasoning back: left out.
    turn = [{"role": "user", "content": "Weather in Paris?"},
            {"type": "reasoning", "id": "rs_1", "summary": [],
             "content": [{"type": "reasoning_text", "text": "Paris: call weather."}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "weather",
             "arguments": '{"city": "Paris"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            {"type": "reasoning", "id": "rs_2", "summary": [{"type": "summary_text", "text": "Answer it."}],
             "content": [{"type": "reasoning_text", "text": "It is sunny: say so."}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sunny."}]},
            {"role": "user", "content": "And tomorrow?"}]
    gateway.backend.queue(Json({"role": "assistant", "content": "Also sunny."}),
                          Json({"role": "assistant", "content": "Also sunny."}))
    client = gateway.openai()
    for model in ("on-llama", "tools"):
        assert client.responses.create(model=model, input=turn, tools=[WEATHER]).output_text == "Also sunny."
    call = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}
    on_llama, on_tgi = (body["messages"] for body in gateway.backend.bodies)
    assert on_llama == [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "reasoning_content": "Paris: call weather.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "assistant", "content": "Sunny.", "reasoning_content": "It is sunny: say so."},
        {"role": "user", "content": "And tomorrow?"}]
    assert on_tgi == [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "assistant", "content": "Sunny."},
        {"role": "user", "content": "And tomorrow?"}]


def test_instructions_and_opening_developer_items_are_one_system_message_and_user_items_in_a_row_one_turn(gateway):
    # A coding agent opens with instructions, a developer message, then the user's words and its environment as two
    # user messages. Sent one message each, chat templates that require alternating roles refuse them: llama.cpp with
    # Gemma's template answers 400 to a second system (or developer) message and to two user messages in a row, and
    # 200 to the same words joined (checked on the real server, app/protocols/chat_turns.py).
    gateway.backend.queue(Json({"role": "assistant", "content": "Done."}))
    gateway.openai().responses.create(model="tools", instructions="You are a coding agent.", input=[
        {"role": "developer", "content": "Sandbox: read-only."},
        {"role": "user", "content": "Fix the bug."},
        {"role": "user", "content": [{"type": "input_text", "text": "<cwd>/repo</cwd>"}]},
        {"role": "assistant", "content": "Which bug?"},
        {"role": "developer", "content": "Answer briefly."},
        {"role": "user", "content": "The crash."}])
    assert gateway.backend.bodies[0]["messages"] == [
        {"role": "system", "content": "You are a coding agent.\n\nSandbox: read-only."},
        {"role": "user", "content": [{"type": "text", "text": "Fix the bug."}, {"type": "text", "text": "<cwd>/repo</cwd>"}]},
        {"role": "assistant", "content": "Which bug?"},
        {"role": "developer", "content": "Answer briefly."},  # within the conversation: its role as sent
        {"role": "user", "content": "The crash."}]
