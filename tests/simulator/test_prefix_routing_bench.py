"""bench/prefix_routing.py's arrival schedule, its paired comparison over repeats, and its record of failed requests
(against a loopback HTTP server; no llama.cpp or gateway started)."""

import asyncio
import random

import pytest
from aiohttp import web

from app.config import ServerConfig
from bench import harness
from bench.prefix_routing import (
    Run,
    Shared,
    arrivals,
    drive,
    paired,
    paired_ratios,
    pooled_ratio,
    prediction_errors,
    prediction_report,
    spread,
)
from tests.support import loopback_chat


def test_each_run_gets_exactly_the_rate_asked():
    # Drawn freely over 25 s at 0.70 req/s, three repeats got 16, 22 and 23 arrivals.
    for seed in range(20):
        at = arrivals(random.Random(seed), 0.7, 25)
        assert len(at) == 18 and at == sorted(at) and at[0] > 0
        assert at[-1] == pytest.approx(18 / 0.7)
    assert arrivals(random.Random(3), 0.7, 10) == arrivals(random.Random(3), 0.7, 10)
    assert len(arrivals(random.Random(3), 0.01, 10)) == 1


def _run(ttft: float, e2e: float | None = None) -> Run:
    return Run(ttft=[ttft, ttft], e2e=[e2e or 2 * ttft] * 2)


def test_paired_ratios_are_taken_within_each_repeat_and_summarised_by_median_and_quartiles(capsys):
    # The box's load doubles from repeat to repeat: every strategy's means move, their ratios do not.
    results = {
        "latency_aware": [_run(1.02 * 2**k) for k in range(4)],
        "latency_aware@base": [_run(1.10 * 2**k) for k in range(4)],
        "least_inflight": [_run(1.00 * 2**k) for k in range(4)],
        "round_robin": [_run(1.01 * 2**k) if k % 2 else _run(0.99 * 2**k) for k in range(4)],
    }
    assert paired_ratios(results, "latency_aware", "least_inflight") == pytest.approx([1.02] * 4)
    # Pooled, the repeats weigh by their load: the same 1.02 here, as every repeat's ratio is.
    assert pooled_ratio(results, "latency_aware", "least_inflight") == pytest.approx(1.02)
    lower = paired_ratios(results, "latency_aware", ("least_inflight", "round_robin"))
    assert lower == pytest.approx([1.02 / 0.99, 1.02, 1.02 / 0.99, 1.02])
    med, q1, q3, below = spread([1.1, 0.9, 1.0, 1.2, 1.3])
    assert (med, q1, q3, below) == (1.1, 1.0, 1.2, 1)
    # The aim's figure: against the baseline it trails most, by the median of its per-repeat ratios.
    aim = paired("unique", results)
    assert aim == pytest.approx(1.02 / ((0.99 + 1.01) / 2), rel=1e-3)
    out = capsys.readouterr().out
    assert "latency_aware@base / latency_aware: mean TTFT 1.078x" in out and "pooled 1.078x" in out
    assert "lower in 0 of 4" in out and "-> met" in out


def test_a_failed_request_is_counted_with_what_came_back():
    # A real loopback server: the first request is refused with an OpenAI-shaped error, the second's stream
    # ends in an error event; an error count alone in the table could not be traced to either.
    seen = []

    async def chat(request: web.Request) -> web.StreamResponse:
        seen.append(await request.json())
        if len(seen) == 1:
            return web.json_response({"error": {"message": "no backend could take it", "type": "overloaded",
                                                "param": None, "code": "no_capacity"}}, status=503)
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices": [{"delta": {"content": "Hi"}}]}\n\n')
        await resp.write(b'data: {"error": {"message": "upstream went away", "type": "upstream_error"}}\n\n')
        return resp

    run = asyncio.run(drive_against(chat, 4.0, 0.5, 1))
    assert run.errors == 2 == len(run.failures) and not run.e2e
    refused, broken = sorted(run.failures, key=lambda f: f["sent"])
    assert refused["what"].startswith("HTTP 503: ") and "no backend could take it" in refused["what"]
    assert broken["what"].startswith("error event after 1 chunks: ") and "upstream went away" in broken["what"]
    assert refused["key"].startswith("p") and refused["after_s"] >= 0


def test_the_bench_drops_an_idle_connection_before_the_gateway_closes_it(monkeypatch):
    # The gateway (uvicorn) closes a connection idle server.keep_alive_s; a request sent on it just then fails
    # before the gateway reads it. One of t34s's shared-prefix runs lost a request so (seed 61, sent on a
    # connection idle 5.003 s, keep-alive 5 s): the bench client must give a connection up first.
    assert harness.CLIENT_KEEP_ALIVE_S < ServerConfig.model_fields["keep_alive_s"].default
    peers = []

    async def chat(request: web.Request) -> web.StreamResponse:
        peers.append(request.transport.get_extra_info("peername"))  # type: ignore[union-attr]
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices": [{"delta": {"content": "Hi"}}]}\n\ndata: [DONE]\n\n')
        return resp

    # Seed 7's three arrivals at 3 req/s come 0.10 s and then 0.66 s apart; the loopback server keeps
    # connections 75 s. With the client's keep-alive at 0.3 s, the second request reuses the first's connection
    # and the third, idle past it, opens its own.
    monkeypatch.setattr(harness, "CLIENT_KEEP_ALIVE_S", 0.3)
    run = asyncio.run(drive_against(chat, 3.0, 1.0, 7))
    assert run.errors == 0 and len(run.e2e) == 3
    assert peers[0] == peers[1] != peers[2]


async def drive_against(chat, rate: float, seconds: float, seed: int) -> Run:
    """bench/prefix_routing.py's open loop (two shared prompts) against a loopback server answering with `chat`."""
    async with loopback_chat(chat) as url:
        return await drive([url], Shared(random.Random(1), "t", 2, 20), rate, seconds, seed)


def _logged(*pairs: tuple[float, float, float, float]) -> Run:
    """A run whose requests were predicted (TTFT, E2E) and measured (TTFT, E2E), in seconds."""
    return Run(log=[{"predicted": pt * 1000, "predicted_e2e": pe * 1000, "ttft": mt, "e2e": me}
                    for pt, pe, mt, me in pairs])


def test_the_prediction_error_is_the_median_over_requests_then_over_repeats(capsys):
    # Three requests: TTFT over-predicted by 50 %, under by 10 %, exact; E2E under by 20 %, 20 %, over 10 %.
    one = _logged((1.5, 1.6, 1.0, 2.0), (0.9, 1.6, 1.0, 2.0), (1.0, 2.2, 1.0, 2.0))
    errors = prediction_errors(one)
    assert errors["ttft"] == pytest.approx((0.0, 0.1))
    assert errors["e2e"] == pytest.approx((-0.2, 0.2))
    # A request the gateway gave no prediction for (a cache hit, an older gateway) is left out, not read as 0.
    assert prediction_errors(Run(log=[{"predicted": None, "predicted_e2e": None, "ttft": 1.0, "e2e": 2.0}])) == {}
    worse = _logged((2.0, 4.0, 1.0, 2.0))
    prediction_report("shared", {"latency_aware": [one, worse, one], "least_inflight": [worse]})
    out = capsys.readouterr().out
    assert "latency_aware          TTFT +0% / 10%, E2E -20% / 20%; TTFT +100% / 100%" in out
    assert "| median TTFT +0% / 10%, E2E -20% / 20%" in out
    assert "aim (latency_aware): median prediction error <= 20 %: TTFT +0% / 10%, E2E -20% / 20% -> met" in out
    assert "least_inflight         TTFT +100% / 100%, E2E +100% / 100%" in out
    prediction_report("shared", {"latency_aware": [worse]})
    assert "-> NOT met" in capsys.readouterr().out
