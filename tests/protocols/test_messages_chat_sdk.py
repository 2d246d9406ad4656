"""Anthropic's Messages API over chat-completions backends, as the official anthropic SDK sees it from a real gateway
process: the usage it reports, and what becomes of the request fields a chat backend has no place for. The
backends are loopback chat servers whose answers each test writes (tests/protocols/chat_backend.py)."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from app.admission.auth import hash_key
from tests.conftest import ACME_KEY, ADMIN_KEY, NO_BREAKER
from tests.protocols.chat_backend import ChatBackend, Chunks, Json
from tests.protocols.chat_gateway import ChatGateway, serve

ASK = [{"role": "user", "content": "Weather in Paris?"}]
IGNORED = "x-slipstream-ignored-fields"
SUNNY = {"role": "assistant", "content": "Sunny."}
USAGE = {"prompt_tokens": 42, "completion_tokens": 3, "total_tokens": 45}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    backend = ChatBackend().start()
    url = f"http://127.0.0.1:{backend.port}/v1"
    config = {
        "auth": {"mode": "keys", "clients": [{"tenant": "acme", "key_sha256": hash_key(ACME_KEY)}],
                 "admin_keys": [hash_key(ADMIN_KEY)]},  # for /admin/cache/flush
        # All speak chat completions only here (TGI's flavour does anyway; the others are told so): Messages is
        # translated for them. They differ in what the flavour lets the gateway ask of the server.
        "backends": {"tgi": {"base_url": url, "model": "m-scripted", "flavor": "tgi"},
                     "vllm": {"base_url": url, "model": "m-scripted", "flavor": "vllm", "apis": ["chat"]},
                     "openai": {"base_url": url, "model": "m-scripted", "flavor": "openai", "apis": ["chat"]}},
        "reliability": NO_BREAKER,
        "models": {**{name: {"backends": [name], "retry": {"max_attempts": 1}} for name in ("tgi", "vllm", "openai")},
                   "cached": {"backends": ["tgi"], "retry": {"max_attempts": 1},
                              "cache": {"exact": {"enabled": True, "ttl_s": 300}}}},
    }
    yield from serve(tmp_path_factory.mktemp("messages-chat-gw"), backend, config)


@pytest.fixture(autouse=True)
def _fresh(gateway):
    gateway.backend.answers.clear()
    gateway.backend.bodies.clear()


# --- usage ------------------------------------------------------------------------------------------------------

def _streamed(gateway: ChatGateway, alias: str) -> tuple[anthropic.types.Message, anthropic.types.Message]:
    """The message_start event's message and the SDK's final message of one streamed answer."""
    gateway.backend.queue(Chunks([{"role": "assistant", "content": ""}, {"content": "Sunny"}, {"content": "."}],
                                 usage=USAGE))
    with gateway.anthropic().messages.stream(model=alias, max_tokens=16, messages=ASK) as stream:
        start = next(e for e in stream if e.type == "message_start").message
        final = stream.get_final_message()
    return start, final


def test_a_backend_that_reports_the_prompt_on_its_first_chunk_has_message_start_say_it(gateway):
    # vLLM reports usage on every chunk, the first one included, when asked for continuous usage: the gateway asks
    # its vLLM backends, and message_start carries the prompt's count as Anthropic's does (it said 0 before).
    start, final = _streamed(gateway, "vllm")
    assert gateway.backend.bodies[0]["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert start.usage.input_tokens == 42
    assert (final.usage.input_tokens, final.usage.output_tokens) == (42, 3)


def test_a_backend_that_reports_usage_at_the_end_only_has_the_final_message_right(gateway):
    # TGI, llama.cpp and OpenAI say nothing of the prompt before their last chunk. message_start says 0 then (no
    # estimate passed off as the backend's count), and message_delta's usage, which the SDK's accumulator takes
    # over message_start's, gives the final message the true count.
    start, final = _streamed(gateway, "tgi")
    assert gateway.backend.bodies[0]["stream_options"] == {"include_usage": True}
    assert start.usage.input_tokens == 0
    assert (final.usage.input_tokens, final.usage.output_tokens) == (42, 3)


def test_a_whole_answer_reports_the_prompt(gateway):
    gateway.backend.queue(Json({"role": "assistant", "content": "Sunny."}, usage=USAGE))
    message = gateway.anthropic().messages.create(model="tgi", max_tokens=16, messages=ASK)
    assert (message.usage.input_tokens, message.usage.output_tokens) == (42, 3)


# --- request ids ---------------------------------------------------------------------------------------------------

def test_the_sdk_reads_the_gateways_request_id_on_answers_streams_and_errors(gateway):
    # The anthropic SDK reads a call's id from Anthropic's request-id header (message._request_id, a stream's
    # request_id, an error's request_id): what users log and quote. The gateway names each call in x-request-id
    # (OpenAI's header), and the SDK found nothing there.
    gateway.backend.queue(Json(SUNNY), Chunks([{"role": "assistant", "content": "Sunny."}]))
    client = gateway.anthropic()
    raw = client.messages.with_raw_response.create(model="tgi", max_tokens=16, messages=ASK)
    assert raw.parse()._request_id == raw.headers["x-request-id"]
    with client.messages.stream(model="tgi", max_tokens=16, messages=ASK) as stream:
        stream.get_final_message()
        assert stream.request_id == stream.response.headers["x-request-id"]
    with pytest.raises(anthropic.NotFoundError) as exc:
        client.messages.create(model="no-such-alias", max_tokens=16, messages=ASK)
    assert exc.value.request_id == exc.value.response.headers["x-request-id"]
    assert len({raw.headers["x-request-id"], stream.request_id, exc.value.request_id}) == 3


# --- request fields a chat backend has no place for ----------------------------------------------------------------
# Each is mapped where chat has the same knob, refused where ignoring it would change the answer the client relies
# on, and otherwise accepted and named in the answer's x-slipstream-ignored-fields header: never dropped unseen.

def _create(gateway: ChatGateway, alias: str, **fields) -> tuple[anthropic.types.Message, str | None, dict]:
    """One whole answer: the message, the ignored-fields header, and the body the chat backend received."""
    gateway.backend.queue(Json(SUNNY))
    raw = gateway.anthropic().messages.with_raw_response.create(model=alias, max_tokens=16, messages=ASK, **fields)
    return raw.parse(), raw.headers.get(IGNORED), gateway.backend.bodies[-1]


@pytest.mark.parametrize(("alias", "asked", "sent"), [
    ("openai", "max", "max"),  # OpenAI's reasoning_effort takes Anthropic's five values
    ("openai", "low", "low"),
    ("vllm", "max", "high"),  # self-hosted servers know low / medium / high: the most they give
    ("vllm", "xhigh", "high"),
    ("vllm", "medium", "medium"),
])
def test_effort_is_chats_reasoning_effort(gateway, alias, asked, sent):
    # Dropped, a client asking for the most (or least) reasoning got the server's default without a word.
    _, ignored, body = _create(gateway, alias, output_config={"effort": asked})
    assert body["reasoning_effort"] == sent
    assert ignored is None


def test_effort_where_the_server_has_no_such_knob_is_named_as_ignored(gateway):
    # TGI reads no reasoning effort (and ignores fields it does not know): not sent, and the answer says so.
    _, ignored, body = _create(gateway, "tgi", output_config={"effort": "high"})
    assert "reasoning_effort" not in body
    assert ignored == "output_config.effort"


@pytest.mark.parametrize(("alias", "field"), [("openai", "max_completion_tokens"), ("vllm", "max_tokens"),
                                              ("tgi", "max_tokens")])
def test_the_output_cap_reaches_openai_as_max_completion_tokens(gateway, alias, field):
    # OpenAI's reasoning models (o-series, gpt-5) refuse max_tokens ("Unsupported parameter: 'max_tokens' is not
    # supported with this model. Use 'max_completion_tokens' instead.", a 400 for every Anthropic call to such a
    # model); max_completion_tokens is its replacement, which every OpenAI chat model takes. Self-hosted servers
    # keep max_tokens, the field they all read. count_tokens' one-token call likewise.
    _, _, body = _create(gateway, alias)
    assert body[field] == 16
    assert {"max_tokens", "max_completion_tokens"} - {field} & body.keys() == set()
    gateway.backend.queue(Json(SUNNY))
    gateway.anthropic().messages.count_tokens(model=alias, messages=ASK)
    assert gateway.backend.bodies[-1][field] == 1


FIVE_STOPS = ["END", "STOP", "DONE", "FIN", "###"]


def test_more_than_four_stop_sequences_reach_a_server_that_takes_them(gateway):
    # Anthropic takes many stop sequences, and so do vLLM and llama.cpp; only OpenAI's chat API (and TGI by default)
    # stops at 4. A fifth was refused with a 400 on every alias, a server that would honour it included.
    message, ignored, body = _create(gateway, "vllm", stop_sequences=FIVE_STOPS)
    assert message.content[0].text == "Sunny."  # type: ignore[union-attr]
    assert body["stop"] == FIVE_STOPS
    assert ignored is None


def test_an_empty_stop_sequence_is_refused_in_anthropics_words(gateway):
    # Every answer contains the empty string: llama.cpp (checked on the real server, chat and Messages alike) and vLLM
    # stop at once and answer nothing, a 200 with no words. Anthropic refuses the request instead.
    with pytest.raises(anthropic.BadRequestError) as exc:
        gateway.anthropic().messages.create(model="vllm", max_tokens=16, messages=ASK, stop_sequences=["END", ""])
    assert exc.value.body == {"type": "error", "error": {  # type: ignore[comparison-overlap]
        "type": "invalid_request_error", "message": "stop_sequences: each stop sequence must be non-empty"}}
    assert gateway.backend.bodies == []


@pytest.mark.parametrize("alias", ["openai", "tgi"])
def test_more_than_four_stop_sequences_are_refused_naming_them_where_the_server_takes_four(gateway, alias):
    with pytest.raises(anthropic.BadRequestError) as exc:
        gateway.anthropic().messages.create(model=alias, max_tokens=16, messages=ASK, stop_sequences=FIVE_STOPS)
    assert exc.value.body["error"]["message"].startswith("stop_sequences: at most 4")  # type: ignore[index]
    assert gateway.backend.bodies == []


@pytest.mark.parametrize(("alias", "sent"), [("vllm", True), ("openai", False), ("tgi", False)])
def test_top_k_reaches_only_servers_that_sample_by_it_and_is_named_where_it_does_not(gateway, alias, sent):
    # OpenAI's chat API refuses top_k ("Unrecognized request argument supplied: top_k", a 400 the client got for a
    # sampling hint), and TGI's reads no such field; vLLM and llama.cpp sample by it. (The SDK has no top_k argument
    # any more: clients that still send it do so in the body.)
    message, ignored, body = _create(gateway, alias, extra_body={"top_k": 5})
    assert message.content[0].text == "Sunny."  # type: ignore[union-attr]
    assert body.get("top_k") == (5 if sent else None)
    assert ignored == (None if sent else "top_k")


@pytest.mark.parametrize(("fields", "tier"), [
    ({"service_tier": "standard_only"}, "default"),  # standard capacity, in OpenAI's word
    ({"service_tier": "auto"}, "auto"),
    ({"speed": "fast"}, "fast"),  # OpenAI's fast mode
    ({"speed": "standard"}, None),
])
def test_service_tier_and_speed_reach_the_hosted_openai_api_as_its_service_tier(gateway, fields, tier):
    _, ignored, body = _create(gateway, "openai", **fields)
    assert body.get("service_tier") == tier
    assert ignored is None


def test_service_tier_and_speed_on_a_self_hosted_server_are_accepted_and_named(gateway):
    # vLLM has no capacity tiers nor a fast mode: nothing to ask of it, and the answer says what it did not honour.
    message, ignored, body = _create(gateway, "vllm", service_tier="standard_only", speed="fast")
    assert message.content[0].text == "Sunny."  # type: ignore[union-attr]
    assert "service_tier" not in body and "speed" not in body
    assert ignored == "service_tier, speed"


def test_hints_with_no_chat_meaning_are_answered_and_named_in_a_whole_answer_and_a_stream(gateway):
    # A prompt-cache marker, a cache-miss diagnostic and where Anthropic would run inference change nothing in the
    # answer: accepted, named, and the backend sees none of them.
    hints = {"diagnostics": {"previous_message_id": None}, "inference_geo": "us",
             "messages": [{"role": "user", "content": [{"type": "text", "text": "Weather in Paris?",
                                                        "cache_control": {"type": "ephemeral"}}]}]}
    gateway.backend.queue(Json(SUNNY), Chunks([{"role": "assistant", "content": "Sunny."}]))
    client = gateway.anthropic()
    raw = client.messages.with_raw_response.create(model="tgi", max_tokens=16, **hints)  # type: ignore[arg-type]
    with client.messages.stream(model="tgi", max_tokens=16, **hints) as stream:  # type: ignore[arg-type]
        streamed = stream.get_final_message()
        stream_ignored = stream.response.headers.get(IGNORED)
    assert raw.parse().content[0].text == streamed.content[0].text == "Sunny."  # type: ignore[union-attr]
    assert raw.headers.get(IGNORED) == stream_ignored == "diagnostics, inference_geo, cache_control"
    for body in gateway.backend.bodies:
        assert not {"diagnostics", "inference_geo", "cache_control"} & body.keys()
        assert "cache_control" not in str(body["messages"])


def test_a_tools_fields_with_no_function_equivalent_are_named(gateway):
    # A chat function has a name, a description, parameters and strict. Anthropic's tool examples (shown to the
    # model), deferred loading, eager input streaming and callers reach no chat backend: the answer says so, once
    # per field, instead of dropping them unseen.
    weather = {"name": "weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
               "input_examples": [{"city": "Paris"}], "defer_loading": True, "eager_input_streaming": True}
    lookup = {"name": "lookup", "input_schema": {"type": "object"}, "input_examples": [{}],
              "allowed_callers": ["direct"], "description": "Look it up.", "strict": True}
    _, ignored, body = _create(gateway, "vllm", tools=[weather, lookup])
    assert [t["function"] for t in body["tools"]] == [
        {"name": "weather", "parameters": weather["input_schema"]},
        {"name": "lookup", "parameters": {"type": "object"}, "description": "Look it up.", "strict": True}]
    assert ignored == "tools.input_examples, tools.defer_loading, tools.eager_input_streaming, tools.allowed_callers"


def test_context_management_from_the_beta_api_is_accepted_and_named(gateway):
    # Claude Code sends clear_thinking with thinking on. Its edits only shorten what the model reads; unapplied, the
    # model reads the conversation as sent (and over chat earlier thinking is dropped anyway).
    gateway.backend.queue(Json(SUNNY))
    raw = gateway.anthropic().beta.messages.with_raw_response.create(
        model="tgi", max_tokens=2048, messages=ASK, thinking={"type": "enabled", "budget_tokens": 1024},
        context_management={"edits": [{"type": "clear_thinking_20251015", "keep": "all"},
                                      {"type": "clear_tool_uses_20250919"}]},
        betas=["context-management-2025-06-27"])
    assert raw.parse().content[-1].text == "Sunny."  # type: ignore[union-attr]
    assert raw.headers.get(IGNORED) == "context_management"
    assert "context_management" not in gateway.backend.bodies[0]


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_from_the_cache_names_what_the_answer_it_replays_ignored(gateway, stream):
    # The cached answer is the one the backend gave without honouring these fields: served again, it says so again,
    # as the miss did (a hit said nothing, as if every field had been honoured). Stored from a whole answer and from
    # a stream, served again the same way.
    ask = [{"role": "user", "content": f"Weather in Paris? ({'streamed' if stream else 'whole'})"}]  # its own entry
    hints = {"model": "cached", "max_tokens": 16, "messages": ask, "inference_geo": "us",
             "extra_body": {"temperature": 0}}  # only a deterministic answer is cached
    gateway.backend.queue(Chunks([{"role": "assistant", "content": "Sunny."}]) if stream else Json(SUNNY))
    client = gateway.anthropic()

    def answer() -> tuple[anthropic.types.Message, httpx.Headers]:
        if stream:
            with client.messages.stream(**hints) as events:  # type: ignore[arg-type]
                return events.get_final_message(), events.response.headers
        raw = client.messages.with_raw_response.create(**hints)  # type: ignore[arg-type]
        return raw.parse(), raw.headers

    _, miss = answer()
    gateway.settle()
    hit, again = answer()
    assert len(gateway.backend.bodies) == 1
    assert (miss["x-slipstream-cache"], again["x-slipstream-cache"]) == ("miss", "hit")
    assert hit.content[0].text == "Sunny."  # type: ignore[union-attr]
    assert again.get(IGNORED) == miss.get(IGNORED) == "inference_geo"


def test_consecutive_turns_of_one_role_reach_a_chat_backend_as_one_message(gateway):
    # Anthropic combines consecutive user (or assistant) turns into one. Sent as they came, two user messages in a row
    # are refused by chat templates that require the roles to alternate (Gemma's, Mistral's): llama.cpp with Gemma's
    # template answers 400 "Conversation roles must alternate" (checked on the real server), and takes the same words
    # as one message of two text parts. An assistant turn of thinking alone (earlier turns' thinking is not sent to a
    # chat backend) leaves two user turns side by side the same way.
    gateway.backend.queue(Json(SUNNY))
    gateway.anthropic().messages.create(model="vllm", max_tokens=16, messages=[
        {"role": "user", "content": "Weather in Paris?"}, {"role": "user", "content": "And in Lyon?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "Two cities.", "signature": ""}]},
        {"role": "user", "content": [{"type": "text", "text": "Celsius, please."}]}])
    assert gateway.backend.bodies[0]["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "Weather in Paris?"}, {"type": "text", "text": "And in Lyon?"},
        {"type": "text", "text": "Celsius, please."}]}]


PREFILLED = [{"role": "user", "content": "Weather in Paris, as JSON?"}, {"role": "assistant", "content": '{"sky": "'}]


def test_a_final_assistant_turn_is_continued_by_vllm_not_answered_anew(gateway):
    # Anthropic continues a final assistant turn (a prefill) and answers only what follows it. vLLM renders the chat
    # with a fresh assistant header after it unless asked to continue the final message instead (its
    # continue_final_message, which needs add_generation_prompt off): unasked, the model began a turn of its own.
    gateway.backend.queue(Json({"role": "assistant", "content": 'sunny"}'}))
    message = gateway.anthropic().messages.create(model="vllm", max_tokens=16, messages=PREFILLED)
    assert message.content[0].text == 'sunny"}'  # type: ignore[union-attr]
    body = gateway.backend.bodies[0]
    assert body["messages"][-1] == PREFILLED[-1]
    assert (body["continue_final_message"], body["add_generation_prompt"]) == (True, False)


def test_only_a_final_assistant_turn_with_words_in_it_is_a_prefill(gateway):
    # A last turn from the user is answered as always; an empty final assistant turn (Anthropic allows one) prefills
    # nothing, and vLLM would refuse to continue a message that is not there: it is left out.
    gateway.backend.queue(Json(SUNNY), Json(SUNNY))
    client = gateway.anthropic()
    client.messages.create(model="vllm", max_tokens=16, messages=ASK)
    client.messages.create(model="vllm", max_tokens=16, messages=[*ASK, {"role": "assistant", "content": ""}])
    for body in gateway.backend.bodies:
        assert body["messages"] == ASK
        assert "continue_final_message" not in body and "add_generation_prompt" not in body


def test_a_request_with_nothing_ignored_says_nothing(gateway):
    _, ignored, _ = _create(gateway, "vllm", metadata={"user_id": "u-1"})
    assert ignored is None
    assert gateway.backend.bodies[0]["user"] == "u-1"


def test_a_compaction_request_is_refused_naming_it(gateway):
    # A compaction request's answer is a summary block that later requests send in place of the history; a chat
    # backend would answer the conversation instead, which the client would then send back as its summary.
    with pytest.raises(anthropic.BadRequestError) as exc:
        gateway.anthropic().beta.messages.create(model="tgi", max_tokens=64, messages=ASK,
                                                 compaction={"type": "summarize"}, betas=["compact-2026-01-12"])
    assert exc.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert "compaction" in exc.value.message
    assert gateway.backend.bodies == []


def test_thinking_asked_for_with_its_display_omitted_leaves_the_reasoning_out(gateway):
    # display: omitted asks for the answer without the thinking's text; relayed, the reasoning was shown anyway.
    gateway.backend.queue(Json({"role": "assistant", "reasoning_content": "Let me think.", "content": "Sunny."}))
    message = gateway.anthropic().messages.create(model="vllm", max_tokens=2048, messages=ASK,
                                                  thinking={"type": "enabled", "budget_tokens": 1024,
                                                            "display": "omitted"})
    assert [b.type for b in message.content] == ["text"]
