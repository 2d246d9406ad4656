"""A chat-completions backend on a loopback port whose answers a test writes: what a model would say that the
simulator never does (parallel tool calls, a call cut by max_tokens, a stream that breaks after a tool call has
begun). It runs in a thread of its own, so a gateway process can call it while the test drives that gateway with
an official SDK; each POST /v1/chat/completions is answered by the next queued answer, and its body is kept.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Self

import orjson
from aiohttp import web


@dataclass
class Json:
    """A whole chat completion with this message and finish reason."""

    message: dict
    finish_reason: str = "stop"
    # None: the answer says `"usage": null`, as a server that counts nothing does.
    usage: dict | None = field(default_factory=lambda: {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17})
    extra: dict = field(default_factory=dict)  # more of the choice's fields (vLLM's stop_reason)


@dataclass
class Chunks:
    """A stream of these chunks' deltas ([{"content": "Hi"}, ...]), the finish reason, a usage chunk and then
    `end`: "done" ([DONE]), "error" (an error event, as vLLM sends one mid-stream), "garbage" (a chunk that is not
    JSON, then [DONE]) or "drop" (the connection closed). finish_reason None: [DONE] without one."""

    deltas: list[dict]
    finish_reason: str | None = "stop"
    end: str = "done"
    usage: dict = field(default_factory=lambda: {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17})
    extra: dict = field(default_factory=dict)  # more of the last choice chunk's fields (vLLM's stop_reason)


def _running(usage: dict, done: int) -> dict:
    """vLLM's continuous usage on a chunk: the whole prompt's count, and the tokens generated so far."""
    return {**usage, "completion_tokens": done, "total_tokens": usage["prompt_tokens"] + done}


def _chunk(delta: dict | None, finish: str | None = None, usage: dict | None = None, extra: dict | None = None) -> bytes:
    body: dict = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0, "model": "m-scripted",
                  "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish,
                                                        **(extra or {})}]}
    if usage is not None:
        body["usage"] = usage
    return b"data: " + orjson.dumps(body) + b"\n\n"


class LoopbackServer:
    """An aiohttp app (`routes`) on a thread and event loop of its own, listening on a free loopback port: a real
    HTTP server for a gateway process to call."""

    def __init__(self) -> None:
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    def routes(self) -> list[web.RouteDef]:
        raise NotImplementedError

    def start(self) -> Self:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> None:
        app = web.Application()
        app.add_routes(self.routes())
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


class ChatBackend(LoopbackServer):
    def __init__(self, rejects_stream_options: bool = False) -> None:
        # A server that knows no stream_options (older OpenAI-compatible servers and proxies): it refuses a body
        # carrying them as OpenAI refuses an unknown parameter, and its streams carry no usage.
        self.rejects_stream_options = rejects_stream_options
        self.answers: deque[Json | Chunks] = deque()
        self.bodies: list[dict] = []
        super().__init__()

    def queue(self, *answers: Json | Chunks) -> None:
        self.answers.extend(answers)

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/chat/completions", self._chat)]

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        if self.rejects_stream_options and "stream_options" in body:
            return web.json_response({"error": {"message": "Unknown parameter: 'stream_options'.",
                                                "type": "invalid_request_error", "param": "stream_options",
                                                "code": "unknown_parameter"}}, status=400)
        if not self.answers:
            return web.json_response({"error": {"message": "no answer queued", "type": "server_error"}}, status=500)
        answer = self.answers.popleft()
        if isinstance(answer, Json):
            return web.json_response({"id": "chatcmpl-scripted", "object": "chat.completion", "created": 0,
                                      "model": "m-scripted", "usage": answer.usage, "choices": [
                                          {"index": 0, "message": answer.message, "finish_reason": answer.finish_reason,
                                           **answer.extra}]})
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        # As vLLM answers stream_options.continuous_usage_stats: usage on every chunk, the first one included.
        running = (body.get("stream_options") or {}).get("continuous_usage_stats") is True
        for i, delta in enumerate(answer.deltas):
            await response.write(_chunk(delta, usage=_running(answer.usage, i) if running else None))
        if answer.end == "drop":
            assert request.transport is not None
            request.transport.close()
            return response
        if answer.end == "garbage":  # a chunk that is not JSON (a proxy's or a crashing server's), then [DONE]
            await response.write(b"data: {not json\n\ndata: [DONE]\n\n")
        elif answer.end == "error":
            await response.write(b'data: {"error": {"message": "the engine died", "type": "server_error", "code": 500}}\n\n')
        else:
            await response.write(_chunk({}, answer.finish_reason, extra=answer.extra))
            if not self.rejects_stream_options:
                await response.write(_chunk(None, usage=answer.usage))
            await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response
