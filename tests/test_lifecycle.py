"""One owner per attempt: the slot, the upstream reply and the record are given back once, on every path.

These run over the scripted transport (app.upstream.scripted), so each path is played exactly.
"""

from __future__ import annotations

import asyncio

import pytest

from app.errors import UpstreamUnreachable
from app.upstream.scripted import Fail, Hang, Reply, ScriptedTransport, Stream, chunks
from tests.scripted import CHAT, call, config, in_flight, run

STREAM = {**CHAT, "stream": True}


def test_json_answer_frees_its_slot():
    t = ScriptedTransport(lambda name, n: Reply())

    async def scenario(gw):
        answer = await call(gw)
        assert answer.status == 200 and answer.json()["choices"][0]["message"]["content"] == "ok"
        return in_flight(gw)

    assert run(config(), t, scenario) == {"a": 0, "b": 0}


def test_stream_that_never_started_frees_its_slot():
    """The client is gone before the first byte: the relay generator never runs, the owner still closes."""
    t = ScriptedTransport(lambda name, n: Stream())

    async def scenario(gw):
        import orjson

        from app import pipeline
        from tests.scripted import KEY

        response = await pipeline.handle(gw, __import__("app.protocols").protocols.CHAT, orjson.dumps(STREAM),
                                         {"authorization": f"Bearer {KEY}"}, "/v1/chat/completions")

        async def send(message):
            raise OSError("client gone")

        async def receive():
            await asyncio.sleep(3600)

        await response({"type": "http"}, receive, send)
        return in_flight(gw), t.open_streams

    assert run(config(), t, scenario) == ({"a": 0, "b": 0}, 0)


def test_client_leaving_mid_stream_closes_upstream_and_frees_slot():
    t = ScriptedTransport(lambda name, n: Stream(events=chunks("x" * 50), gap_s=0.01))

    async def scenario(gw):
        await call(gw, STREAM, leave_after_s=0.05)
        return in_flight(gw), t.open_streams

    assert run(config(), t, scenario) == ({"a": 0, "b": 0}, 0)


def test_client_leaving_before_json_answer_cancels_upstream_call():
    t = ScriptedTransport(lambda name, n: Hang())

    async def scenario(gw):
        answer = await call(gw, leave_after_s=0.05)
        return answer, in_flight(gw), t.in_flight

    assert run(config(), t, scenario) == (None, {"a": 0, "b": 0}, 0)


def test_failed_attempts_free_their_slots():
    t = ScriptedTransport(lambda name, n: Fail(UpstreamUnreachable(f"backend {name} is unreachable")))

    async def scenario(gw):
        answer = await call(gw)
        return answer.status, in_flight(gw)

    status, held = run(config(), t, scenario)
    assert status == 502 and held == {"a": 0, "b": 0}


def test_hedge_loser_frees_its_slot():
    cfg = config({"chat": {"backends": ["a", "b"], "hedge": {"enabled": True, "min_delay_ms": 20, "budget_ratio": 1.0}}})
    t = ScriptedTransport(lambda name, n: Stream(delay_s=0.5) if n == 0 else Stream())

    async def scenario(gw):
        answer = await call(gw, STREAM)
        await asyncio.sleep(0)
        return answer.events[-1], in_flight(gw), t.open_streams

    assert run(cfg, t, scenario) == (b"[DONE]", {"a": 0, "b": 0}, 0)


def test_hedging_answers_from_the_second_backend_when_the_first_is_late():
    """Fails when hedging is off: the late first attempt would then be the answer, 0.5 s later."""
    cfg = config({"chat": {"backends": ["a", "b"], "hedge": {"enabled": True, "min_delay_ms": 30, "budget_ratio": 1.0}}})
    t = ScriptedTransport(lambda name, n: Reply(delay_s=0.6) if n == 0 else Reply())

    async def scenario(gw):
        loop = asyncio.get_running_loop()
        start = loop.time()
        # Two output tokens: predicted to take ~0.06 s (the prior), so a hedge leaves after ~0.12 s.
        answer = await call(gw, {**CHAT, "max_tokens": 2})
        return answer.status, loop.time() - start, [c.backend for c in t.calls]

    status, took, backends = run(cfg, t, scenario)
    assert status == 200
    assert took < 0.4
    assert len(set(backends)) == 2  # the hedge went to the other backend


def test_a_stream_ranked_by_its_end_is_hedged_after_its_predicted_first_token():
    """A hedge races what an attempt returns, a stream's first event; latency_aware ranks streams by their
    end. A 200-token answer is predicted to end seconds away (the prior's decode), its first token within
    milliseconds: fails when the hedge waits a factor of the end, as the late first attempt then answers,
    0.6 s later."""
    cfg = config({"chat": {"backends": ["a", "b"], "strategy": "latency_aware",
                           "hedge": {"enabled": True, "min_delay_ms": 30, "budget_ratio": 1.0}}})
    t = ScriptedTransport(lambda name, n: Stream(delay_s=0.6) if n == 0 else Stream())

    async def scenario(gw):
        loop = asyncio.get_running_loop()
        start = loop.time()
        answer = await call(gw, {**STREAM, "max_tokens": 200})
        return answer.events[-1], loop.time() - start, [c.backend for c in t.calls], in_flight(gw)

    last, took, backends, held = run(cfg, t, scenario)
    assert last == b"[DONE]" and took < 0.4
    assert len(set(backends)) == 2 and held == {"a": 0, "b": 0}  # the hedge went to the other backend


def test_stream_stopped_by_the_server_ends_with_an_error_event_and_frees_its_slot():
    """Shutdown past its grace period cancels the response task: the client still gets an error event."""
    import orjson

    from app import pipeline
    from app.protocols import CHAT
    from app.telemetry.recent import revive
    from tests.scripted import KEY

    t = ScriptedTransport(lambda name, n: Stream(events=chunks("x" * 100), gap_s=0.01))

    async def scenario(gw):
        response = await pipeline.handle(gw, CHAT, orjson.dumps(STREAM), {"authorization": f"Bearer {KEY}"},
                                         "/v1/chat/completions")
        sent = []

        async def send(message):
            sent.append(message)

        async def receive():
            await asyncio.sleep(3600)

        task = asyncio.ensure_future(response({"type": "http"}, receive, send))
        await asyncio.sleep(0.1)
        task.cancel()  # what the server does to a request still running when it stops
        await asyncio.gather(task, return_exceptions=True)
        last = sent[-1]
        [recorded] = gw.telemetry.recent.newest(1)
        return last.get("more_body"), last.get("body", b""), in_flight(gw), t.open_streams, revive(recorded)

    more, body, held, open_streams, recorded = run(config(), t, scenario)
    assert more is False and body.startswith(b'data: {"error"')
    assert held == {"a": 0, "b": 0} and open_streams == 0
    # Recorded (log line, metrics, span, console) as the client saw it: the gateway broke the stream. It
    # was recorded as client_disconnected, so every deploy that cut streams read as clients leaving.
    assert (recorded.outcome.value, recorded.error_type, recorded.status) == ("stream_broken", "stream_interrupted", 503)


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_a_json_call_stopped_by_the_server_gets_a_retryable_503_in_its_api_shape(api):
    """Shutdown past its grace period cancels what still runs: a JSON client used to get uvicorn's plain-text 500."""
    from app.protocols import CHAT as CHAT_API
    from app.protocols import MESSAGES, RESPONSES
    from app.telemetry.recent import revive

    protocol = {"chat": CHAT_API, "messages": MESSAGES, "responses": RESPONSES}[api]
    body = {"chat": CHAT, "messages": {**CHAT, "max_tokens": 8}, "responses": {"model": "chat", "input": "hi"}}[api]
    t = ScriptedTransport(lambda name, n: Hang())

    async def scenario(gw):
        task = asyncio.ensure_future(call(gw, body, endpoint=protocol))
        await asyncio.sleep(0.1)
        task.cancel()  # what the server does to a request still running when it stops
        answer = await task
        [recorded] = gw.telemetry.recent.newest(1)
        return answer, in_flight(gw), t.in_flight, revive(recorded)

    answer, held, upstream, recorded = run(config(), t, scenario)
    assert answer.status == 503 and answer.headers["x-should-retry"] == "true"
    if api == "messages":
        assert answer.json() == {"type": "error", "error": {"type": "api_error", "message": answer.json()["error"]["message"]}}
    else:
        assert (answer.error["type"], answer.error["code"]) == ("api_error", "request_interrupted")
    assert held == {"a": 0, "b": 0} and upstream == 0
    # Recorded as the client saw it, not as a client that left (499).
    assert (recorded.outcome.value, recorded.error_type, recorded.status) == ("upstream_error", "request_interrupted", 503)


def _stop_a_route_that_hangs(method: str, path: str, headers: list[tuple[bytes, bytes]], client_left: bool = False):
    """Serve `method path` through the gateway's front (app.http.fastpath) with a FastAPI-side route that never
    answers, cancel it as uvicorn does past the shutdown grace period, and return what was sent."""
    from starlette.applications import Starlette
    from starlette.routing import Route

    from app.http.fastpath import FastPath
    from app.relay.loop import CLIENT_GONE, ClientGone

    async def hangs(request):
        await asyncio.Event().wait()

    front = FastPath(Starlette(routes=[Route("/{rest:path}", hangs, methods=["GET", "POST", "DELETE"])]), 1024)
    gone = ClientGone()
    scope = {"type": "http", "method": method, "path": path, "raw_path": path.encode(), "query_string": b"",
             "headers": headers, "extensions": {CLIENT_GONE: gone}}
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    async def scenario():
        task = asyncio.ensure_future(front(scope, receive, send))
        await asyncio.sleep(0.05)
        if client_left:
            gone.fire()
        task.cancel()
        await task  # the front answers; the cancellation does not escape to the server
        return sent

    return asyncio.run(scenario())


@pytest.mark.parametrize("method,path,headers,shape", [
    ("GET", "/v1/responses/resp_1", [], "openai"),
    ("DELETE", "/v1/responses/resp_1", [], "openai"),
    ("GET", "/v1/models", [], "openai"),
    ("GET", "/v1/models", [(b"anthropic-version", b"2023-06-01")], "anthropic"),
    ("GET", "/v1/messages/batches", [(b"anthropic-version", b"2023-06-01")], "anthropic"),
    ("GET", "/admin/tenants", [], "openai"),
    ("GET", "/console/api/cache", [], "openai"),
    ("POST", "/console/api/apply", [], "openai"),
])
def test_any_route_stopped_by_the_server_gets_a_retryable_503_in_its_api_shape(method, path, headers, shape):
    """Past the shutdown grace a route the fast path does not serve got uvicorn's plain-text 500."""
    import orjson

    start, body = _stop_a_route_that_hangs(method, path, headers)
    assert start["status"] == 503
    sent_headers = dict(start["headers"])
    assert sent_headers[b"x-should-retry"] == b"true" and sent_headers[b"retry-after"] == b"1"
    assert sent_headers[b"content-type"] == b"application/json"
    error = orjson.loads(body["body"])
    if shape == "anthropic":
        assert error["type"] == "error" and error["error"]["type"] == "api_error" and "send it again" in error["error"]["message"]
    else:
        assert (error["error"]["type"], error["error"]["code"]) == ("api_error", "request_interrupted")


def test_a_route_whose_client_left_is_stopped_without_an_answer():
    assert _stop_a_route_that_hangs("GET", "/admin/tenants", [], client_left=True) == []


def _hedged_first_wins(hedge: bool):
    """The first attempt answers at ~0.15 s; with hedging on, a hedge to the other backend left at ~0.06 s
    and is still waiting when the first wins. Returns (serving backend, what its model learned, spans)."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from app.gateway import Gateway

    cfg = config({"chat": {"backends": ["a", "b"], "strategy": "round_robin",
                           "hedge": {"enabled": hedge, "min_delay_ms": 20, "after_factor": 1.0, "budget_ratio": 1.0}}},
                 telemetry={"tracing": {"enabled": True}})
    t = ScriptedTransport(lambda name, n: Stream(delay_s=0.15) if n == 0 else Stream(delay_s=2.0))
    exporter = InMemorySpanExporter()

    async def main():
        gw = Gateway.start(cfg, span_exporter=exporter, transport=t)
        try:
            answer = await call(gw, {**STREAM, "max_tokens": 2})  # predicted ~0.06 s: the hedge leaves early
            assert answer.events[-1] == b"[DONE]"
            gw.telemetry.tracing.force_flush()
            served = answer.headers["x-slipstream-backend"]
            return served, gw.models[served].observed_latency, [c.backend for c in t.calls], in_flight(gw)
        finally:
            await gw.aclose()

    served, learned, called, held = asyncio.run(main())
    spans = [s for s in exporter.get_finished_spans() if s.kind.name == "CLIENT"]
    return served, learned, called, held, spans


def test_first_attempt_winning_after_the_hedge_left_teaches_its_own_backend():
    """The stream's end belongs to the attempt that served it, not to the hedge that lost (issue 22)."""
    plain = _hedged_first_wins(hedge=False)
    served, learned, called, held, spans = _hedged_first_wins(hedge=True)
    assert len(called) == 2 and called[0] == served  # the hedge left, and the first attempt still won
    assert held == {"a": 0, "b": 0}
    assert plain[1] >= 0.14 and learned >= 0.14  # both taught the serving backend its ~0.15 s
    final = [s for s in spans if "gen_ai.response.finish_reasons" in s.attributes]
    assert [s.attributes["slipstream.backend"] for s in final] == [served]
    loser = next(s for s in spans if s.attributes["slipstream.backend"] != served)
    assert loser.attributes.get("error.type") == "cancelled"
