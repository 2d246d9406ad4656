"""/v1/responses through the gateway with the official openai SDK: passthrough to a backend that speaks Responses,
translation for a chat-only one; chaining, the stored responses' routes, and bad input."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from openai.types.responses import ResponseErrorEvent, ResponseInputMessageItem, ResponseOutputMessage

from tests.conftest import ACME_KEY, ADMIN_KEY, GLOBEX_KEY
from tests.protocols.responses.conftest import LIMITED_KEY
from tests.support import set_faults, sim_stats

MODELS = ["native", "translated"]


@pytest.fixture
def client(responses_gateway) -> openai.OpenAI:
    return responses_gateway.client()


@pytest.mark.parametrize("model", MODELS)
def test_create_answers_with_output_text_and_usage(client, model):
    r = client.responses.create(model=model, input="Say hello", instructions="be brief", max_output_tokens=50,
                                metadata={"run": "1"})
    assert r.status == "completed" and r.output_text and r.model == model
    assert r.usage.input_tokens > 0 and r.usage.output_tokens == 12
    assert r.id.startswith("resp")


@pytest.mark.parametrize("model", MODELS)
def test_a_stream_relays_every_event_and_completed_carries_usage(client, model):
    events = list(client.responses.create(model=model, input="Say hello", stream=True))
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert "response.output_text.delta" in types and "response.output_item.done" in types
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert final.output_text == text and final.usage.output_tokens == 12


@pytest.mark.parametrize("model", MODELS)
def test_the_sdk_stream_helper_assembles_the_final_response(client, model):
    with client.responses.stream(model=model, input="Say hello") as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert final.output_text and final.usage.total_tokens == final.usage.input_tokens + final.usage.output_tokens


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", [False, True])
def test_chaining_sends_the_earlier_turns_to_the_backend(client, model, stream):
    def ask(text: str, previous: str | None = None):
        if not stream:
            return client.responses.create(model=model, input=text, previous_response_id=previous)
        events = list(client.responses.create(model=model, input=text, previous_response_id=previous, stream=True))
        return events[-1].response

    first = ask("My name is Ada and I like long walks by the river.")
    alone = ask("What is my name?")
    chained = ask("What is my name?", first.id)
    # The backend counted the first turn's question and answer too: it reached the backend.
    assert chained.usage.input_tokens > alone.usage.input_tokens + first.usage.output_tokens
    # The answer names its predecessor, as OpenAI's does, from a native backend too (which never saw the id: the
    # gateway expanded the chain), and so does the stored turn.
    assert chained.previous_response_id == first.id and alone.previous_response_id is None
    assert client.responses.retrieve(chained.id).previous_response_id == first.id
    third = ask("And what do I like?", chained.id)
    assert third.usage.input_tokens > chained.usage.input_tokens + chained.usage.output_tokens


def test_a_stored_response_is_retrieved_listed_and_deleted(client):
    r = client.responses.create(model="translated", input="remember this")
    got = client.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text
    items = client.responses.input_items.list(r.id)
    assert [i.role for i in items.data] == ["user"] and items.data[0].type == "message"
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)


@pytest.mark.parametrize("model", MODELS)
def test_a_stored_response_retrieved_as_a_stream_is_its_whole_event_sequence(client, model):
    # The SDK's retrieve(stream=True) and responses.stream(response_id=...) read the response's events, from
    # `starting_after` on: a stored turn is a finished answer, so all of them. As JSON they read nothing, silently.
    r = client.responses.create(model=model, input="Say it again.")
    events = list(client.responses.retrieve(r.id, stream=True))
    assert [events[0].type, events[-1].type] == ["response.created", "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == r.output_text
    assert events[-1].response.id == r.id and events[-1].response.usage == r.usage
    later = list(client.responses.retrieve(r.id, stream=True, starting_after=2))
    assert [e.sequence_number for e in later] == list(range(3, len(events)))
    with client.responses.stream(response_id=r.id) as resumed:
        assert resumed.get_final_response().output_text == r.output_text
    with pytest.raises(openai.NotFoundError):
        list(client.responses.retrieve("resp_nope", stream=True))


def test_cancelling_a_stored_response_is_openais_refusal_of_a_synchronous_one(client):
    # Only background responses can be cancelled, and the gateway runs none: OpenAI's 400 for a finished
    # synchronous response (not a 404 'no route' for an id the client can still retrieve); an unknown id is a 404.
    r = client.responses.create(model="native", input="Done already.")
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.cancel(r.id)
    assert err.value.body["message"] == "Cannot cancel a synchronous response."
    assert err.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_nope")
    assert client.responses.retrieve(r.id).status == "completed"


def test_input_items_of_a_chained_turn_list_the_whole_chain(client):
    first = client.responses.create(model="native", input="one")
    second = client.responses.create(model="native", input="two", previous_response_id=first.id)
    items = client.responses.input_items.list(second.id, order="asc")
    assert [i.type for i in items.data] == ["message", "message", "message"]
    assert [getattr(i, "role", None) for i in items.data] == ["user", "assistant", "user"]


@pytest.mark.parametrize("model", MODELS)
def test_input_items_are_listed_as_the_sdks_item_types_with_their_text_as_parts(client, model):
    # OpenAI lists an easy message ("content": "text") as the message it stands for: content is a list of parts
    # (the SDK's ResponseInputMessageItem / ResponseOutputMessage), and every listed item has a status.
    first = client.responses.create(model=model, input="Hi, I am Ada.")
    r = client.responses.create(model=model, previous_response_id=first.id, input=[
        {"role": "assistant", "content": "You said so before."},
        {"role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
        {"role": "user", "content": "Who am I?"}])
    items = client.responses.input_items.list(r.id, order="asc").data
    assert [type(i) for i in items] == [ResponseInputMessageItem, ResponseOutputMessage, ResponseOutputMessage,
                                        ResponseInputMessageItem, ResponseInputMessageItem]
    assert [i.content[0].text for i in items] == [
        "Hi, I am Ada.", first.output_text, "You said so before.", "Be brief.", "Who am I?"]
    assert [i.content[0].type for i in items] == ["input_text", "output_text", "output_text", "input_text", "input_text"]
    assert all(i.status == "completed" for i in items)


def test_another_tenants_id_answers_exactly_as_an_unknown_one(responses_gateway):
    mine = responses_gateway.client(ACME_KEY).responses.create(model="native", input="secret")
    theirs = responses_gateway.client(GLOBEX_KEY)
    answers = []
    for rid in (mine.id, "resp_" + "0" * 32):
        for call, error in ((lambda r=rid: theirs.responses.retrieve(r), openai.NotFoundError),
                            (lambda r=rid: theirs.responses.create(model="native", input="x", previous_response_id=r),
                             openai.BadRequestError),
                            (lambda r=rid: theirs.responses.delete(r), openai.NotFoundError)):
            with pytest.raises(error) as err:
                call()
            answers.append(err.value.body["message"].replace(rid, "ID"))
    assert answers[:3] == answers[3:]
    responses_gateway.client(ACME_KEY).responses.retrieve(mine.id)  # still there for its owner


def test_store_false_keeps_nothing(client):
    r = client.responses.create(model="translated", input="forget me", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)


def test_function_tools_round_trip(client):
    tools = [{"type": "function", "name": "weather", "description": "weather in a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
    for model in MODELS:
        r = client.responses.create(model=model, input="weather in Paris?", tools=tools, tool_choice="auto")
        assert r.status == "completed"
        follow = client.responses.create(model=model, previous_response_id=r.id, tools=tools, input=[
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}])
        assert follow.status == "completed" and follow.usage.input_tokens > r.usage.input_tokens


def test_a_key_may_not_chain_into_a_model_it_may_not_use(responses_gateway):
    with pytest.raises(openai.PermissionDeniedError):
        responses_gateway.client(LIMITED_KEY).responses.create(model="native", input="x")


@pytest.mark.parametrize("body, param", [
    ({"model": "native"}, "input"),
    ({"model": "native", "input": 5}, "input"),
    ({"model": "native", "input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"model": "native", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": "native", "input": "x", "tools": [{"type": "function"}]}, "tools[0].name"),
    ({"model": "native", "input": "x", "truncation": "middle"}, "truncation"),
    # The Conversations API's server-held items: no backend behind the gateway holds them (vLLM and llama.cpp
    # ignore the field), so a native backend answered the turn without its history.
    ({"model": "native", "input": "x", "conversation": "conv_1"}, "conversation"),
    ({"model": "native", "input": "x", "conversation": {"id": "conv_1"}}, "conversation"),
    # A stored prompt template (its instructions and variables) lives at OpenAI; a native backend ignored it.
    ({"model": "native", "input": "x", "prompt": {"id": "pmpt_1", "variables": {"city": "Paris"}}}, "prompt"),
    ({"model": "native", "input": "x", "metadata": {"a": 1}}, "metadata.a"),
    ({"model": "translated", "input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"model": "translated", "input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
])
def test_bad_input_is_a_400_naming_the_param(responses_gateway, body, param):
    r = httpx.post(f"{responses_gateway.url}/v1/responses", json=body,
                   headers={"authorization": f"Bearer {ACME_KEY}"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", [False, True])
def test_a_chain_from_a_response_not_held_is_openais_400_previous_response_not_found(client, model, stream):
    # OpenAI answers a previous_response_id it does not hold (never made, made with store=false, deleted) with a
    # 400 invalid_request_error, code previous_response_not_found: clients key on it (Codex resends the whole
    # conversation without the id), where a 404 reads as a wrong URL. GET and DELETE of the id stay 404s.
    unstored = client.responses.create(model=model, input="forget me", store=False)
    deleted = client.responses.create(model=model, input="then delete me")
    client.responses.delete(deleted.id)
    for rid in ("resp_nope", unstored.id, deleted.id):
        with pytest.raises(openai.BadRequestError) as err:
            client.responses.create(model=model, input="and then?", previous_response_id=rid, stream=stream)
        assert err.value.status_code == 400
        assert err.value.body == {"message": f"Previous response with id '{rid}' not found.",
                                  "type": "invalid_request_error", "param": "previous_response_id",
                                  "code": "previous_response_not_found"}
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(rid)


def test_the_exact_cache_replays_a_stream_as_responses_events(client, responses_gateway):
    first = client.responses.create(model="cached", input="cache me", temperature=0)
    # The cache is written after the response, in the background: wait until the entry is stored.
    r = httpx.post(f"{responses_gateway.url}/admin/cache/flush", headers={"authorization": f"Bearer {ADMIN_KEY}"},
                   timeout=10)
    assert r.status_code == 200, r.text
    with client.responses.with_streaming_response.create(model="cached", input="cache me", temperature=0,
                                                         stream=True) as raw:
        assert raw.headers["x-slipstream-cache"] == "hit"  # no backend read it
        events = list(raw.parse())
    assert [e.type for e in events][-1] == "response.completed"
    assert events[-1].response.output_text == first.output_text
    assert events[-1].response.id != first.id  # a fresh id for the served-again answer
    # The replayed answer was stored too: it can be chained from.
    client.responses.create(model="cached", input="more", previous_response_id=events[-1].response.id)


def test_a_cache_hit_echoes_the_askers_own_metadata_and_user_never_the_first_callers(client, responses_gateway):
    # metadata, user, store and OpenAI's end-user fields (safety_identifier, prompt_cache_key and its retention)
    # are not in the cache key (they do not change the answer), so two end users of one tenant share the entry;
    # each must see its own in the response object (and its stored copy), never the other's.
    alice = client.responses.create(model="cached", input="echo probe", temperature=0, metadata={"who": "alice"},
                                    user="alice-1", safety_identifier="alice-sid", prompt_cache_key="alice-bucket",
                                    prompt_cache_retention="24h", store=False)
    assert (alice.safety_identifier, alice.prompt_cache_key) == ("alice-sid", "alice-bucket")
    r = httpx.post(f"{responses_gateway.url}/admin/cache/flush", headers={"authorization": f"Bearer {ADMIN_KEY}"},
                   timeout=10)
    assert r.status_code == 200, r.text
    bob = client.responses.with_raw_response.create(model="cached", input="echo probe", temperature=0,
                                                    metadata={"who": "bob"}, user="bob-2", safety_identifier="bob-sid",
                                                    prompt_cache_key="bob-bucket")
    assert bob.headers["x-slipstream-cache"] == "hit"
    answer = bob.parse()
    assert answer.output_text == alice.output_text
    assert answer.metadata == {"who": "bob"} and answer.user == "bob-2" and answer.store is True
    assert (answer.safety_identifier, answer.prompt_cache_key, answer.prompt_cache_retention) == ("bob-sid", "bob-bucket", None)
    stored = client.responses.retrieve(answer.id)
    assert stored.metadata == {"who": "bob"} and stored.user == "bob-2" and stored.safety_identifier == "bob-sid"
    final = list(client.responses.create(model="cached", input="echo probe", temperature=0, stream=True))[-1].response
    assert final.output_text == alice.output_text and final.metadata == {} and final.user is None
    assert final.safety_identifier is None and final.prompt_cache_key is None


def test_a_stream_cut_midway_ends_with_an_error_and_is_not_stored(responses_gateway, responses_fleet):
    port = responses_fleet.ports["flaky"]
    set_faults(port, disconnect_rate=1.0)
    try:
        client = responses_gateway.client()
        with pytest.raises(openai.APIError):
            for _ in client.responses.create(model="flaky", input="x" * 40, stream=True):
                pass
    finally:
        set_faults(port)


@pytest.mark.parametrize("model", ["flaky", "flaky-translated"])
def test_the_error_event_of_a_cut_stream_continues_the_sequence_numbers(responses_gateway, responses_fleet, model):
    # Read with the SDK's raw stream (its iterator raises at the error event, before a client could see it),
    # each event checked against the SDK's own event types: the error's number is the one after the last.
    port = responses_fleet.ports["flaky"]
    set_faults(port, disconnect_rate=1.0)
    try:
        client = responses_gateway.client()
        with client.responses.with_streaming_response.create(model=model, input="x" * 40, stream=True) as raw:
            events = [json.loads(line.removeprefix("data: ")) for line in raw.iter_lines() if line.startswith("data: ")]
    finally:
        set_faults(port)
    assert len(events) > 2 and events[-1]["type"] == "error"
    error = ResponseErrorEvent.model_validate(events[-1])
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert error.sequence_number == events[-2]["sequence_number"] + 1


def test_a_429_storm_reaches_the_client_as_a_rate_limit_error(responses_gateway, responses_fleet):
    port = responses_fleet.ports["flaky"]
    set_faults(port, rate_limit_rate=1.0, retry_after_s=0)
    try:
        with pytest.raises(openai.RateLimitError):
            responses_gateway.client().responses.create(model="flaky", input="x")
        assert sim_stats(port)["errors"] >= 1
    finally:
        set_faults(port)


@pytest.mark.parametrize("model", MODELS)
def test_an_answer_cut_by_max_output_tokens_is_incomplete(client, model):
    r = client.responses.create(model=model, input="Say hello", max_output_tokens=5)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 5


@pytest.mark.parametrize("model", MODELS)
def test_the_item_a_cut_fell_in_says_incomplete_wherever_a_client_reads_it(client, model):
    # OpenAI marks the message that max_output_tokens cut `incomplete` (ResponseOutputMessage.status), not only the
    # response: a client that reads the item (the SDK's output_item.done, a stored turn) must not take it as whole.
    r = client.responses.create(model=model, input="Say hello", max_output_tokens=5)
    assert r.status == "incomplete" and [(i.type, i.status) for i in r.output] == [("message", "incomplete")]
    assert [i.status for i in client.responses.retrieve(r.id).output] == ["incomplete"]
    events = list(client.responses.create(model=model, input="Say hello", max_output_tokens=5, stream=True))
    assert [e.item.status for e in events if e.type == "response.output_item.done"] == ["incomplete"]
    final = events[-1]
    assert final.type == "response.incomplete" and [i.status for i in final.response.output] == ["incomplete"]
    assert [i.status for i in client.responses.retrieve(final.response.id).output] == ["incomplete"]
    whole = client.responses.create(model=model, input="Say hello", max_output_tokens=50)
    assert whole.status == "completed" and [i.status for i in whole.output] == ["completed"]


@pytest.mark.parametrize("model", ["tiny", "tinychat"])
def test_a_chain_that_outgrows_the_context_is_context_length_exceeded_never_cut(client, model):
    previous, sizes = None, []
    with pytest.raises(openai.BadRequestError) as err:
        for _ in range(20):
            r = client.responses.create(model=model, input="Tell me more about the river " * 3, previous_response_id=previous)
            sizes.append(r.usage.input_tokens)
            previous = r.id
    assert err.value.code == "context_length_exceeded"
    assert sizes == sorted(sizes) and len(sizes) >= 2  # every turn that was answered carried the whole chain


@pytest.mark.parametrize("model", MODELS)
def test_truncation_auto_is_answered_and_echoed(client, model):
    # OpenAI acts on "auto" only when the input outgrows the context (openai-agents' ModelSettings sends it).
    r = client.responses.create(model=model, input="hello", truncation="auto")
    assert r.status == "completed" and r.truncation == "auto"


def test_truncation_auto_over_chat_never_cuts_a_chain_silently(client):
    # A chat backend has no such cut and the gateway makes none: the overflow is an error the client sees,
    # as with truncation disabled (a chain cut without a word would answer a conversation the user never had).
    previous = None
    with pytest.raises(openai.BadRequestError) as err:
        for _ in range(20):
            previous = client.responses.create(model="tinychat", input="Tell me more about the river " * 3,
                                               previous_response_id=previous, truncation="auto").id
    assert err.value.code == "context_length_exceeded"


def test_a_chain_that_outgrows_the_context_falls_back_where_configured(responses_gateway):
    client = responses_gateway.client()
    previous = None
    for _ in range(8):
        raw = client.responses.with_raw_response.create(model="tiny-fallback", input="Tell me more about the river " * 3,
                                                        previous_response_id=previous)
        previous = raw.parse().id
        if raw.headers.get("x-slipstream-fallback"):
            break
    assert raw.headers["x-slipstream-fallback"].startswith("native")
    assert raw.headers["x-slipstream-backend"] == "native"


@pytest.mark.parametrize("model", MODELS)
def test_every_lifecycle_event_of_a_chained_stream_names_the_previous_response(client, model):
    first = client.responses.create(model=model, input="one")
    events = list(client.responses.create(model=model, input="two", previous_response_id=first.id, store=False, stream=True))
    lifecycle = [e for e in events if hasattr(e, "response")]
    assert (lifecycle[0].type, lifecycle[-1].type) == ("response.created", "response.completed")
    assert {e.response.previous_response_id for e in lifecycle} == {first.id}
    assert [e.sequence_number for e in events] == list(range(len(events)))
