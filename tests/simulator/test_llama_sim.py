"""bench/llama_sim.py: the real router in front of llama.cpp-like servers on a virtual clock."""

import gc
import statistics

from bench.llama_sim import OUTPUT, TPOT_S, run


def test_a_cold_prompt_takes_its_prefill_and_the_answer_its_decode():
    done = run("round_robin", 0, 40, 0.65, 0, 2, 1.0, False, 2)
    assert len(done) == 40
    ttft = [t for t, _ in done]
    # ~550-600 estimated tokens, 93 % of them uncached, at 2 s per 600: no first token before ~1.7 s.
    assert min(ttft) > 1.6
    assert all(e - t > (OUTPUT - 1) * TPOT_S - 1e-9 for t, e in done)


def test_a_shared_prompt_is_served_warm_where_it_ran_and_runs_repeat_exactly():
    done = run("latency_aware", 3, 60, 0.65, 1, 2, 1.0, False, 2)
    assert sorted(t for t, _ in done)[30] < 0.5  # the median: warm
    assert done == run("latency_aware", 3, 60, 0.65, 1, 2, 1.0, False, 2)


def _after_burst(rate: float, slow: float) -> tuple[list[float], list[float]]:
    """The first 8 requests of light traffic after a 20 s closed-loop burst of 8 clients, over 6 seeds:
    each one's |predicted - measured| / measured end-to-end time, and its predicted / measured decode."""
    errors, decode = [], []
    for seed in range(6):
        done = run("latency_aware", seed, 8, rate, 0, 2, slow, False, 2, burst_s=20.0, clients=8, detail=True)
        assert sum(x[5] for x in done) > 8  # the burst's own requests, each sent as the one before it ended
        light = sorted((x for x in done if not x[5]), key=lambda x: x[4])[:8]
        errors += [abs(pe - e) / e for t, e, pt, pe, *_ in light]
        decode += [(pe - pt) / (e - t) for t, e, pt, pe, *_ in light]
    # Twelve routers' worth of garbage, collected here rather than during a later test's timing (the
    # backend simulator's queueing test, which compares wall times of 0.2-0.5 s, failed 3 times in 6 after it).
    gc.collect()
    return errors, decode


def test_after_a_burst_the_first_answers_are_priced_at_the_traffic_they_meet():
    # Issue 24, "no over-prediction after a burst": a closed-loop burst stalls every answer's decode with
    # the prefill of the queued prompt that takes each freed slot. Learned as the answers' rate, those
    # stalls priced the light traffic after it at 2-4x its decode (before: median |error| 22 % over
    # these 48 requests, 21 of them with the decode predicted over 1.5x; after: 2 %, 4).
    errors, decode = _after_burst(0.3, 2.5)
    assert statistics.median(errors) <= 0.10
    assert sum(r > 1.5 for r in decode) <= len(decode) // 10
    # Traffic that stays heavy after the burst is still priced with its stalls (before: 25 %, 25 of 48
    # over 1.5x, priced at the burst's figures for levels it had not taught; after: 3 %, 6).
    errors, decode = _after_burst(0.65, 1.0)
    assert statistics.median(errors) <= 0.10
    assert sum(r > 1.5 for r in decode) <= len(decode) // 4
