"""bench/real_backends.py's schedule, its NAME@base strategies and its record of failed requests (against a loopback
HTTP server; no llama.cpp or gateway started)."""

import asyncio
import random
import statistics

import aiohttp
import pytest
from aiohttp import web

from bench.harness import base_checkout
from bench.real_backends import LONG_WORDS, alias, one, schedule, spread
from tests.support import loopback_chat


def test_the_schedule_offers_exactly_the_rate_asked_and_the_mix_as_drawn_evenly():
    # 20 arrivals at 0.41 req/s drawn freely came at 0.62 req/s with 329 words a prompt for 275 (s24m's run C).
    for seed in range(20):
        arrivals, lengths = schedule(random.Random(seed), 0.41, 20, "mixed")
        assert arrivals == sorted(arrivals) and arrivals[0] > 0
        assert abs(arrivals[-1] - 20 / 0.41) < 1e-9  # the mean gap is 1 / rate
        assert sum(w >= LONG_WORDS for w in lengths) == 10
        assert statistics.fmean(lengths) == pytest.approx((50 + 500) / 2, abs=1)
        assert all(20 <= w <= 80 or LONG_WORDS <= w <= 800 for w in lengths)
    assert schedule(random.Random(3), 0.41, 20, "mixed") == schedule(random.Random(3), 0.41, 20, "mixed")
    _, short = schedule(random.Random(3), 0.5, 11, "unequal")
    assert sorted(short) == spread(20, 80, 11) and statistics.fmean(short) == pytest.approx(50, abs=0.5)


def test_a_strategy_at_base_runs_its_own_alias_on_the_other_checkouts_gateway():
    assert base_checkout("latency_aware@base", "/tmp/main") and not base_checkout("latency_aware", "/tmp/main")
    assert alias("latency_aware@base") == alias("latency_aware")
    assert alias("latency_aware:e2e@base")["stream_objective"] == "e2e"
    with pytest.raises(SystemExit):
        base_checkout("latency_aware@base", None)  # no --base-tree
    with pytest.raises(SystemExit):
        base_checkout("latency_aware@head", "/tmp/main")


def test_a_dump_cut_short_is_read_back_run_by_run_and_summarised(tmp_path, capsys):
    import orjson

    from bench.real_backends import Result, runs_from_dump, summarise

    def run(scale: float, predicted: float) -> list[dict]:
        return [Result(True, "quick", 0.5 * scale, 1.0 * scale, 0.5 * predicted, 1.0 * predicted, at=at, words=w).__dict__
                for at, w in ((1.0, 40), (2.5, 300), (4.0, 60))]

    # Two runs of the first strategy; the second strategy's second run was cut by the timeout.
    path = tmp_path / "dump.json"
    path.write_bytes(orjson.dumps({"requests": {"a": run(1.0, 1.5) + run(1.0, 1.0), "b": run(2.0, 2.0)}, "models": []}))
    runs = runs_from_dump(str(path))
    assert [len(r) for r in runs["a"]] == [3, 3] and [len(r) for r in runs["b"]] == [3]
    assert runs["a"][1][0].at == 1.0 and runs["a"][0][1].words == 300
    summarise(runs, "mixed", 1, True, 0.0)
    out = capsys.readouterr().out
    assert "vs b, median of in-repeat ratios: p99 TTFT 0.50x (0.50)" in out
    assert "a                      first 1: TTFT +25% / 25%, E2E +25% / 25%" in out


def test_with_repeats_the_tail_is_also_read_over_every_run_s_requests_pooled(capsys):
    from bench.real_backends import Result, summarise

    def run(ttfts: list[float]) -> list[Result]:
        return [Result(True, "quick", t, 2 * t, at=i, words=40) for i, t in enumerate(ttfts)]

    # One slow request in one of two runs: run by run, p99 is that request or nothing (ratios 4.87 and 0.5);
    # pooled, the 8 requests' p99 sits 93 % of the way from the second slowest (1 s) to the slowest (10 s).
    runs = {"a": [run([1, 1, 1, 10]), run([1, 1, 1, 1])], "b": [run([2, 2, 2, 2]), run([2, 2, 2, 2])]}
    summarise(runs, "mixed", 1, False, 0.0)
    out = capsys.readouterr().out
    assert "vs b, median of in-repeat ratios: p99 TTFT 2.68x (4.87, 0.50)" in out
    assert "a                      2 runs, 8 requests: TTFT p99 9370, E2E p99 18740, TTFT p90 3700" in out
    assert "pooled, a / b: p99 TTFT 4.68x, p99 E2E 4.68x, p90 TTFT 1.85x, mean TTFT 1.06x" in out


def test_a_failed_request_says_what_came_back_and_a_stream_ending_in_an_error_event_is_not_an_answer():
    # A real loopback server: one request refused, one stream that ends in an error event split across two
    # writes (a bench that counted it as an answer would report its truncated time as a quick E2E).
    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body["messages"][0]["content"] == "refuse":
            return web.json_response({"error": {"message": "every backend is full", "type": "overloaded",
                                                "param": None, "code": None}}, status=503)
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices": [{"delta": {"content": "Hi"}}]}\n\ndata: {"err')
        await asyncio.sleep(0.05)
        await resp.write(b'or": {"message": "upstream went away", "type": "upstream_error"}}\n\n')
        return resp

    async def scenario():
        async with loopback_chat(chat) as url, aiohttp.ClientSession() as session:
            return (await one(session, url, "fleet", "refuse", 8), await one(session, url, "fleet", "break", 8))

    refused, broken = asyncio.run(scenario())
    assert not refused.ok and refused.error.startswith("HTTP 503: ") and "every backend is full" in refused.error
    assert not broken.ok and broken.error.startswith('error event: {"error"') and "upstream went away" in broken.error


def test_each_run_says_how_fast_each_server_prefilled_its_long_prompts_so_a_slow_spell_shows(capsys):
    from bench.real_backends import Result, prefill_speed, summarise

    def asked(backend: str, words: int, prefill_ms: float, ok: bool = True) -> Result:
        return Result(ok, backend, 1.0, 2.0, timing={"prefill": prefill_ms}, words=words)

    calm = [asked("quick", 300, 2100.0), asked("quick", 500, 3500.0), asked("throttled", 400, 8000.0),
            asked("quick", 40, 900.0),  # short: its template and first step would dominate the figure
            asked("throttled", 600, 99000.0, ok=False)]  # failed: no prefill it finished
    assert prefill_speed(calm) == {"quick": (7.0, 2), "throttled": (20.0, 1)}
    slow = [asked("quick", 300, 2700.0), asked("throttled", 400, 10400.0)]
    assert prefill_speed([asked("quick", 60, 500.0)]) == {}
    summarise({"a": [slow], "b": [calm]}, "mixed", 1, True, 0.0)
    out = capsys.readouterr().out
    assert "  a                      quick 9.0 (1), throttled 26.0 (1)" in out
    assert "  b                      quick 7.0 (2), throttled 20.0 (1)" in out
