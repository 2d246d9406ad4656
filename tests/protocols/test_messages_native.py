"""A conversation begun on a chat backend and carried on by a backend that speaks Messages natively (an alias that
mixes both kinds), driven by the official anthropic SDK against a real gateway process.

The native backend is a loopback server standing in for Anthropic's API: a real Anthropic backend cannot run here,
and what matters is what Anthropic refuses, which this server checks as Anthropic does (its words in its errors):
every thinking block in the history must carry a signature it issued ("Invalid `signature` in `thinking` block"),
and with thinking on, the final assistant turn of a tool-use loop must begin with a thinking block. The gateway's
choice of backend is made per attempt, so two aliases, one per backend, place the turns where a mixed alias might.
Anthropic's answers cached and served again keep what only Anthropic's answers carry (citations, stop_details).
"""

from __future__ import annotations

import hashlib

import anthropic
import httpx
import pytest
from aiohttp import web

from app.admission.auth import hash_key
from app.protocols.messages import message_events
from tests.conftest import ACME_KEY, ADMIN_KEY, NO_BREAKER
from tests.protocols.chat_backend import ChatBackend, Json, LoopbackServer
from tests.support import Process, free_port, write_yaml

WEATHER = {"name": "weather", "description": "The weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
THINK = {"type": "enabled", "budget_tokens": 1024}
REFUSED = {"type": "refusal", "category": "cyber", "explanation": "This could enable malware development."}
GRASS = "The grass is green."
# Where an answer's words come from in a document the request gave with citations enabled, as Anthropic cites it.
CITATION = {"type": "char_location", "cited_text": GRASS, "document_index": 0, "document_title": "Lawns",
            "start_char_index": 0, "end_char_index": len(GRASS)}
IGNORED = "x-slipstream-ignored-fields"


def _sign(thinking: str) -> str:
    return "sig-" + hashlib.sha256(b"stand-in secret" + thinking.encode()).hexdigest()[:32]


def _refusal(where: str, message: str) -> web.Response:
    return web.json_response({"type": "error", "error": {"type": "invalid_request_error",
                                                         "message": f"{where}: {message}"}}, status=400)


class AnthropicStandIn(LoopbackServer):
    """POST /v1/messages, validated as Anthropic validates thinking blocks; answers a signed thinking block (thinking
    on) and a tool call (tools given, the last turn a question), text citing a document the last turn gave, or text.
    Keeps each body it accepted."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        super().__init__()

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/messages", self._messages)]

    async def _messages(self, request: web.Request) -> web.Response:
        body = await request.json()
        messages = body["messages"]
        for i, m in enumerate(messages):
            for j, b in enumerate(m["content"] if isinstance(m["content"], list) else ()):
                if b["type"] == "thinking" and b.get("signature") != _sign(b.get("thinking", "")):
                    return _refusal(f"messages.{i}.content.{j}", "Invalid `signature` in `thinking` block")
        thinking = (body.get("thinking") or {}).get("type") in ("enabled", "adaptive")
        last = messages[-1]["content"]
        in_loop = isinstance(last, list) and any(b["type"] == "tool_result" for b in last)
        if thinking and in_loop:
            first = messages[-2]["content"][0]["type"]
            if first not in ("thinking", "redacted_thinking"):
                return _refusal(f"messages.{len(messages) - 2}.content.0.type",
                                f"Expected `thinking` or `redacted_thinking`, but found `{first}`. When `thinking` is "
                                "enabled, a final `assistant` message must start with a thinking block (preceeding "
                                "the lastmost set of `tool_use` and `tool_result` blocks). To avoid this requirement, "
                                "disable `thinking`.")
        self.bodies.append(body)
        content: list[dict] = []
        if thinking:
            content.append({"type": "thinking", "thinking": "The user asks.", "signature": _sign("The user asks.")})
        cites = isinstance(last, list) and any(b["type"] == "document" for b in last)
        if isinstance(last, str) and "exploit" in last:  # refused, with the policy's category (stop_details)
            content.append({"type": "text", "text": "I can't help with that."})
            stop = "refusal"
        elif cites:
            content.append({"type": "text", "text": GRASS, "citations": [CITATION]})
            stop = "end_turn"
        elif body.get("tools") and not in_loop:
            content.append({"type": "tool_use", "id": "toolu_native", "name": "weather", "input": {"city": "Paris"}})
            stop = "tool_use"
        else:
            content.append({"type": "text", "text": "Sunny."})
            stop = "end_turn"
        message = {"id": "msg_native", "type": "message", "role": "assistant", "model": body["model"],
                   "content": content, "stop_reason": stop, "stop_sequence": None,
                   "usage": {"input_tokens": 20, "output_tokens": 5}}
        if stop == "refusal":
            message["stop_details"] = REFUSED
        if not body.get("stream"):
            return web.json_response(message)
        return web.Response(body=b"".join(message_events(message)), content_type="text/event-stream")


class Gateway:
    def __init__(self, url: str, chat: ChatBackend, native: AnthropicStandIn) -> None:
        self.url, self.chat, self.native = url, chat, native

    def anthropic(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.url, api_key=ACME_KEY, max_retries=0)

    def settle(self) -> None:
        """Wait until every answer the cache was handed is stored (it is written after the answer)."""
        r = httpx.post(f"{self.url}/admin/cache/flush", headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=10)
        assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    chat, native = ChatBackend().start(), AnthropicStandIn().start()
    port = free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port},
        "auth": {"mode": "keys", "clients": [{"tenant": "acme", "key_sha256": hash_key(ACME_KEY)}],
                 "admin_keys": [hash_key(ADMIN_KEY)]},  # for /admin/cache/flush
        "backends": {"chat": {"base_url": f"http://127.0.0.1:{chat.port}/v1", "model": "m-chat", "flavor": "tgi"},
                     "anthropic": {"base_url": f"http://127.0.0.1:{native.port}/v1", "model": "claude-stand-in",
                                   "apis": ["messages"]}},
        "reliability": NO_BREAKER,
        "models": {"on-chat": {"backends": ["chat"], "retry": {"max_attempts": 1}},
                   "on-anthropic": {"backends": ["anthropic"], "retry": {"max_attempts": 1}},
                   "cached-anthropic": {"backends": ["anthropic"], "retry": {"max_attempts": 1},
                                        "cache": {"exact": {"enabled": True, "ttl_s": 300},
                                                  "finish_reasons": ["stop", "content_filter"]}}},
    }
    tmp = tmp_path_factory.mktemp("messages-native-gw")
    proc = Process(["serve", "--config", str(write_yaml(tmp / "gw.yaml", config))], tmp / "gw.log")
    proc.wait_listening(port)
    yield Gateway(f"http://127.0.0.1:{port}", chat, native)
    proc.stop()
    chat.stop()
    native.stop()


@pytest.fixture(autouse=True)
def _fresh(gateway):
    gateway.chat.answers.clear()
    gateway.chat.bodies.clear()
    gateway.native.bodies.clear()


def _as_param(message: anthropic.types.Message) -> dict:
    """An answer as the assistant turn a client sends back (Claude Code sends thinking blocks back as they came)."""
    return {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]}


def test_a_conversation_begun_on_a_chat_backend_goes_on_on_anthropic(gateway):
    gateway.chat.queue(Json({"role": "assistant", "reasoning_content": "Paris is in France.", "content": "Sunny."}))
    client = gateway.anthropic()
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.messages.create(model="on-chat", max_tokens=2048, thinking=THINK, messages=ask)
    assert [(b.type, getattr(b, "signature", None)) for b in first.content] == [("thinking", ""), ("text", None)]
    raw = client.messages.with_raw_response.create(model="on-anthropic", max_tokens=2048, thinking=THINK, messages=[
        *ask, _as_param(first), {"role": "user", "content": "And tomorrow?"}])  # type: ignore[list-item]
    # Anthropic refused the unsigned block; an earlier turn's thinking may be left out, and the gateway's is.
    assert raw.parse().content[-1].text == "Sunny."  # type: ignore[union-attr]
    assert gateway.native.bodies[0]["messages"][1]["content"] == [{"type": "text", "text": "Sunny."}]
    assert gateway.native.bodies[0]["thinking"] == THINK  # thinking stays on
    assert raw.headers.get(IGNORED) is None


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_tool_loop_begun_on_a_chat_backend_goes_on_on_anthropic_without_thinking_for_that_turn(gateway, stream):
    # The final assistant turn of a tool loop must begin with a signed thinking block when thinking is on, and the
    # chat backend's cannot be signed: that request goes without thinking (Anthropic's advice for the case), and
    # the answer names `thinking` as not honoured.
    gateway.chat.queue(Json({"role": "assistant", "reasoning_content": "I need the weather tool.", "content": None,
                             "tool_calls": [{"id": "call_1", "type": "function",
                                             "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]},
                            "tool_calls"))
    client = gateway.anthropic()
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    call = client.messages.create(model="on-chat", max_tokens=2048, thinking=THINK, tools=[WEATHER], messages=ask)
    assert [b.type for b in call.content] == ["thinking", "tool_use"]
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "18C, sun"}]}
    again = {"model": "on-anthropic", "max_tokens": 2048, "thinking": THINK, "tools": [WEATHER],
             "messages": [*ask, _as_param(call), result]}
    if stream:
        with client.messages.stream(**again) as events:  # type: ignore[arg-type]
            answer, ignored = events.get_final_message(), events.response.headers.get(IGNORED)
    else:
        raw = client.messages.with_raw_response.create(**again)  # type: ignore[arg-type]
        answer, ignored = raw.parse(), raw.headers.get(IGNORED)
    assert answer.content[-1].text == "Sunny."  # type: ignore[union-attr]
    assert ignored == "thinking"
    sent = gateway.native.bodies[0]
    assert "thinking" not in sent
    assert [b["type"] for b in sent["messages"][1]["content"]] == ["tool_use"]


def test_consecutive_turns_of_one_role_reach_a_native_backend_as_one_turn(gateway):
    # Anthropic combines consecutive turns of one role itself; llama.cpp's /v1/messages sends them to the chat template
    # as they are, and a template that requires the roles to alternate (Gemma's) refuses them (400 "Conversation
    # roles must alternate", checked on the real server). Joined, they are the same turn to Anthropic. The gateway's
    # own thinking, dropped for a native backend, leaves such a pair where the client sent none.
    gateway.anthropic().messages.create(model="on-anthropic", max_tokens=64, messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "Two cities.", "signature": ""}]},
        {"role": "user", "content": "And in Lyon?"}, {"role": "user", "content": [{"type": "text", "text": "In C."}]}])
    assert gateway.native.bodies[0]["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "Weather in Paris?"}, {"type": "text", "text": "And in Lyon?"},
        {"type": "text", "text": "In C."}]}]


def test_anthropics_own_signed_thinking_goes_back_to_it_unchanged(gateway):
    client = gateway.anthropic()
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    call = client.messages.create(model="on-anthropic", max_tokens=2048, thinking=THINK, tools=[WEATHER], messages=ask)
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_native", "content": "18C"}]}
    raw = client.messages.with_raw_response.create(model="on-anthropic", max_tokens=2048, thinking=THINK,
                                                   tools=[WEATHER], messages=[*ask, _as_param(call), result])  # type: ignore[list-item]
    assert raw.parse().content[-1].text == "Sunny."  # type: ignore[union-attr]
    assert gateway.native.bodies[1]["messages"][1] == _as_param(call)
    assert gateway.native.bodies[1]["thinking"] == THINK
    assert raw.headers.get(IGNORED) is None


def test_an_answer_citing_a_document_replays_its_citations_from_the_cache(gateway):
    # Anthropic streams a text block's citations as citations_delta events, which the SDK gathers into the block.
    # Served again from the cache as a stream, the block came without them: not the answer the client would have
    # got, nor the one the cache holds.
    ask = [{"role": "user", "content": [
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": GRASS},
         "title": "Lawns", "citations": {"enabled": True}},
        {"type": "text", "text": "What colour is the grass?"}]}]
    client = gateway.anthropic()
    first = client.messages.create(model="cached-anthropic", max_tokens=64, messages=ask,  # type: ignore[arg-type]
                                   extra_body={"temperature": 0})  # only a deterministic answer is cached
    gateway.settle()
    with client.messages.stream(model="cached-anthropic", max_tokens=64, messages=ask,  # type: ignore[arg-type]
                                extra_body={"temperature": 0}) as events:
        replayed, cache = events.get_final_message(), events.response.headers["x-slipstream-cache"]
    assert (cache, len(gateway.native.bodies)) == ("hit", 1)
    assert first.content[0].citations and first.content[0].citations[0].cited_text == GRASS  # type: ignore[union-attr]
    assert [b.model_dump() for b in replayed.content] == [b.model_dump() for b in first.content]


@pytest.mark.parametrize("stored_from", ["whole", "stream"])
def test_a_cached_refusal_keeps_its_stop_details_either_way(gateway, stored_from):
    # Anthropic says why it refused in stop_details (its policy's category), at the end of a stream: in message_delta,
    # where the SDK takes it from. Stored from a stream, the entry kept only the stop reason; replayed as a stream, the
    # details rode on message_start, which the SDK's message_delta then overwrote with nothing.
    ask = {"model": "cached-anthropic", "max_tokens": 64, "extra_body": {"temperature": 0},
           "messages": [{"role": "user", "content": f"Write an exploit ({stored_from})."}]}
    client = gateway.anthropic()

    def answer(stream: bool) -> anthropic.types.Message:
        if not stream:
            return client.messages.create(**ask)  # type: ignore[arg-type]
        with client.messages.stream(**ask) as events:  # type: ignore[arg-type]
            return events.get_final_message()

    first = answer(stored_from == "stream")
    gateway.settle()
    again = answer(stored_from == "whole")
    assert len(gateway.native.bodies) == 1
    assert first.stop_reason == again.stop_reason == "refusal"
    assert first.stop_details is not None and again.stop_details is not None
    assert first.stop_details.model_dump() == again.stop_details.model_dump() == REFUSED
