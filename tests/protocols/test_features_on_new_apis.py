"""Gateway features chat has, on /v1/messages (Anthropic) and /v1/responses (OpenAI Responses) as well
(issue 23, must-have 5): hedging, priority shedding behind a full queue, poison requests that eject no
backend, the latency-target headers, and same-alias retries after a 5xx.

Each test is a sibling of chat's (tests/test_lifecycle.py, tests/admission/test_wait_queue.py,
tests/test_backend_errors.py, tests/routing/test_slo.py), parametrized over the two APIs' bodies, through
the real pipeline over the scripted transport (app.upstream.scripted; no sockets). The backends are
chat-only, so both APIs are translated to chat completions and back.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import anthropic
import openai
import orjson
import pytest

from app.config import GatewayConfig
from app.protocols import MESSAGES, RESPONSES, ClientProtocol
from app.upstream.scripted import Reply, ScriptedTransport, Stream, chunks, completion
from app.upstream.sse import EventSplitter, event_data
from tests.conftest import start_gateway
from tests.scripted import LIMITED_KEY, Answer, call, in_flight, run
from tests.scripted import config as scripted_config
from tests.support import Process, free_port, write_yaml


@dataclass(frozen=True)
class Api:
    endpoint: ClientProtocol
    headers: dict[str, str]

    def body(self, text: str = "hi", model: str = "chat", max_tokens: int = 16, stream: bool = False) -> dict:
        if self.endpoint is MESSAGES:
            body: dict = {"model": model, "max_tokens": max_tokens, "messages": [{"role": "user", "content": text}]}
        else:
            body = {"model": model, "input": text, "max_output_tokens": max_tokens}
        return {**body, "stream": True} if stream else body

    def text(self, answer: Answer) -> str:
        """The answer's text, whole or streamed, read as this API's client reads it."""
        if answer.headers.get("content-type", "").startswith("text/event-stream"):
            events = [orjson.loads(event_data(raw)) for raw in EventSplitter().feed(answer.body)]
            kind = "content_block_delta" if self.endpoint is MESSAGES else "response.output_text.delta"
            last = "message_stop" if self.endpoint is MESSAGES else "response.completed"
            assert events[-1]["type"] == last, events[-1]
            return "".join(e["delta"]["text"] if self.endpoint is MESSAGES else e["delta"]
                           for e in events if e["type"] == kind)
        body = answer.json()
        if self.endpoint is MESSAGES:
            return "".join(b["text"] for b in body["content"] if b["type"] == "text")
        return "".join(c["text"] for item in body["output"] if item["type"] == "message"
                       for c in item["content"] if c["type"] == "output_text")

    def reply(self, text: str, native: bool) -> dict:
        """A backend's whole answer: chat's, or this API's own when the backend speaks it."""
        if not native:
            return completion(text)
        if self.endpoint is MESSAGES:
            return {"id": "msg_1", "type": "message", "role": "assistant", "model": "m-a",
                    "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
                    "usage": {"input_tokens": 3, "output_tokens": 1}}
        return {"id": "resp_1", "object": "response", "created_at": 0, "status": "completed", "model": "m-a",
                "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                            "content": [{"type": "output_text", "text": text, "annotations": []}]}],
                "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4}}

    def path(self, native: bool) -> str:
        """The upstream path a request of this API takes."""
        return ("messages" if self.endpoint is MESSAGES else "responses") if native else "chat/completions"

    @property
    def overloaded(self) -> tuple[int, str]:
        """Status and error type of "busy, retry later": Anthropic's 529, the gateway's OpenAI-shaped 503."""
        return (529 if self.endpoint is MESSAGES else 503), "overloaded_error"

    def error_type(self, answer: Answer) -> str:
        """The error's type in this API's own shape (Anthropic's envelope or OpenAI's)."""
        body = answer.json()
        if self.endpoint is MESSAGES:
            assert body["type"] == "error"
        return body["error"]["type"]


def config(models: dict | None = None, backends: tuple[str, ...] = ("a", "b"), native: bool = False,
           **sections) -> GatewayConfig:
    """tests.scripted's config with chat-only backends (both APIs translated to chat and back), or with
    `native` backends that speak both APIs themselves (passthrough)."""
    cfg = scripted_config(models, backends, **sections)
    apis = ("chat", "messages", "responses") if native else ("chat",)
    return cfg.model_copy(update={"backends": {n: b.model_copy(update={"apis": apis}) for n, b in cfg.backends.items()}})


APIS = [Api(MESSAGES, {"anthropic-version": "2023-06-01"}), Api(RESPONSES, {})]
IDS = ["messages", "responses"]


async def ask(gw, api: Api, body: dict, headers: dict[str, str] | None = None, key: str | None = None) -> Answer:
    extra = {"key": key} if key else {}
    answer = await call(gw, body, endpoint=api.endpoint, headers={**api.headers, **(headers or {})}, **extra)
    assert answer is not None
    return answer


# (a) hedging --------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("stream", "native"), [(False, False), (False, True), (True, False)],
                         ids=["whole", "whole-native", "stream"])
@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_a_late_first_attempt_is_hedged_and_the_hedge_answers(api, stream, native):
    """Sibling of test_lifecycle's hedging test. Fails with hedging off: the late first attempt would
    answer "slow", 0.8 s later."""
    cfg = config({"chat": {"backends": ["a", "b"], "hedge": {"enabled": True, "min_delay_ms": 30,
                                                              "after_factor": 1, "budget_ratio": 1.0}}},
                 native=native)
    if stream:
        t = ScriptedTransport(lambda name, n: Stream(chunks("slow"), delay_s=0.8) if n == 0 else Stream(chunks("fast")))
    else:
        t = ScriptedTransport(lambda name, n: Reply(api.reply("slow", native), delay_s=0.8) if n == 0
                              else Reply(api.reply("fast", native)))

    async def scenario(gw):
        loop = asyncio.get_running_loop()
        start = loop.time()
        # Two output tokens: predicted ~0.06 s (the prior), so the hedge leaves after ~0.1 s.
        answer = await ask(gw, api, api.body(max_tokens=2, stream=stream))
        took = loop.time() - start
        await asyncio.sleep(0)
        return answer, took, [c.backend for c in t.calls], in_flight(gw)

    answer, took, backends, held = run(cfg, t, scenario)
    assert answer.status == 200 and api.text(answer) == "fast"
    assert took < 0.6
    assert len(backends) == 2 and len(set(backends)) == 2  # the hedge went to the other backend
    assert held == {"a": 0, "b": 0}  # the loser gave its slot back
    assert {c.path for c in t.calls} == {api.path(native)}


# (b) priority admission -----------------------------------------------------------------------------------

@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_a_batch_request_behind_a_full_queue_is_shed_for_an_interactive_one(api):
    """Sibling of test_wait_queue's router shedding test, end to end. One backend with 2 slots, both held;
    a queue of one. The batch request waits; an interactive newcomer sheds it (503, or Anthropic's 529, in the API's own shape,
    with Retry-After) and is served. Fails if the priority header were not read on this API: the
    interactive newcomer would then be no more important than the waiter and refused itself."""
    cfg = config({"chat": {"backends": ["a"]}}, backends=("a",), limits={"queue": {"max_waiting": 1}})
    t = ScriptedTransport(lambda name, n: Reply(completion(f"answer {n}"), delay_s=0.6 if n < 2 else 0.0))

    async def scenario(gw):
        holders = [asyncio.create_task(ask(gw, api, api.body("hold"))) for _ in range(2)]
        await asyncio.sleep(0.05)  # both slots held
        batch = asyncio.create_task(ask(gw, api, api.body("batch"), {"x-slipstream-priority": "batch"}))
        await asyncio.sleep(0.05)  # queued
        interactive = asyncio.create_task(ask(gw, api, api.body("now"), {"x-slipstream-priority": "interactive"}))
        shed = await batch
        served = await interactive
        await asyncio.gather(*holders)
        return shed, served, in_flight(gw)

    shed, served, held = run(cfg, t, scenario)
    assert (shed.status, api.error_type(shed)) == api.overloaded and int(shed.headers["retry-after"]) >= 1
    assert "shed" in shed.json()["error"]["message"]
    assert served.status == 200 and api.text(served).startswith("answer")
    assert held == {"a": 0}


# (c) poison requests ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("native", [False, True], ids=["translated", "native"])
@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_poison_requests_do_not_eject_backends_for_other_tenants(api, native):
    """Sibling of test_backend_errors' poison test: every backend answers the same 500 to one request
    (real llama.cpp does so for an image sent to a text-only model). Fails if those 500s counted against
    the backends: the breaker (3 consecutive failures) would eject both and other tenants would get 503."""

    def script(name, n):
        poisoned = b"POISON" in orjson.dumps(t.calls[-1].body)
        return Reply({"error": {"message": "image input is not supported", "type": "server_error"}}, status=500) \
            if poisoned else Reply(api.reply("fine", native))

    t = ScriptedTransport(script)

    async def scenario(gw):
        poisoned = [await ask(gw, api, api.body("POISON")) for _ in range(12)]
        others = [await ask(gw, api, api.body(), key=LIMITED_KEY) for _ in range(6)]
        return poisoned, others, gw.ejected_backends()

    poisoned, others, ejected = run(config(native=native), t, scenario)
    assert {a.status for a in poisoned} == {500}
    assert api.error_type(poisoned[0]) in ("api_error", "server_error")
    assert [a.status for a in others] == [200] * 6 and api.text(others[0]) == "fine"
    assert ejected == []
    assert {c.path for c in t.calls} == {api.path(native)}


# (d) latency-target headers -------------------------------------------------------------------------------

@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_a_sheddable_request_with_an_unmeetable_target_is_refused_early(api):
    """Sibling of tests/routing/test_slo.py: 503 (Anthropic: 529) latency_target_unmeetable with Retry-After, before any
    upstream call. Fails if this API ignored x-slipstream-ttft-slo-ms (it would be served, 200)."""
    t = ScriptedTransport(lambda name, n: Reply(completion("served")))

    async def scenario(gw):
        return await ask(gw, api, api.body("hello " * 200),
                         {"x-slipstream-ttft-slo-ms": "0.5", "x-slipstream-priority": "batch"})

    answer = run(config(), t, scenario)
    assert (answer.status, api.error_type(answer)) == api.overloaded and int(answer.headers["retry-after"]) >= 1
    assert "latency target" in answer.json()["error"]["message"]
    if api.endpoint is RESPONSES:
        assert answer.json()["error"]["code"] == "latency_target_unmeetable"
    assert t.calls == []


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_an_interactive_request_with_an_unmeetable_target_is_still_served(api):
    t = ScriptedTransport(lambda name, n: Reply(completion("served")))

    async def scenario(gw):
        return await ask(gw, api, api.body("hello " * 200), {"x-slipstream-ttft-slo-ms": "0.5"})

    answer = run(config(), t, scenario)
    assert answer.status == 200 and api.text(answer) == "served"


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_a_malformed_latency_target_is_the_clients_400_in_its_api_shape(api):
    t = ScriptedTransport(lambda name, n: Reply(completion("served")))

    async def scenario(gw):
        return await ask(gw, api, api.body(), {"x-slipstream-ttft-slo-ms": "fast"})

    answer = run(config(), t, scenario)
    assert answer.status == 400 and api.error_type(answer) == "invalid_request_error"
    assert "x-slipstream-ttft-slo-ms" in answer.body.decode()
    assert t.calls == []


# (e) same-alias retries after a 5xx -----------------------------------------------------------------------

@pytest.mark.parametrize("native", [False, True], ids=["translated", "native"])
@pytest.mark.parametrize("status", [500, 503])
@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_a_5xx_is_retried_on_the_aliass_other_backend(api, status, native):
    """Sibling of test_backend_errors' "still ejected" retry. Fails without retries: the client would get
    the 5xx."""
    t = ScriptedTransport(lambda name, n: Reply({"error": {"message": "boom"}}, status=status) if n == 0
                          else Reply(api.reply("retried", native)))
    cfg = config({"chat": {"backends": ["a", "b"], "strategy": "round_robin"}}, native=native)

    async def scenario(gw):
        return await ask(gw, api, api.body())

    answer = run(cfg, t, scenario)
    assert answer.status == 200 and api.text(answer) == "retried"
    assert answer.headers["x-slipstream-attempts"] == "2" and "x-slipstream-fallback" not in answer.headers
    assert t.calls[0].backend != t.calls[1].backend
    assert [c.path for c in t.calls] == [api.path(native)] * 2


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_a_5xx_before_a_stream_starts_is_retried_and_the_stream_served(api):
    """The stream's variant: a 503 before any event is retried on the alias's other backend, and the client
    sees one whole stream in its API's events. Fails without retries (the client would get the 503)."""
    t = ScriptedTransport(lambda name, n: Reply({"error": {"message": "busy"}}, status=503) if n == 0
                          else Stream(chunks("retried")))
    cfg = config({"chat": {"backends": ["a", "b"], "strategy": "round_robin"}})

    async def scenario(gw):
        return await ask(gw, api, api.body(stream=True))

    answer = run(cfg, t, scenario)
    assert answer.status == 200 and api.text(answer) == "retried"
    assert answer.headers["x-slipstream-attempts"] == "2"
    assert t.calls[0].backend != t.calls[1].backend


# (d) again, end to end: the official SDKs against a real gateway process over the simulator ----------------

@pytest.fixture(scope="module")
def slo_gateway(tmp_path_factory):
    """As tests/routing/test_slo.py: one chat-only simulated backend at 2000 prompt tokens/s, so a
    200-word prompt's TTFT is predicted far above 0.5 ms and well under 20 s."""
    tmp = tmp_path_factory.mktemp("slo-apis")
    port = free_port()
    sim = write_yaml(tmp / "sim.yaml", {"simulator": {"seed": 1, "backends": {
        "b": dict(port=port, model="m", prefill_tokens_per_s=2000, tpot_ms=1, output=dict(median=4, sigma=0, max=4))}}})
    proc = Process(["simulate", "--config", str(sim)], tmp / "sim.log")
    proc.wait_listening(port)
    gw = start_gateway(tmp, None, {"auth": {"mode": "open"},
                                   "backends": {"b": {"base_url": f"http://127.0.0.1:{port}/v1", "model": "m",
                                                      "apis": ["chat"]}},
                                   "models": {"m": {"backends": ["b"]}}})
    yield gw
    gw.process.stop()
    proc.stop()


def sdk_call(gw, api: Api, headers: dict[str, str]) -> str:
    """One call through the API's official SDK; returns the answer's text."""
    prompt = "hello " * 200
    if api.endpoint is MESSAGES:
        client = anthropic.Anthropic(base_url=gw.url, api_key="sk-open-0123456789", max_retries=0)
        message = client.messages.create(model="m", max_tokens=4, messages=[{"role": "user", "content": prompt}],
                                          extra_headers=headers)
        return "".join(b.text for b in message.content if b.type == "text")
    return gw.client("sk-open-0123456789").responses.create(model="m", input=prompt, max_output_tokens=16,
                                                            extra_headers=headers).output_text


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_sdk_a_sheddable_request_with_an_unmeetable_target_is_refused_and_a_reachable_one_served(slo_gateway, api):
    """Fails if the real HTTP route dropped the target or priority headers for this API."""
    error = anthropic.APIStatusError if api.endpoint is MESSAGES else openai.APIStatusError
    with pytest.raises(error) as refused:
        sdk_call(slo_gateway, api, {"x-slipstream-ttft-slo-ms": "0.5", "x-slipstream-priority": "batch"})
    assert refused.value.status_code == api.overloaded[0]
    assert int(refused.value.response.headers["retry-after"]) >= 1
    assert "latency target" in refused.value.response.text
    assert sdk_call(slo_gateway, api, {"x-slipstream-ttft-slo-ms": "20000", "x-slipstream-priority": "batch"})
    assert sdk_call(slo_gateway, api, {"x-slipstream-ttft-slo-ms": "0.5"})  # interactive: still served
