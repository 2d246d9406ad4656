"""Messages through the real pipeline over the scripted transport (app.upstream.scripted: no sockets):
passthrough versus translation per backend, header passthrough, the exact cache replayed as Anthropic's
events, streams that break midway, retries and tenant limits with Anthropic's headers."""

from __future__ import annotations

import orjson

from app.admission.auth import hash_key
from app.config import GatewayConfig
from app.errors import UpstreamUnreachable
from app.protocols import MESSAGES
from app.upstream.scripted import Fail, Reply, ScriptedTransport, Stream, chunks, completion
from app.upstream.sse import EventSplitter, event_data
from tests.scripted import KEY, call, run

ASK = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
HEADERS = {"anthropic-version": "2023-06-01", "anthropic-beta": "tools-2024-04-04"}

NATIVE = [
    {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [],
                                          "model": "backend-path.gguf", "stop_reason": None, "stop_sequence": None,
                                          "usage": {"input_tokens": 7, "cache_read_input_tokens": 2,
                                                    "output_tokens": 0}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm"}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "c2ln"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hello"}},
    {"type": "content_block_stop", "index": 1},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
     "usage": {"output_tokens": 5}},
    {"type": "message_stop"},
]


def config(flavor: str = "llamacpp", **sections) -> GatewayConfig:
    raw = {
        "auth": {"mode": "keys", "clients": [{"tenant": "acme", "key_sha256": hash_key(KEY)}]},
        "backends": {n: {"base_url": f"http://127.0.0.1:9/{n}/v1", "model": f"m-{n}", "flavor": flavor}
                     for n in ("a", "b")},
        "models": {"m": {"backends": ["a", "b"], "strategy": "round_robin"}},
        "reliability": {"breaker": {"consecutive_failures": 100, "error_rate": 1.0, "min_requests": 1000}},
        **sections,
    }
    return GatewayConfig.model_validate(raw)


def named(body: bytes) -> list[tuple[str, dict]]:
    out = []
    for raw in EventSplitter().feed(body):
        name = raw.split(b"\n", 1)[0].removeprefix(b"event: ").decode()
        out.append((name, orjson.loads(event_data(raw))))
    return out


def test_a_native_backend_gets_the_body_unchanged_but_model_and_the_anthropic_headers():
    transport = ScriptedTransport([Reply({"id": "msg_1", "type": "message", "role": "assistant", "model": "x",
                                          "content": [{"type": "text", "text": "Hi"}], "stop_reason": "end_turn",
                                          "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 1}})])
    body = {**ASK, "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}], "top_k": 5}

    async def scenario(gw):
        return await call(gw, body, endpoint=MESSAGES, headers=HEADERS)

    answer = run(config(), transport, scenario)
    assert answer.status == 200 and answer.json()["model"] == "m"
    sent = transport.calls[0]
    assert sent.path == "messages" and sent.body == {**body, "model": sent.body["model"]}
    assert sent.body["model"] in ("m-a", "m-b")
    assert sent.headers["anthropic-version"] == "2023-06-01" and sent.headers["anthropic-beta"] == "tools-2024-04-04"


def test_a_chat_only_backend_gets_chat_completions_and_no_anthropic_headers():
    transport = ScriptedTransport([Reply(completion("Hello"))])

    async def scenario(gw):
        return await call(gw, ASK, endpoint=MESSAGES, headers=HEADERS)

    answer = run(config(flavor="tgi"), transport, scenario)
    assert answer.json()["content"] == [{"type": "text", "text": "Hello"}]
    assert answer.json()["usage"]["input_tokens"] == 3
    sent = transport.calls[0]
    assert sent.path == "chat/completions" and "anthropic-version" not in sent.headers
    assert sent.body["messages"] == [{"role": "user", "content": "hi"}] and sent.body["max_tokens"] == 16


def test_a_native_stream_is_relayed_event_by_event_thinking_included():
    transport = ScriptedTransport([Stream(NATIVE, done=False)])

    async def scenario(gw):
        return await call(gw, {**ASK, "stream": True}, endpoint=MESSAGES)

    answer = run(config(), transport, scenario)
    events = named(answer.body)
    assert [n for n, _ in events] == [e["type"] for e in NATIVE]
    assert all(n == data["type"] for n, data in events)
    assert events[0][1]["message"]["model"] == "m"  # the alias, not the backend's name
    assert events[2][1] == NATIVE[2] and events[3][1] == NATIVE[3]  # thinking and its signature, unchanged


def test_a_native_stream_cut_midway_ends_with_an_anthropic_error_event():
    transport = ScriptedTransport([Stream(NATIVE[:7], cut=True)])

    async def scenario(gw):
        return await call(gw, {**ASK, "stream": True}, endpoint=MESSAGES)

    events = named(run(config(), transport, scenario).body)
    assert [n for n, _ in events][:7] == [e["type"] for e in NATIVE[:7]]
    name, data = events[-1]
    assert name == "error" and data["type"] == "error" and data["error"]["type"] in ("api_error", "overloaded_error")
    assert "message_stop" not in [n for n, _ in events]


def test_a_translated_stream_cut_midway_ends_with_an_anthropic_error_event():
    transport = ScriptedTransport([Stream(chunks("Hello")[:3], cut=True)])

    async def scenario(gw):
        return await call(gw, {**ASK, "stream": True}, endpoint=MESSAGES)

    events = named(run(config(flavor="tgi"), transport, scenario).body)
    assert events[0][0] == "message_start" and events[-1][0] == "error"
    assert "message_stop" not in [n for n, _ in events]


def test_the_exact_cache_replays_a_message_as_anthropics_event_sequence():
    transport = ScriptedTransport([Stream(NATIVE, done=False)])
    ask = {**ASK, "temperature": 0, "stream": True}

    async def scenario(gw):
        first = await call(gw, ask, endpoint=MESSAGES)
        await gw.cache.flush()
        return first, await call(gw, ask, endpoint=MESSAGES)

    first, second = run(config(), transport, scenario)
    assert first.headers["x-slipstream-cache"] == "miss"
    assert second.headers["x-slipstream-cache"] == "hit" and len(transport.calls) == 1
    names = [n for n, _ in named(second.body)]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    start = named(second.body)[0][1]["message"]
    assert start["id"].startswith("msg_cache_") and start["model"] == "m"
    blocks = [d["content_block"]["type"] for n, d in named(second.body) if n == "content_block_start"]
    assert blocks == ["thinking", "text"]
    final = named(second.body)[-2][1]
    assert final["usage"]["cache_read_input_tokens"] == 9 and final["usage"]["input_tokens"] == 0


def test_a_failed_attempt_is_retried_on_the_other_backend():
    transport = ScriptedTransport([Fail(UpstreamUnreachable("down")), Reply(completion("ok"))])

    async def scenario(gw):
        return await call(gw, ASK, endpoint=MESSAGES)

    answer = run(config(flavor="tgi"), transport, scenario)
    assert answer.status == 200 and answer.json()["content"][0]["text"] == "ok"
    assert answer.headers["x-slipstream-attempts"] == "2"
    assert transport.calls[0].backend != transport.calls[1].backend


def test_a_tenant_over_its_limit_gets_anthropics_429_with_its_headers():
    transport = ScriptedTransport(lambda backend, n: Reply(completion("ok")))
    limits = {"limits": {"tenants": {"acme": {"limits": {"requests_per_minute": 1}}}}}

    async def scenario(gw):
        return [await call(gw, ASK, endpoint=MESSAGES) for _ in range(2)]

    ok, limited = run(config(flavor="tgi", **limits), transport, scenario)
    assert ok.status == 200 and ok.headers["anthropic-ratelimit-requests-limit"] == "1"
    assert ok.headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert limited.status == 429 and int(limited.headers["retry-after"]) >= 1
    assert limited.json()["type"] == "error" and limited.json()["error"]["type"] == "rate_limit_error"
    assert limited.headers["anthropic-ratelimit-requests-reset"].endswith("Z")
    assert not any(k.startswith("x-ratelimit-") for k in limited.headers)


def test_ttft_is_the_first_content_delta_not_message_start():
    # message_start, then the text block's start and its first delta 0.1 s apart each: TTFT at the delta.
    transport = ScriptedTransport([Stream(NATIVE[:1] + NATIVE[5:], gap_s=0.1, done=False)])

    async def scenario(gw):
        answer = await call(gw, {**ASK, "stream": True}, endpoint=MESSAGES)
        return answer, gw.telemetry.metrics.render().decode()

    answer, metrics = run(config(), transport, scenario)
    assert named(answer.body)[-1][0] == "message_stop"
    line = next(x for x in metrics.splitlines() if x.startswith("gen_ai_server_time_to_first_token_seconds_sum{"))
    assert 'gen_ai_operation_name="chat"' in line and float(line.rsplit(" ", 1)[1]) >= 0.19


def test_a_late_stream_is_hedged_and_the_hedge_answers_in_anthropics_events():
    slow, fast = Stream(chunks("slow"), delay_s=1.0), Stream(chunks("fast"))
    transport = ScriptedTransport(lambda backend, n: slow if n == 0 else fast)
    cfg = config(flavor="tgi", models={"m": {"backends": ["a", "b"], "hedge": {
        "enabled": True, "min_delay_ms": 50, "after_factor": 1, "budget_ratio": 1.0}}})

    async def scenario(gw):
        return await call(gw, {**ASK, "stream": True}, endpoint=MESSAGES)

    answer = run(cfg, transport, scenario)
    events = named(answer.body)
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert text == "fast" and events[-1][0] == "message_stop"
    assert len(transport.calls) == 2 and transport.calls[0].backend != transport.calls[1].backend


# OpenAI (and vLLM) end a call forced by a named tool choice with finish_reason "stop", not "tool_calls".
FORCED_CALL = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}}
FORCE_TOOL = {**ASK, "tools": [{"name": "weather", "input_schema": {"type": "object"}}],
              "tool_choice": {"type": "tool", "name": "weather"}}


def test_a_forced_tool_call_that_a_chat_backend_ends_with_stop_is_a_tool_use_stop():
    # Anthropic's stop_reason is tool_use whenever the answer ends in a tool call: a client's agent loop
    # runs the tool on that reason, and would take end_turn for the final answer.
    answer = completion("")
    answer["choices"][0]["message"] = {"role": "assistant", "content": None, "tool_calls": [FORCED_CALL]}
    transport = ScriptedTransport([Reply(answer)])

    async def scenario(gw):
        return await call(gw, FORCE_TOOL, endpoint=MESSAGES)

    message = run(config(flavor="tgi"), transport, scenario).json()
    assert transport.calls[0].body["tool_choice"] == {"type": "function", "function": {"name": "weather"}}
    assert message["content"] == [{"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Oslo"}}]
    assert message["stop_reason"] == "tool_use"


def test_a_forced_tool_call_streamed_and_ended_with_stop_is_a_tool_use_stop():
    head = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    events = [{**head, "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, **FORCED_CALL}]},
                                    "finish_reason": None}]},
              {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
    transport = ScriptedTransport([Stream(events)])

    async def scenario(gw):
        return await call(gw, {**FORCE_TOOL, "stream": True}, endpoint=MESSAGES)

    events_out = named(run(config(flavor="tgi"), transport, scenario).body)
    delta = next(d for n, d in events_out if n == "message_delta")
    assert [n for n, _ in events_out][-1] == "message_stop"
    assert delta["delta"]["stop_reason"] == "tool_use"


def test_a_prompt_too_long_for_the_model_says_so_in_anthropics_words_on_both_paths():
    # Anthropic's shape has no error code: "prompt is too long" is how its clients (Claude Code's auto-compact
    # among them) tell a context overflow from any other 400. The backend's own wording follows it.
    llamacpp = {"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it",
                          "type": "exceed_context_size_error"}}
    for flavor in ("llamacpp", "tgi"):  # native Messages, then translated to chat
        transport = ScriptedTransport(lambda backend, n: Reply(llamacpp, status=400))

        async def scenario(gw):
            return await call(gw, ASK, endpoint=MESSAGES), await call(gw, {**ASK, "stream": True}, endpoint=MESSAGES)

        for answer in run(config(flavor=flavor), transport, scenario):
            assert answer.status == 400
            error = answer.json()
            assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
            assert error["error"]["message"] == ("prompt is too long: the request exceeds the available context size, "
                                                 "try increasing it")


def test_a_prompt_that_fits_only_without_its_max_tokens_says_so_in_anthropics_words():
    # Anthropic words this case apart ("input length and `max_tokens` exceed context limit: ..."): the fix is a
    # smaller max_tokens, not a shorter conversation, and clients act on the difference.
    vllm = {"object": "error", "type": "BadRequestError", "code": 400, "message": (
        "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (1000 in the "
        "messages, 4000 in the completion). Please reduce the length of the messages or completion.")}
    transport = ScriptedTransport(lambda backend, n: Reply(vllm, status=400))

    async def scenario(gw):
        return await call(gw, ASK, endpoint=MESSAGES)

    message = run(config(flavor="tgi"), transport, scenario).json()["error"]["message"]
    assert message == "input length and `max_tokens` exceed context limit: " + vllm["message"]
