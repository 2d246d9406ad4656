"""The simulated backend's HTTP face: an OpenAI-compatible aiohttp app over one Engine.

Besides the OpenAI routes it serves /sim/stats (live slot use and counters) and PUT /sim/faults
(change faults at run time), which tests and benchmarks use to steer and observe it.
"""

from __future__ import annotations

import asyncio
import base64
import time
import uuid

import numpy as np
import orjson
from aiohttp import web
from pydantic import ValidationError

from app.config import FaultConfig, SimBackendConfig
from app.errors import InvalidRequest
from app.protocols.messages import COUNT_TOKENS, MESSAGES
from app.protocols.messages_chat import StreamTranslator, chat_body, message_body
from app.protocols.responses.from_chat import ChatStreamTranslator, from_chat, new_id, shell
from app.protocols.responses.to_chat import as_items, to_chat
from app.tools.simulator import shapes
from app.tools.simulator.engine import Engine, Timings, now
from app.tools.simulator.kv_cache import BLOCK_TOKENS, block_keys, serialise
from app.tools.simulator.textgen import (
    count_tokens,
    embedding,
    generate_tokens,
    prompt_tokens,
    request_rng,
)

_HANG_S = 3600.0
ENGINE = web.AppKey("engine", Engine)


def create_app(name: str, config: SimBackendConfig, seed: int) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[ENGINE] = Engine(name, config, seed)
    app.router.add_post("/v1/chat/completions", _generate("chat"))
    app.router.add_post("/v1/completions", _generate("text"))
    app.router.add_post("/v1/embeddings", _embeddings)
    if "messages" in config.apis:
        # As llama.cpp serves them: Anthropic's Messages API and its token count, on the same engine.
        app.router.add_post("/v1/messages", _messages)
        app.router.add_post("/v1/messages/count_tokens", _count_tokens)
    if "responses" in config.apis:
        # Natively, as llama.cpp serves it: translated to a chat call inside the server, stateless.
        app.router.add_post("/v1/responses", _responses)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/health", _health)
    app.router.add_get("/sim/stats", _stats)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/props", _props)
    app.router.add_get("/slots", _slots)
    app.router.add_put("/sim/faults", _set_faults)
    app.router.add_put("/sim/speed", _set_speed)
    app.router.add_delete("/sim/cache", _clear_cache)
    return app


def _json(data: dict, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json", headers=headers)


def _error(status: int, message: str, etype: str, headers: dict[str, str] | None = None) -> web.Response:
    return _json({"error": {"message": message, "type": etype, "param": None, "code": None}}, status, headers)


async def _read_json(request: web.Request) -> dict | web.Response:
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return _error(400, "body is not valid JSON", "invalid_request_error")
    if not isinstance(body, dict):
        return _error(400, "body must be a JSON object", "invalid_request_error")
    return body


async def _read_call(request: web.Request, engine: Engine) -> dict | web.Response:
    """The request's JSON body, or the error answer for a bad body or a model this backend does not serve."""
    body = await _read_json(request)
    if isinstance(body, web.Response):
        return body
    if body.get("model") != engine.config.model:
        return _error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
    return body


def _generate(kind: str):
    async def handler(request: web.Request) -> web.StreamResponse:
        engine = request.app[ENGINE]
        body = await _read_call(request, engine)
        if isinstance(body, web.Response):
            return body
        engine.stats.requests += 1
        engine.stats.last_traceparent = request.headers.get("traceparent")
        problem = _invalid(body, engine.config.report == "llamacpp")
        if problem:
            engine.stats.errors += 1
            return _error(400, problem, "BadRequestError")
        try:
            return await _serve(request, engine, kind, body)
        except (asyncio.CancelledError, ConnectionResetError):
            # The client went away: cancelled while waiting, or a write found the socket closed.
            engine.stats.cancelled += 1
            raise

    return handler


async def _responses(request: web.Request) -> web.StreamResponse:
    engine = request.app[ENGINE]
    body = await _read_call(request, engine)
    if isinstance(body, web.Response):
        return body
    engine.stats.requests += 1
    if body.get("previous_response_id"):
        engine.stats.errors += 1  # llama.cpp's own refusal: the server keeps no state
        return _error(400, "this server does not support 'previous_response_id'", "invalid_request_error")
    try:
        chat = to_chat(body, as_items(body["input"]) if "input" in body else [])
    except (InvalidRequest, KeyError, TypeError, AttributeError) as exc:
        engine.stats.errors += 1
        return _error(400, str(exc), "invalid_request_error")
    try:
        return await _serve(request, engine, "chat", chat, responses=body)
    except (asyncio.CancelledError, ConnectionResetError):
        engine.stats.cancelled += 1
        raise


def forced_call(body: dict) -> dict | None:
    """The tool call a request forces (tool_choice "required" or a named function), with arguments that fill the
    function's required parameters: what a model bound to call a tool answers. Else None (a text answer)."""
    tools = [t.get("function") for t in body.get("tools") or () if isinstance(t, dict) and t.get("type") == "function"]
    choice = body.get("tool_choice")
    if not tools or not (choice == "required" or isinstance(choice, dict)):
        return None
    name = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    fn = next((t for t in tools if isinstance(t, dict) and (name is None or t.get("name") == name)), None)
    if fn is None:
        return None
    params: dict = fn["parameters"] if isinstance(fn.get("parameters"), dict) else {}
    props: dict = params.get("properties") or {}
    sample = {"string": "Paris", "integer": 1, "number": 1.5, "boolean": True}
    args = {p: sample.get(str((props.get(p) or {}).get("type")), "x") for p in params.get("required") or ()}
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": fn.get("name"), "arguments": orjson.dumps(args).decode()}}


async def _messages(request: web.Request) -> web.StreamResponse:
    engine = request.app[ENGINE]
    body = await _read_call(request, engine)
    if isinstance(body, web.Response):
        return body
    engine.stats.requests += 1
    body.pop("thinking", None)  # the simulated model does not think: asked to, it answers without
    try:
        req = MESSAGES.parse(orjson.dumps(body))
        chat = orjson.loads(chat_body(req, engine.config.model, req.stream))
    except InvalidRequest as exc:
        engine.stats.errors += 1
        return _json({"type": "error", "error": {"type": "invalid_request_error", "message": exc.message}}, 400)
    try:
        return await _serve(request, engine, "chat", chat, messages=True)
    except (asyncio.CancelledError, ConnectionResetError):
        engine.stats.cancelled += 1
        raise


async def _count_tokens(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    body = await _read_call(request, engine)
    if isinstance(body, web.Response):
        return body
    try:
        req = COUNT_TOKENS.parse(orjson.dumps(body))
        chat = orjson.loads(chat_body(req, engine.config.model, False, count_only=True))
    except InvalidRequest as exc:
        return _json({"type": "error", "error": {"type": "invalid_request_error", "message": exc.message}}, 400)
    return _json({"input_tokens": prompt_tokens(chat)})


class _MessagesStream:
    """A chat stream answered as Anthropic's Messages events (what a server that speaks it sends)."""

    def __init__(self, model: str) -> None:
        self._t = StreamTranslator(model)

    def start(self) -> bytes:
        return b""

    def feed(self, obj: dict) -> bytes:
        return b"".join(self._t.feed(orjson.dumps(obj)))

    def finish(self) -> bytes:
        return b"".join(self._t.finish())


def _invalid(body: dict, llamacpp: bool = False) -> str | None:
    """The parameter checks a real server makes before queueing a request (llama.cpp takes max_tokens -1: no limit)."""
    n = body.get("n", 1)
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 16):
        return "n must be an integer between 1 and 16"
    t = body.get("temperature")
    if t is not None and (not isinstance(t, (int, float)) or isinstance(t, bool) or not 0 <= t <= 2):
        return "temperature must be a number between 0 and 2"
    m = body.get("max_tokens", body.get("max_completion_tokens"))
    if m is not None and (not isinstance(m, int) or isinstance(m, bool) or m < 1) and not (llamacpp and m == -1):
        return "max_tokens must be a positive integer"
    return None


async def _serve(request: web.Request, engine: Engine, kind: str, body: dict,
                 responses: dict | None = None, messages: bool = False) -> web.StreamResponse:
    """Serve a chat or text call; with `responses` (the Responses body it came from), answer in that API; with
    `messages`, in Anthropic's Messages API."""
    timings = Timings(now())
    await engine.network()
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    n_choices = body.get("n") or 1
    rngs = [request_rng(engine.seed, body, i) for i in range(n_choices)]
    if not isinstance(max_tokens, int) or max_tokens < 1:  # absent, or llama.cpp's -1: no limit
        max_tokens = None
    plan = engine.plan(request_rng(engine.seed, body, -1), max_tokens, body.get("ignore_eos") is True)
    if plan.fault == "error":
        engine.stats.errors += 1
        return _error(500, "simulated internal error", "server_error")
    if plan.fault == "rate_limit":
        engine.stats.errors += 1
        retry = engine.faults.retry_after_s
        return _error(429, "simulated rate limit", "rate_limit_error", {"retry-after": f"{retry:g}"})

    p_tokens = prompt_tokens(body)
    ctx = engine.config.context_tokens
    wanted = p_tokens + (max_tokens or 0)
    if ctx is not None and wanted > ctx:
        engine.stats.errors += 1
        return _error(
            400,
            f"This model's maximum context length is {ctx} tokens. However, you requested {wanted} tokens "
            f"({p_tokens} in the messages, {wanted - p_tokens} in the completion). "
            "Please reduce the length of the messages or completion.",
            "BadRequestError",
        )
    texts = [generate_tokens(rng, plan.output_tokens) for rng in rngs]
    response = None
    # Like vLLM and TGI, a stream's headers go out at once; like llama.cpp's server, only when a slot
    # takes the request (so the time to headers is network plus queue there).
    at_slot = engine.config.report == "llamacpp"
    if body.get("stream") and not at_slot:
        response = await _open_stream(request)
    await engine.admit()
    try:
        timings.admitted = now()
        if body.get("stream") and at_slot:
            response = await _open_stream(request)
        if plan.fault == "hang":
            await asyncio.sleep(_HANG_S)
        keys = block_keys(serialise(body)) if engine.cache.capacity_blocks else []
        if keys:
            # At least the last prompt token is always processed (it yields the first output token).
            timings.cached_tokens = min(engine.cache.match(keys), p_tokens - 1)
        await engine.prefill(p_tokens - timings.cached_tokens)
        engine.cache.insert(keys)
        timings.prefilled = now()
        if response is not None:
            return await _stream(response, engine, kind, body, plan, texts, p_tokens, timings, request, responses,
                                 messages)
        for i in range(plan.output_tokens):
            if plan.fault in ("stall", "disconnect") and i == plan.fault_at:
                if plan.fault == "disconnect":
                    engine.stats.errors += 1
                    _drop(request)
                    return web.Response(status=500)
                await asyncio.sleep(engine.faults.stall_s)
            await engine.step()
        timings.finished = now()
    finally:
        engine.leave()
    engine.stats.completed += 1
    _cache_answer(engine, body, texts)
    rid, created, model = f"cmpl-{uuid.uuid4().hex}", int(time.time()), engine.config.model
    data = shapes.completion_body(
        kind, rid, created, model, ["".join(t) for t in texts], plan.finish_reason,
        _usage(engine, p_tokens, plan.output_tokens * n_choices, timings),
    )
    call = forced_call(body) if kind == "chat" else None
    if call is not None:
        message = data["choices"][0]["message"]
        message["content"], message["tool_calls"] = None, [call]
        data["choices"][0]["finish_reason"] = "tool_calls"
    headers = None
    if engine.config.report == "llamacpp":
        data["timings"] = shapes.llamacpp_timings(timings, p_tokens - timings.cached_tokens, plan.output_tokens)
    elif engine.config.report == "tgi":
        headers = shapes.tgi_headers(timings, p_tokens, plan.output_tokens)
    if messages:
        data = message_body(data, model)
    if responses is not None:
        data = {**from_chat(data, shell(new_id("resp"), model, responses, created)), **({"timings": data["timings"]} if "timings" in data else {})}
    return _json(data, headers=headers)


async def _open_stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"content-type": "text/event-stream", "cache-control": "no-cache"})
    await response.prepare(request)
    return response


async def _stream(response, engine, kind, body, plan, texts, p_tokens, timings, request,
                  responses: dict | None = None, messages: bool = False) -> web.StreamResponse:
    rid, created, model = f"cmpl-{uuid.uuid4().hex}", int(time.time()), engine.config.model
    n_choices = len(texts)
    call = forced_call(body) if kind == "chat" else None
    translator: ChatStreamTranslator | _MessagesStream | None = None
    if messages:
        translator = _MessagesStream(model)
    elif responses is not None:
        translator = ChatStreamTranslator(shell(new_id("resp"), model, responses, created))
        await response.write(translator.start())

    async def send(obj: dict) -> None:
        if translator is not None:
            out = translator.feed(obj)
            if out:
                await response.write(out)
            return
        await response.write(b"data: " + orjson.dumps(obj) + b"\n\n")

    if kind == "chat":
        for i in range(n_choices):
            await send(shapes.chunk(kind, rid, created, model, i, None, None, first=True))
    for step in range(plan.output_tokens):
        if step:
            await engine.step()
        if plan.fault in ("stall", "disconnect") and step == plan.fault_at:
            if plan.fault == "disconnect":
                engine.stats.errors += 1
                _drop(request)
                return response
            await asyncio.sleep(engine.faults.stall_s)
        if call is not None:
            if step == 0:  # the call in three chunks, as servers stream one: name first, then its arguments
                opener = {**call, "index": 0, "function": {"name": call["function"]["name"], "arguments": ""}}
                half = len(call["function"]["arguments"]) // 2
                for delta in ({"tool_calls": [opener]},
                              {"tool_calls": [{"index": 0, "function": {"arguments": call["function"]["arguments"][:half]}}]},
                              {"tool_calls": [{"index": 0, "function": {"arguments": call["function"]["arguments"][half:]}}]}):
                    await send({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]})
            continue
        for i in range(n_choices):
            await send(shapes.chunk(kind, rid, created, model, i, texts[i][step], None))
    timings.finished = now()
    opts = body.get("stream_options")
    with_usage = isinstance(opts, dict) and opts.get("include_usage")
    report = None
    if engine.config.report == "llamacpp":
        report = shapes.llamacpp_timings(timings, p_tokens - timings.cached_tokens, plan.output_tokens)
    usage = _usage(engine, p_tokens, plan.output_tokens * n_choices, timings) if with_usage else None
    for i in range(n_choices):
        final = shapes.chunk(kind, rid, created, model, i, None, "tool_calls" if call is not None else plan.finish_reason)
        if report is not None and i == n_choices - 1:
            if kind != "chat" and usage is not None:
                # Real llama.cpp puts /v1/completions' usage (and timings) on its last choice chunk, off the spec.
                final["usage"], final["timings"], usage, report = usage, report, None, None
            elif not with_usage:
                final["timings"] = report
        await send(final)
    _cache_answer(engine, body, texts)
    if usage is not None:
        chunk = shapes.usage_chunk(kind, rid, created, model, usage)
        if report is not None:
            chunk["timings"] = report  # as llama-server does: with include_usage, timings ride on this chunk
        await send(chunk)
    # A Responses stream ends with its response.completed event: no [DONE] (as OpenAI and llama.cpp send it).
    await response.write(translator.finish() if translator is not None else b"data: [DONE]\n\n")
    await response.write_eof()
    engine.stats.completed += 1
    return response


def _usage(engine: Engine, p_tokens: int, completion: int, timings: Timings) -> dict:
    """Usage as the server reports it; a backend with a prefix cache also says how much of the prompt
    it reused."""
    cached = timings.cached_tokens if engine.cache.capacity_blocks else None
    return shapes.usage(p_tokens, completion, cached)


def _cache_answer(engine: Engine, body: dict, texts: list[list[str]]) -> None:
    """The answer's tokens stay cached after the prompt's, so the next turn of a conversation (which
    repeats it as the assistant's message) reuses them too."""
    if engine.cache.capacity_blocks and texts:
        engine.cache.insert(block_keys(serialise(body, "".join(texts[0]))))


def _drop(request: web.Request) -> None:
    """Cut the connection as a crashed backend would: no [DONE], no final chunk."""
    if request.transport is not None:
        request.transport.abort()


async def _embeddings(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    body = await _read_call(request, engine)
    if isinstance(body, web.Response):
        return body
    inputs = body.get("input")
    if isinstance(inputs, str):
        inputs = [inputs]
    if not isinstance(inputs, list) or not inputs:
        return _error(400, "'input' must be a string or a non-empty array", "invalid_request_error")
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        return _error(400, "'encoding_format' must be 'float' or 'base64'", "invalid_request_error")
    engine.stats.requests += 1
    await engine.network()
    texts = [x if isinstance(x, str) else orjson.dumps(x).decode() for x in inputs]
    dim = engine.config.embedding_dim
    vectors = [embedding(t, dim) for t in texts]
    if encoding == "base64":
        # As OpenAI and vLLM send it (the Node SDK's default): little-endian float32, base64-encoded.
        encoded: list[str] | list[list[float]] = [base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode()
                                                  for v in vectors]
    else:
        encoded = vectors
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(encoded)]
    tokens = sum(count_tokens(t) for t in texts)
    engine.stats.completed += 1
    return _json({"object": "list", "data": data, "model": engine.config.model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})


async def _models(request: web.Request) -> web.Response:
    model = request.app[ENGINE].config.model
    return _json({"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "simulator"}]})


async def _health(request: web.Request) -> web.Response:
    return _json({"status": "ok"})


async def _stats(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    cache = engine.cache
    return _json({"running": engine.running, "queued": engine.queued, "slots": engine.config.slots, **engine.stats.as_dict(),
                  "prefix_cache": {"capacity_tokens": cache.capacity_blocks * BLOCK_TOKENS, "blocks": len(cache),
                                   "lookups": cache.lookups, "hit_tokens": cache.hit_tokens}})


async def _clear_cache(request: web.Request) -> web.Response:
    """Empty the prefix cache (a cold start without a restart), as benchmarks between runs need."""
    request.app[ENGINE].cache.clear()
    return _json({"cleared": True})


async def _props(request: web.Request) -> web.Response:
    """llama.cpp's /props: how many slots the server runs (llama.cpp-flavoured backends only)."""
    engine = request.app[ENGINE]
    if engine.config.report != "llamacpp":
        return _error(404, "File Not Found", "not_found_error")
    return _json({"total_slots": engine.config.slots, "model_path": f"/models/{engine.config.model}.gguf"})


async def _slots(request: web.Request) -> web.Response:
    """llama.cpp's /slots: one entry per slot, busy or idle."""
    engine = request.app[ENGINE]
    if engine.config.report != "llamacpp":
        return _error(404, "File Not Found", "not_found_error")
    return web.Response(body=orjson.dumps([{"id": i, "is_processing": i < engine.running}
                                           for i in range(engine.config.slots)]), content_type="application/json")


async def _metrics(request: web.Request) -> web.Response:
    """Live load in the Prometheus names of the server imitated: llama.cpp's, else vLLM's."""
    engine = request.app[ENGINE]
    lines: list[str] = []
    value: float
    if engine.config.report == "llamacpp":
        for name, value in (("llamacpp:requests_processing", engine.running), ("llamacpp:requests_deferred", engine.queued)):
            lines += [f"# TYPE {name} gauge", f"{name} {value}"]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")
    label = f'{{model_name="{engine.config.model}"}}'
    for name, kind, help_, value in (
        ("vllm:num_requests_running", "gauge", "Number of requests currently running on GPU.", engine.running),
        ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", engine.queued),
        ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", engine.running / engine.config.slots),
    ):
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name}{label} {float(value)}"]
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


async def _set_speed(request: web.Request) -> web.Response:
    """Change how fast the backend runs (tpot_ms, tpot_growth, prefill_tokens_per_s, network_ms) mid-run."""
    engine = request.app[ENGINE]
    body = await _read_json(request)
    if isinstance(body, web.Response):
        return body
    allowed = {"tpot_ms", "tpot_growth", "prefill_tokens_per_s", "network_ms"}
    try:
        engine.config = engine.config.model_copy(update={k: float(v) for k, v in body.items() if k in allowed})
    except (TypeError, ValueError) as exc:
        return _error(400, str(exc), "invalid_request_error")
    return _json({k: getattr(engine.config, k) for k in allowed})


async def _set_faults(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    body = await _read_json(request)
    if isinstance(body, web.Response):
        return body
    try:
        engine.faults = FaultConfig.model_validate(body)
    except ValidationError as exc:
        return _error(400, str(exc), "invalid_request_error")
    return _json(engine.faults.model_dump())
