"""Chat completions -> Responses, JSON and stream, checked against the openai SDK's own types (strict validation)."""

from __future__ import annotations

import orjson
import pydantic
from openai.types.responses import Response, ResponseStreamEvent

from app.protocols.responses.from_chat import ChatStreamTranslator, from_chat, shell

STREAM_EVENT = pydantic.TypeAdapter(ResponseStreamEvent)
BODY = {"model": "m", "input": "hi", "instructions": "be brief", "max_output_tokens": 20, "metadata": {"k": "v"}}


def events(raw: bytes) -> list[dict]:
    out = []
    for block in raw.split(b"\n\n"):
        if not block:
            continue
        name, data = block.split(b"\n")
        obj = orjson.loads(data.removeprefix(b"data: "))
        assert name == b"event: " + obj["type"].encode()
        out.append(obj)
    return out


def test_a_whole_answer_is_a_valid_response_with_usage():
    chat = {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Hello"}}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}}}
    out = from_chat(chat, shell("resp_1", "alias", BODY))
    r = Response.model_validate(out)
    assert r.output_text == "Hello" and r.status == "completed" and r.model == "alias"
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.input_tokens_details.cached_tokens) == (7, 2, 4)
    assert r.instructions == "be brief" and r.metadata == {"k": "v"} and r.max_output_tokens == 20


def test_a_length_stop_is_an_incomplete_response():
    chat = {"choices": [{"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": "Hel"}}]}
    r = Response.model_validate(from_chat(chat, shell("resp_1", "alias", BODY)))
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"


def test_tool_calls_become_function_call_items():
    chat = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": None,
            "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}]}}]}
    r = Response.model_validate(from_chat(chat, shell("resp_1", "alias", BODY)))
    (item,) = r.output
    assert (item.type, item.call_id, item.name, item.arguments) == ("function_call", "call_9", "f", '{"a":1}')


def stream(chunks: list[dict]) -> tuple[list[dict], ChatStreamTranslator]:
    t = ChatStreamTranslator(shell("resp_s", "alias", {**BODY, "stream": True}))
    raw = t.start() + b"".join(t.feed(c) for c in chunks) + t.finish()
    return events(raw), t


def delta(**d) -> dict:
    return {"choices": [{"index": 0, "delta": d, "finish_reason": None}]}


def test_a_text_stream_is_the_full_responses_event_sequence_each_valid():
    evs, t = stream([delta(role="assistant", content=""), delta(content="Hel"), delta(content="lo"),
                     {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                     {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}])
    for e in evs:
        STREAM_EVENT.validate_python(e)
    assert [e["type"] for e in evs] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.completed"]
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))
    done = evs[-1]["response"]
    assert done["output"][0]["content"][0]["text"] == "Hello"
    assert done["usage"]["input_tokens"] == 5 and done["usage"]["output_tokens"] == 2
    assert t.response is done or t.response == done


def test_streamed_tool_calls_arrive_as_argument_deltas_and_complete_items():
    evs, _ = stream([
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                            "function": {"name": "f", "arguments": ""}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ':1}'}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}])
    for e in evs:
        STREAM_EVENT.validate_python(e)
    types = [e["type"] for e in evs]
    assert types.count("response.function_call_arguments.delta") == 2
    item = evs[-1]["response"]["output"][0]
    assert (item["call_id"], item["name"], item["arguments"]) == ("call_1", "f", '{"a":1}')


def test_a_text_delta_from_the_template_is_the_event_a_dict_would_give():
    t = ChatStreamTranslator(shell("resp_t", "alias", BODY))
    t.start()
    raw = t.feed(delta(content='say "hi"\n'))
    ev = events(raw)[-1]
    assert ev == {"type": "response.output_text.delta", "item_id": ev["item_id"], "output_index": 0,
                  "content_index": 0, "delta": 'say "hi"\n', "logprobs": [], "sequence_number": 4}
    STREAM_EVENT.validate_python(ev)


def logprob(token: str, value: float, alternatives: int = 1) -> dict:
    return {"token": token, "logprob": value, "bytes": list(token.encode()),
            "top_logprobs": [{"token": token, "logprob": value, "bytes": list(token.encode())}][:alternatives]}


def test_the_chat_answers_logprobs_ride_on_its_output_text():
    # Asked for (top_logprobs, or include message.output_text.logprobs), they are the answer's: never dropped.
    lps = [logprob("Hel", -0.1), logprob("lo", -0.2)]
    chat = {"choices": [{"index": 0, "finish_reason": "stop", "logprobs": {"content": lps},
                         "message": {"role": "assistant", "content": "Hello"}}]}
    r = Response.model_validate(from_chat(chat, shell("resp_1", "alias", BODY)))
    assert [lp.model_dump() for lp in r.output[0].content[0].logprobs] == lps


def test_streamed_logprobs_ride_on_each_delta_and_the_finished_text():
    lps = [logprob("Hel", -0.1), logprob("lo", -0.2)]
    evs, _ = stream([{"choices": [{"index": 0, "delta": {"content": "Hel"}, "logprobs": {"content": lps[:1]},
                                   "finish_reason": None}]},
                     {"choices": [{"index": 0, "delta": {"content": "lo"}, "logprobs": {"content": lps[1:]},
                                   "finish_reason": None}]},
                     {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}])
    for e in evs:
        STREAM_EVENT.validate_python(e)
    assert [e["logprobs"] for e in evs if e["type"] == "response.output_text.delta"] == [lps[:1], lps[1:]]
    assert next(e for e in evs if e["type"] == "response.output_text.done")["logprobs"] == lps
    assert evs[-1]["response"]["output"][0]["content"][0]["logprobs"] == lps
