"""OpenAI Responses (/v1/responses) as a client protocol: what this API decides, for the core to read.

Its streams are named events (`event: response.output_text.delta`) that end with `response.completed` (or
`.incomplete`, `.failed`), never [DONE]; usage is `input_tokens`/`output_tokens` on the final response. The
first generated delta is the TTFT, as chat's first content delta is.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import orjson

from app.config import BackendConfig
from app.errors import GatewayError, UpstreamProtocolError
from app.protocols.base import EventKind, ParsedRequest, Upstream, positive_int, user_turn_texts
from app.protocols.chat import SEP, plain_text
from app.protocols.fresh_ids import fresh_output_ids
from app.protocols.openai import OpenAIProtocol
from app.protocols.responses import request
from app.protocols.responses.from_chat import ChatStreamTranslator, event, from_chat, new_id, shell
from app.protocols.responses.to_chat import as_items, to_chat
from app.protocols.translated_stream import TranslatedStream
from app.record import Usage
from app.upstream.attempt import EventStream, JsonReply, json_object

_MODEL = re.compile(rb'"model"\s*:\s*"((?:[^"\\]|\\.)*)"')
_TYPE = re.compile(rb'"type"\s*:\s*"(response\.[a-z_.]+|error)"')
_CONTENT_EVENTS = (b"response.output_text.delta", b"response.function_call_arguments.delta",
                   b"response.reasoning_text.delta", b"response.refusal.delta")
_FINAL_EVENTS = (b"response.completed", b"response.incomplete")
_FAILED_EVENTS = (b"response.failed", b"error")
# Request fields a response echoes that the cache key leaves out (app.cache.keys), with the echo of their absence.
_ECHOED_NOT_KEYED: dict[str, object] = {"metadata": {}, "user": None, "store": True, "previous_response_id": None,
                                        "safety_identifier": None, "prompt_cache_key": None,
                                        "prompt_cache_retention": None}


_SEQUENCE = re.compile(rb'"sequence_number"\s*:\s*(\d+)')


def next_sequence_number(sent: bytes) -> int:
    """The sequence number an event after `sent` (the last events a client got) takes: one past the last
    number in them, 0 when none (nothing sent yet, or a backend that numbers no events)."""
    at = sent.rfind(b'"sequence_number"')
    m = _SEQUENCE.match(sent, at) if at != -1 else None
    return int(m.group(1)) + 1 if m else 0


def event_type(data: bytes) -> bytes | None:
    """An event's `type` (first in the object as OpenAI, llama.cpp, vLLM and this gateway write it: read without a
    regex, since the relay asks several times per event; searched otherwise)."""
    if data.startswith(b'{"type":"'):
        end = data.find(b'"', 9)
        if end > 9:
            return data[9:end]
    m = _TYPE.search(data)
    return m.group(1) if m else None


class ResponsesSse:
    """How a Responses stream frames and classifies for the relay (app.relay.format.StreamFormat): named events
    whose name is their data's `type`, ending with response.completed (or .incomplete) itself: no `done`."""

    done = b""
    model_first = False  # llama.cpp's response.created names no model; its response.completed does

    def frame(self, data: bytes) -> bytes:
        return b"event: " + (event_type(data) or b"message") + b"\ndata: " + data + b"\n\n"

    def error_event(self, err: GatewayError, after: bytes = b"") -> bytes:
        return RESPONSES.error_event(err, after)

    def is_error(self, data: bytes) -> bool:
        return event_type(data) in _FAILED_EVENTS

    def has_usage(self, data: bytes) -> bool:
        # bytes.find, not `in`: cheaper on every event (app/upstream/sse.py says why).
        return data.find(b'"usage"') != -1

    def finish_reasons(self, data: bytes) -> list[bytes]:
        if event_type(data) not in _FINAL_EVENTS:
            return []
        reason = RESPONSES.stop_reason(data)
        return [reason.encode()] if reason else []

    def model(self, data: bytes) -> re.Match[bytes] | None:
        return _MODEL.search(data) if data.find(b'"model"') != -1 else None

    def is_content(self, data: bytes) -> bool:
        return event_type(data) in _CONTENT_EVENTS


class ResponsesProtocol(OpenAIProtocol):
    name = "responses"
    value = "responses"
    # The GenAI conventions have no Responses-specific operation: it is a chat-style generation.
    operation = "chat"
    assembles = False
    relay = "events"
    sse = ResponsesSse()
    end_marker = b"complete"  # in both end events' types (response.completed, response.incomplete)
    id_prefix = "resp"
    # Its turns are stored and chained (app.conversations): the pipeline expands and keeps them.
    stateful = True

    # --- the request ----------------------------------------------------------------------------
    def check(self, body: dict, stream: bool) -> bool:
        request.check(body)
        return True  # usage always rides on response.completed: nothing to hide from the client

    def prompt_chars(self, body: dict) -> int:
        return request.text_chars(body, as_items(body["input"]))

    def output_cap(self, body: dict) -> int | None:
        return positive_int(body.get("max_output_tokens"))

    def choices(self, body: dict) -> int:
        return 1

    def prefix_text(self, body: dict) -> str:
        # The expanded chain serialised as sent: byte-stable from turn to turn (app.conversations.chain).
        instructions = body.get("instructions")
        tools = orjson.dumps(body["tools"], option=orjson.OPT_SORT_KEYS).decode() if body.get("tools") else ""
        return f"{tools}{SEP}{instructions or ''}{SEP}{orjson.dumps(as_items(body['input'])).decode()}"

    def cache_turns(self, body: dict) -> tuple[str, list] | None:
        items = as_items(body["input"])
        last = items[-1] if items else None
        if not isinstance(last, dict) or last.get("type", "message") != "message" or last.get("role") != "user":
            return None
        content = last.get("content")
        if isinstance(content, list):
            if not all(isinstance(p, dict) and p.get("type") == "input_text" for p in content):
                return None
            content = [{"type": "text", "text": p.get("text")} for p in content]
        text = plain_text(content)
        if text is None:
            return None
        try:
            earlier = to_chat({"model": body["model"], "instructions": body.get("instructions")}, items[:-1])["messages"]
        except GatewayError:
            return None
        return text, earlier

    def user_texts(self, body: dict) -> list[str]:
        value = body.get("input")
        return user_turn_texts(as_items(value)) if isinstance(value, (str, list)) else []

    def upstream_body(self, req: ParsedRequest, backend_model: str, request_usage: bool) -> bytes:
        # The chain is already in `input` (app.conversations): the backend never sees the id.
        body = req.body
        if "previous_response_id" in body:
            return orjson.dumps({**{k: v for k, v in body.items() if k != "previous_response_id"},
                                 "model": backend_model})
        body["model"] = backend_model
        return orjson.dumps(body)

    def upstream(self, req: ParsedRequest, backend: BackendConfig, streamed: bool) -> Upstream:
        """Passthrough first: a backend that speaks Responses gets the body unchanged apart from `model` (and
        the expanded chain); any other gets chat completions, and its answer is translated back."""
        if backend.speaks("responses"):
            return Upstream(self.value, self.upstream_body(req, backend.model, False), req.headers, mended)
        # llama.cpp's chat reads earlier turns' reasoning back (reasoning_content), as its own /v1/responses sends it.
        chat = to_chat(req.body, as_items(req.body["input"]), reasoning_back=backend.flavor == "llamacpp")
        chat["model"] = backend.model
        if not backend.stream_usage:  # a server that refuses stream_options (backends.<name>.stream_usage: false)
            chat.pop("stream_options", None)
        answer = shell(new_id("resp"), req.alias, req.body)
        return Upstream("chat/completions", orjson.dumps(chat), {}, lambda result: translated(result, answer))

    # --- the stream -----------------------------------------------------------------------------
    def classify(self, data: bytes) -> EventKind:
        kind = event_type(data)
        if kind is None:
            return EventKind.ERROR if data.startswith(b'{"error"') else EventKind.NONE
        if kind in _CONTENT_EVENTS:
            return EventKind.CONTENT
        if kind in _FINAL_EVENTS:
            return EventKind.USAGE | EventKind.FINISH | EventKind.END
        if kind in _FAILED_EVENTS:
            return EventKind.ERROR
        return EventKind.NONE

    def stop_reason(self, data: bytes) -> str | None:
        """The chat-style reason a final event stands for: stop, tool_calls, or the incomplete reason."""
        try:
            response = orjson.loads(data).get("response")
        except (orjson.JSONDecodeError, AttributeError):
            return None
        return _reason(response) if isinstance(response, dict) else None

    def usage(self, obj: dict) -> Usage | None:
        usage = obj.get("usage")
        if not isinstance(usage, dict) and isinstance(obj.get("response"), dict):
            usage = obj["response"].get("usage")
        if not isinstance(usage, dict):
            return None
        return Usage(int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0))

    def finish_reasons(self, body: dict) -> list[str]:
        reason = _reason(body)
        return [reason] if reason is not None else []

    def cache_finish_reasons(self, body: dict) -> list[str | None]:
        # In OpenAI's chat words, which the cache policy names: completed -> stop (or tool_calls), cut -> length.
        return [_reason(body)]

    def assembler(self) -> ResponsesAssembler:
        return ResponsesAssembler()

    # --- answers the gateway makes ----------------------------------------------------------------
    def error_event(self, err: GatewayError, after: bytes = b"") -> bytes:
        # OpenAI's error event, with the error object too: the openai SDK raises APIError on an event whose
        # data carries `error`, so a stream that fails midway is never taken for a complete one. Its
        # sequence_number follows the last event's (the backend's numbers, or the translation's), as OpenAI's
        # does: a client that orders events by it puts the error last.
        inner = err.body()["error"]
        payload = {"type": "error", "code": err.code or err.type, "message": err.message, "param": err.param,
                   "sequence_number": next_sequence_number(after), "error": inner}
        return event(payload)

    def stream_over(self, tail: bytes) -> bool:
        return any(f in tail for f in (b'"type":"response.completed"', b'"type":"response.incomplete"',
                                       b'"type":"response.failed"', b"event: error\n"))

    def replay(self, body: dict, include_usage: bool) -> list[bytes]:
        return replay_events(body)

    def served_again(self, body: dict, suffix: str, semantic: bool, asked: dict | None = None) -> None:
        body["id"] = new_id("resp")
        body["created_at"] = int(time.time())
        if "completed_at" in body:
            body["completed_at"] = body["created_at"]
        fresh_output_ids(body.get("output"))
        if asked is not None:
            # The response echoes these request fields, and the cache key leaves them out (they do not change
            # the answer): the entry's would be the first caller's (another end user's metadata and id).
            for key, default in _ECHOED_NOT_KEYED.items():
                body[key] = asked.get(key, default)
        usage = body.get("usage")
        if not isinstance(usage, dict):
            return
        if semantic:
            out = int(usage.get("output_tokens") or 0)
            body["usage"] = {**usage, "input_tokens": 0, "total_tokens": out,
                             "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0}}
        else:
            usage["input_tokens_details"] = {**(usage.get("input_tokens_details") or {}),
                                             "cached_tokens": usage.get("input_tokens", 0)}

    def answer_text(self, body: dict) -> str | None:
        return output_text(body)


def _reason(response: dict) -> str | None:
    status = response.get("status")
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return "length" if reason == "max_output_tokens" else reason if isinstance(reason, str) else "incomplete"
    if status != "completed":
        return status if isinstance(status, str) else None
    calls = any(isinstance(i, dict) and i.get("type") == "function_call" for i in response.get("output") or ())
    return "tool_calls" if calls else "stop"


def mended(result: JsonReply | EventStream) -> JsonReply | EventStream:
    """A native backend's answer with the item a cut fell in marked `incomplete`, as OpenAI marks it and the
    translation does (app.protocols.responses.from_chat): vLLM says `completed` on every item of a response cut by
    max_output_tokens (vllm-project/vllm#57998), and a client that runs completed calls would run a cut one. The
    JSON answer only, already parsed (one look at its status); a stream is relayed as it comes."""
    if not isinstance(result, JsonReply) or result.data is None or result.data.get("status") != "incomplete":
        return result
    data = result.data
    output = data.get("output")
    last = output[-1] if isinstance(output, list) and output else None
    if not isinstance(last, dict) or last.get("status") != "completed":
        return result  # already marked, or an item without a status (OpenAI's reasoning items)
    last["status"] = "incomplete"
    return replace(result, body=orjson.dumps(data), data=data)


def translated(result: JsonReply | EventStream, answer: dict) -> JsonReply | TranslatedResponsesStream:
    """A chat backend's answer as the Responses answer it stands for (`answer`: the response's shell)."""
    if isinstance(result, JsonReply):
        chat = result.data if result.data is not None else json_object(result.body, result.backend)
        body = from_chat(chat, answer)
        return replace(result, body=orjson.dumps(body), data=body)
    return TranslatedResponsesStream(result, answer)


class TranslatedResponsesStream(TranslatedStream):
    """A chat-completions stream read as the Responses stream it stands for."""

    def __init__(self, inner: EventStream, answer: dict) -> None:
        super().__init__(inner)
        self.translator = ChatStreamTranslator(answer)

    async def batches(self) -> AsyncIterator[list[bytes]]:
        t = self.translator
        opening: list[bytes] = _split(t.start())
        async for batch in self.inner.batches():
            out, opening = opening, []
            done = False
            for data in self.chat_data(batch):
                if data == b"[DONE]":
                    done = True
                    break
                out.extend(_split(t.feed(_chunk(data, self.backend.name))))
            if done:
                if not t.finished_reason:  # [DONE] without a finish reason: cut short, never a complete answer
                    raise UpstreamProtocolError(f"backend {self.backend.name} ended the stream before it was complete")
                out.extend(_split(t.finish()))
            if out:
                yield out
            if done:
                return
        if not t.finished_reason:
            raise UpstreamProtocolError(f"backend {self.backend.name} ended the stream before it was complete")
        # A backend that closed after its final chunk without [DONE]: complete, since it said why it stopped.
        yield _split(t.finish())


def _chunk(data: bytes, backend: str) -> dict:
    """A chat chunk's JSON object, or UpstreamProtocolError: the relay then ends the stream with an error event
    (an exception of another kind cut the client's connection without one)."""
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise UpstreamProtocolError(f"backend {backend} sent a chunk that is not JSON") from None
    if not isinstance(chunk, dict):
        raise UpstreamProtocolError(f"backend {backend} sent a chunk that is not a JSON object")
    return chunk


def _split(events: bytes) -> list[bytes]:
    """Joined SSE events as the relay takes them: one per item, without the blank line."""
    return [e for e in events.split(b"\n\n") if e]


class ResponsesAssembler:
    """A Responses stream's JSON answer: the response object its final event carries."""

    def __init__(self) -> None:
        self.broken = False
        self._result: dict | None = None

    def feed(self, data: bytes) -> None:
        kind = event_type(data)
        if kind in _FINAL_EVENTS:
            try:
                obj = orjson.loads(data)
            except orjson.JSONDecodeError:
                self.broken = True
                return
            response = obj.get("response") if isinstance(obj, dict) else None
            if isinstance(response, dict):
                self._result = response
            else:
                self.broken = True
        elif kind in _FAILED_EVENTS:
            self.broken = True

    def finish_reasons(self) -> list[str | None]:
        return [self._result.get("status")] if self._result else []

    def result(self) -> dict:
        if self._result is None:
            self.broken = True
            return {}
        return self._result


def output_text(body: dict) -> str | None:
    texts = [part.get("text") for item in body.get("output") or () if isinstance(item, dict) and item.get("type") == "message"
             for part in item.get("content") or () if isinstance(part, dict) and part.get("type") == "output_text"]
    return "".join(t for t in texts if isinstance(t, str)) if texts else None


def replay_events(response: dict) -> list[bytes]:
    """A stored Responses answer as the event sequence it would have streamed as (the exact cache's replay)."""
    seq = iter(range(1 << 30))

    def ev(payload: dict) -> bytes:
        payload["sequence_number"] = next(seq)
        return event(payload)

    opening = {**response, "status": "in_progress", "output": [], "usage": None}
    events = [ev({"type": "response.created", "response": opening}), ev({"type": "response.in_progress", "response": opening})]
    for i, item in enumerate(response.get("output") or ()):
        kind = item.get("type")
        if kind == "message":
            events.append(ev({"type": "response.output_item.added", "output_index": i,
                              "item": {**item, "status": "in_progress", "content": []}}))
            for j, part in enumerate(item.get("content") or ()):
                text = part.get("text", "")
                events.append(ev({"type": "response.content_part.added", "item_id": item["id"], "output_index": i,
                                  "content_index": j, "part": {**part, "text": ""}}))
                if part.get("type") == "output_text":
                    events.append(ev({"type": "response.output_text.delta", "item_id": item["id"], "output_index": i,
                                      "content_index": j, "delta": text, "logprobs": []}))
                    events.append(ev({"type": "response.output_text.done", "item_id": item["id"], "output_index": i,
                                      "content_index": j, "text": text, "logprobs": []}))
                events.append(ev({"type": "response.content_part.done", "item_id": item["id"], "output_index": i,
                                  "content_index": j, "part": part}))
        elif kind == "function_call":
            events.append(ev({"type": "response.output_item.added", "output_index": i,
                              "item": {**item, "status": "in_progress", "arguments": ""}}))
            events.append(ev({"type": "response.function_call_arguments.delta", "item_id": item.get("id"),
                              "output_index": i, "delta": item.get("arguments", "")}))
            events.append(ev({"type": "response.function_call_arguments.done", "item_id": item.get("id"),
                              "output_index": i, "arguments": item.get("arguments", "")}))
        else:
            events.append(ev({"type": "response.output_item.added", "output_index": i, "item": item}))
        events.append(ev({"type": "response.output_item.done", "output_index": i, "item": item}))
    final = "response.completed" if response.get("status", "completed") == "completed" else "response.incomplete"
    events.append(ev({"type": final, "response": response}))
    return events


RESPONSES = ResponsesProtocol()
