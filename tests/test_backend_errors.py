"""Backend errors reach the client shaped, blamed rightly, and without the backend's secrets.

Scripted (app.upstream.scripted): each backend answer is played exactly; the shaping is the real one.
"""

from __future__ import annotations

import asyncio

import pytest

from app.config import GatewayConfig
from app.upstream.scripted import Reply, ScriptedTransport, Stream, chunks
from tests.scripted import CHAT, LIMITED_KEY, call, config, in_flight, run

SECRET = "sk-backend-secret-4242424242"


def _with_key(cfg: GatewayConfig) -> GatewayConfig:
    backends = {n: b.model_copy(update={"api_key": __import__("pydantic").SecretStr(SECRET)}) for n, b in cfg.backends.items()}
    return cfg.model_copy(update={"backends": backends})


@pytest.mark.parametrize("status", [401, 403])
def test_backend_refusing_the_gateways_key_is_a_generic_502_without_the_key(status):
    echo = {"error": {"message": f"Incorrect API key provided: {SECRET}", "type": "invalid_request_error",
                      "code": "invalid_api_key"}}
    t = ScriptedTransport(lambda name, n: Reply(echo, status=status))

    async def scenario(gw):
        return await call(gw)

    answer = run(_with_key(config()), t, scenario)
    assert answer.status == 502
    assert answer.error["code"] == "upstream_misconfigured"
    assert SECRET.encode() not in answer.body and b"sk-backend" not in answer.body
    assert answer.headers["x-should-retry"] == "false"


def test_backend_key_echoed_in_an_answer_is_redacted():
    async def scenario(gw):
        plain = await call(gw)
        streamed = await call(gw, {**CHAT, "stream": True})
        return plain, streamed

    t = ScriptedTransport(lambda name, n: Reply(__import__("app.upstream.scripted", fromlist=["x"]).completion(
        f"Bearer {SECRET}")) if n == 0 else Stream(chunks(f"k={SECRET}") + [{"echo": SECRET}]))
    plain, streamed = run(_with_key(config()), t, scenario)
    assert plain.status == 200 and SECRET.encode() not in plain.body
    assert streamed.status == 200 and SECRET.encode() not in streamed.body


def test_context_overflow_keeps_its_meaning_with_openais_code():
    llamacpp = {"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it",
                          "type": "exceed_context_size_error"}}
    t = ScriptedTransport(lambda name, n: Reply(llamacpp, status=400))

    async def scenario(gw):
        return await call(gw)

    answer = run(config(), t, scenario)
    assert answer.status == 400
    assert answer.error["code"] == "context_length_exceeded"
    assert answer.error["type"] == "invalid_request_error"


def test_backend_numeric_error_code_is_not_passed_on_as_a_code():
    t = ScriptedTransport(lambda name, n: Reply({"error": {"code": 400, "message": "bad temperature"}}, status=400))

    async def scenario(gw):
        return await call(gw)

    answer = run(config(), t, scenario)
    assert answer.status == 400 and answer.error["code"] is None and answer.error["message"] == "bad temperature"


@pytest.mark.parametrize("reply", [
    Reply({"id": "x"}, status=302, headers={"location": "http://elsewhere/"}),
    Reply(status=201),
    Reply(status=204, body=b""),
    Reply(b"<html>502 Bad Gateway</html>"),
    Reply(b"[1, 2, 3]"),
], ids=["302", "201", "204", "html-labelled-json", "json-array"])
def test_unshaped_upstream_answers_become_upstream_bad_response(reply):
    t = ScriptedTransport(lambda name, n: reply)
    cfg = config(models={"chat": {"backends": ["a", "b"], "retry": {"max_attempts": 1}}})

    async def scenario(gw):
        return await call(gw), in_flight(gw)

    answer, held = run(cfg, t, scenario)
    assert answer.status == 502
    assert answer.error["code"] == "upstream_bad_response"
    assert held == {"a": 0, "b": 0}


def test_poison_requests_do_not_eject_backends_for_other_tenants():
    """Real llama.cpp answers 500 to an image sent to a text-only model, on every backend alike."""
    poison = {"model": "chat", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}

    def script(name, n):
        return Reply({"error": {"message": "image input is not supported", "type": "server_error"}}, status=500) \
            if t.calls[-1].body["messages"][0]["content"] != "hi" else Reply()

    t = ScriptedTransport(script)

    async def scenario(gw):
        poisoned = [(await call(gw, poison)).status for _ in range(20)]
        others = [(await call(gw, key=LIMITED_KEY)).status for _ in range(10)]
        return poisoned, others, gw.ejected_backends()

    poisoned, others, ejected = run(config(), t, scenario)
    assert set(poisoned) == {500}
    assert others == [200] * 10
    assert ejected == []


def test_a_backend_failing_everything_is_still_ejected():
    t = ScriptedTransport(lambda name, n: Reply({"error": {"message": "boom"}}, status=500) if name == "a" else Reply())

    async def scenario(gw):
        statuses = [(await call(gw)).status for _ in range(12)]
        return statuses, gw.ejected_backends()

    statuses, ejected = run(config(models={"chat": {"backends": ["a", "b"], "strategy": "round_robin"}}), t, scenario)
    assert statuses == [200] * 12  # retried on b
    assert ejected == ["a"]


def test_fallbacks_never_take_a_key_to_an_alias_it_may_not_use():
    models = {
        "chat": {"backends": ["a"], "fallbacks": ["billed"], "context_fallback": "long", "retry": {"max_attempts": 1}},
        "billed": {"backends": ["b"]},
        "long": {"backends": ["b"]},
    }
    overflow = Reply({"error": {"message": "This model's maximum context length is 4096 tokens"}}, status=400)
    down = Reply({"error": {"message": "down"}}, status=503)
    t = ScriptedTransport(lambda name, n: (overflow if n < 2 else down) if name == "a" else Reply())

    async def scenario(gw):
        limited_overflow = await call(gw, key=LIMITED_KEY)
        full_overflow = await call(gw)
        limited_down = await call(gw, key=LIMITED_KEY)
        full_down = await call(gw)
        return limited_overflow, full_overflow, limited_down, full_down

    lo, fo, ld, fd = run(config(models=models), t, scenario)
    assert lo.status == 400 and lo.error["code"] == "context_length_exceeded"
    assert fo.status == 200 and fo.headers["x-slipstream-fallback"].startswith("long")
    assert ld.status == 503
    assert fd.status == 200 and fd.headers["x-slipstream-fallback"].startswith("billed")
    assert [c.backend for c in t.calls].count("b") == 2  # only the unrestricted key reached it


def test_retry_hints_for_the_openai_sdk():
    cfg = config(models={"chat": {"backends": ["a", "b"], "retry": {"max_attempts": 1}}})
    t = ScriptedTransport(lambda name, n: [Reply(status=400, body={"error": {"message": "bad"}}),
                                           Reply(status=503, body={"error": {"message": "busy"}}, headers={"retry-after": "3"}),
                                           __import__("app.upstream.scripted", fromlist=["x"]).Hang()][n])

    async def scenario(gw):
        bad = await call(gw)
        busy = await call(gw)
        late = await call(gw, headers={"x-slipstream-timeout-ms": "100"})
        return bad, busy, late

    bad, busy, late = run(cfg, t, scenario)
    assert bad.status == 400 and bad.headers["x-should-retry"] == "false"
    assert busy.status == 503 and busy.headers["x-should-retry"] == "true" and busy.headers["retry-after"] == "3"
    assert late.status == 504 and late.error["code"] == "deadline_exceeded" and late.headers["x-should-retry"] == "false"


@pytest.mark.parametrize("stream,ending", [
    (Stream(chunks("abc"), cut=True), "error"),
    (Stream(chunks("abc")[:-1], done=False), "error"),  # clean close, no finish reason, no [DONE]
    (Stream(chunks("abc"), done=False), "done"),  # finished, only [DONE] missing: completed for the client
    (Stream(chunks("ab") + [{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}], done=False), "done"),
], ids=["cut", "no-finish", "no-done", "no-done-final-chunk"])
def test_every_stream_ends_with_done_or_an_error_event(stream, ending):
    t = ScriptedTransport(lambda name, n: stream)

    async def scenario(gw):
        return await call(gw, {**CHAT, "stream": True}), in_flight(gw), t.open_streams

    answer, held, open_streams = run(config(), t, scenario)
    last = answer.events[-1]
    assert (last == b"[DONE]") if ending == "done" else last.startswith(b'{"error"')
    assert held == {"a": 0, "b": 0} and open_streams == 0


def test_n2_stream_with_one_choice_finished_ends_with_an_error():
    one_finished = [{"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": None},
                                 {"index": 1, "delta": {"content": "b"}, "finish_reason": None}]},
                    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
    t = ScriptedTransport(lambda name, n: Stream(one_finished, done=False))

    async def scenario(gw):
        return await call(gw, {**CHAT, "stream": True, "n": 2})

    answer = run(config(), t, scenario)
    assert answer.events[-1].startswith(b'{"error"')


def test_deadline_bounds_the_wait_for_a_slot():
    """Two 2-slot backends all busy: a request with an 800 ms deadline answers at its deadline, not the queue's."""
    t = ScriptedTransport(lambda name, n: Reply(delay_s=3.0) if n < 4 else Reply())
    cfg = config(server={"queue_timeout_s": 10})

    async def scenario(gw):
        loop = asyncio.get_running_loop()
        hogs = [asyncio.ensure_future(call(gw)) for _ in range(4)]
        await asyncio.sleep(0.05)
        start = loop.time()
        late = await asyncio.gather(*(call(gw, headers={"x-slipstream-timeout-ms": "800"}) for _ in range(6)))
        took = loop.time() - start
        for h in hogs:
            h.cancel()
        await asyncio.gather(*hogs, return_exceptions=True)
        return [a.status for a in late], [a.error["code"] for a in late], took

    statuses, codes, took = run(cfg, t, scenario)
    assert statuses == [504] * 6 and set(codes) == {"deadline_exceeded"}
    assert took < 1.3


def test_deadline_bounds_a_slow_cache_lookup():
    """An embedder or cache store that stalls (a huge prompt, a slow Redis) costs at most the deadline."""
    t = ScriptedTransport(lambda name, n: Reply())

    async def scenario(gw):
        async def stalled(*args):
            await asyncio.sleep(5)

        gw.cache.lookup_semantic = stalled
        loop = asyncio.get_running_loop()
        start = loop.time()
        answer = await call(gw, {**CHAT, "temperature": 0}, headers={"x-slipstream-timeout-ms": "300"})
        return answer, loop.time() - start

    answer, took = run(config(), t, scenario)
    assert took < 0.6
    assert answer.status == 504 and answer.error["code"] == "deadline_exceeded"
