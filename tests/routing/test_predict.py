"""Queueing is predicted from the backend's learned slots and when the requests ahead will finish."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.config import BackendConfig, ModelAlias
from app.routing.context import RouteContext
from app.routing.latency_model import LatencyModel, Prior
from app.routing.predict import decided, estimate, forecast, objective, ranked
from app.routing.prefix_index import prompt_blocks
from app.routing.router import Router
from app.routing.state import InflightBook
from app.routing.strategies import PredictedLatency
from tests.routing.test_router import LlamaBackend, router
from tests.routing.test_strategies import State

CTX = RouteContext(stream=False, prompt_tokens=100, max_tokens=50, exact_output=True, now=10.0)


def test_a_wait_with_k_ahead_means_at_most_k_slots_and_none_means_more():
    m = LatencyModel()
    assert m.slots is None  # nothing known until the backend makes someone wait
    m.observe_queue(0.0, ahead=6, now=0)
    assert m.slots is None
    m.observe_queue(0.4, ahead=4, now=1)  # waited with 4 ahead: it runs at most 4
    assert m.slots == 4
    m.observe_queue(0.0, ahead=3, now=2)  # consistent with 4: unchanged
    assert m.slots == 4
    m.observe_queue(0.0, ahead=5, now=3)  # no wait with 5 ahead: it runs at least 6
    assert m.slots == 6


def test_a_wait_below_the_noise_floor_is_no_evidence_of_a_full_backend():
    m = LatencyModel()
    m.observe_queue(0.01, ahead=2, now=0)
    assert m.slots is None


def test_below_its_slots_a_backend_queues_nothing():
    m = LatencyModel(Prior(slots=4))
    s = State("a", inflight=3, model=m, finishing=[11.0, 12.0, 13.0])
    assert estimate(s, CTX).queue_s == 0.0


def test_a_full_backend_starts_the_next_request_when_a_slot_frees():
    m = LatencyModel(Prior(slots=2))
    s = State("a", inflight=4, model=m, finishing=[13.0, 11.0, 15.0, 12.0])
    # Two slots, four ahead: the third finish (at 13 s) frees the slot this request gets.
    assert abs(estimate(s, CTX).queue_s - 3.0) < 1e-9
    # Overdue requests free their slots now, not in the past.
    late = State("b", inflight=2, model=m, finishing=[5.0, 6.0])
    assert estimate(late, CTX).queue_s == 0.0


def test_end_to_end_adds_decode_at_the_batch_the_backend_will_run():
    m = LatencyModel(Prior(slots=2, tpot_s=0.01, tpot_growth=0.5))
    idle = estimate(State("a", model=m), CTX)
    full = estimate(State("b", inflight=5, model=m, finishing=[10.0] * 5), CTX)
    assert abs((idle.e2e_s - idle.ttft_s) - 49 * 0.01) < 1e-9
    # However many are in flight, only two run at once: TPOT at a batch of 2, not 6.
    assert abs((full.e2e_s - full.ttft_s) - 49 * 0.01 * 1.5) < 1e-9


def test_waits_the_book_does_not_explain_become_the_residual_queue():
    m = LatencyModel()
    for t in range(5):
        m.observe_queue(0.3, ahead=0, now=t)  # someone else's traffic makes every request wait
    assert 0.2 < m.residual_queue(5) <= 0.3
    assert estimate(State("a", model=m), RouteContext(now=5)).queue_s == m.residual_queue(5)


def test_a_request_is_forecast_the_wait_it_typically_meets_while_routing_prices_the_mean():
    # Behind gateway replicas a server's requests mostly find a slot at once and now and then wait for
    # another replica's cold prefill: one wait in four of 2 s, the rest the server's 15 ms admission.
    m = LatencyModel()
    for t in range(12):
        m.observe_queue(2.0 if t % 4 == 3 else 0.015, ahead=0, now=float(t))
    s = State("a", model=m)
    ctx = RouteContext(stream=False, prompt_tokens=100, max_tokens=50, exact_output=True, now=12.0)
    est = estimate(s, ctx)
    assert est.queue_s == m.residual_queue(12.0) > 0.3  # the risk each placement there carries
    told = forecast(est, s, 12.0)
    assert told.queue_s == pytest.approx(0.015)  # what this one request most likely waits
    assert told.ttft_s - est.ttft_s == pytest.approx(told.queue_s - est.queue_s)
    assert told.e2e_s - est.e2e_s == pytest.approx(told.queue_s - est.queue_s)
    # Waiting for a sibling's copy of its prefix is part of the estimate whatever the residual.
    assert forecast(est, s, 12.0, ready_s=0.2).queue_s == pytest.approx(0.2)


def test_with_few_recent_waits_the_forecast_is_the_estimate():
    m = LatencyModel()
    m.observe_queue(2.0, ahead=0, now=0.0)
    m.observe_queue(0.015, ahead=0, now=1.0)
    s = State("a", model=m)
    est = estimate(s, RouteContext(now=2.0))
    assert forecast(est, s, 2.0) is est
    # Nor do waits older than the window count: the median of two recent ones is no figure.
    for t in range(5):
        m.observe_queue(0.015, ahead=0, now=float(t))
    m.observe_queue(1.0, ahead=0, now=40.0)
    m.observe_queue(1.0, ahead=0, now=41.0)
    assert m.typical_residual_queue(42.0) == m.residual_queue(42.0)


def test_the_book_holds_each_lease_until_it_is_released():
    async def main():
        r = router({"a": 10}, strategy="predicted_latency")
        leases = [await r.acquire("m", ctx=RouteContext(max_tokens=20, exact_output=True)) for _ in range(3)]
        booked = len(r.states["a"].book)
        for lease in leases:
            lease.release()
        return booked, len(r.states["a"].book), [lease.estimate.e2e_s > 0 for lease in leases]

    assert asyncio.run(main()) == (3, 0, [True, True, True])


def test_a_lease_books_the_estimate_and_records_the_forecast():
    async def main():
        r = router({"a": 10}, strategy="predicted_latency")
        m = r.states["a"].model
        now = time.monotonic()
        for k in range(8):
            m.observe_queue(1.5 if k % 4 == 3 else 0.015, ahead=0, now=now - 8 + k)
        lease = await r.acquire("m", ctx=RouteContext(max_tokens=20, exact_output=True))
        lease.release()
        return lease.estimate, lease.forecast

    booked, recorded = asyncio.run(main())
    assert booked.queue_s > 0.2 and recorded.queue_s == pytest.approx(0.015, abs=0.01)


def test_a_prefix_blind_lease_forecasts_no_wait_for_a_copy_its_estimate_did_not_wait_for():
    # least_inflight's context counts no cached prefix: its estimate waits for no sibling's copy still
    # being prefilled, and the forecast, the same estimate with the typical residual, waits for none either.
    blocks = prompt_blocks("system: You are the billing assistant; cite the policy. " * 30 + "user: hi")
    backends = {"a": LlamaBackend("a", BackendConfig(base_url="http://127.0.0.1:1/v1", model="m", flavor="llamacpp"))}
    r = Router(backends, {"m": ModelAlias(backends=("a",), strategy="least_inflight")}, 1.0)

    async def main():
        m = r.states["a"].model
        now = time.monotonic()
        for k in range(8):
            m.observe_queue(1.5 if k % 4 == 3 else 0.015, ahead=0, now=now - 8 + k)
        first, second = [await r.acquire("m", ctx=RouteContext(stream=True, prompt_tokens=round(blocks.tokens),
                                                               max_tokens=20, prefix=blocks)) for _ in range(2)]
        for lease in (first, second):
            lease.release()
        return second

    second = asyncio.run(main())
    assert second.prefix.leader is not None and second.prefix.ready_at - time.monotonic() > second.estimate.queue_s
    assert second.forecast.queue_s < second.estimate.queue_s


def test_book_orders_finishes_and_forgets_removed_requests():
    b = InflightBook()
    tickets = [b.add(t, 0.0, 0.0) for t in (3.0, 1.0, 2.0)]
    assert [b.nth_finish(i, 0.01) for i in range(4)] == [1.0, 2.0, 3.0, None]
    b.remove(tickets[1])
    assert b.nth_finish(0, 0.01) == 2.0


def test_the_book_says_how_long_other_answers_decoded_beside_each_one():
    b = InflightBook()
    first = b.add(0.0, 0.1, 24, reports_first_token=True)
    b.first_token(first, 0.1)
    later = b.add(0.5, 0.2, 24, reports_first_token=True)  # sent to an idle server's other slot after it
    b.first_token(later, 0.7)
    waiting = b.add(0.6, 1.0, 24, reports_first_token=True)  # never reaches its first token
    # The first decoded from 0.1 to 1.1 s, the later one beside it from 0.7 s: 0.4 s of a batch of two.
    assert b.remove(first, 1.1) == pytest.approx(0.4)
    assert b.remove(later, 1.5) == pytest.approx(0.4)  # the first one beside it, 0.7-1.1 s
    assert b.remove(waiting, 1.6) is None  # no decode of its own to have had anything beside
    alone = b.add(2.0, 0.1, 24, reports_first_token=True)
    b.first_token(alone, 2.1)
    assert b.remove(alone, 2.4) == 0.0


def test_a_lease_hands_back_how_long_others_decoded_beside_its_answer(monkeypatch):
    import time

    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])

    async def main():
        r = router({"a": 10})

        def ctx() -> RouteContext:
            return RouteContext(stream=True, max_tokens=24)

        first = await r.acquire("m", ctx=ctx())
        now[0] = 100.1
        first.first_token()
        now[0] = 100.5
        second = await r.acquire("m", ctx=ctx())
        now[0] = 100.7
        second.first_token()
        silent = await r.acquire("m", ctx=ctx())  # ends before its first token
        now[0] = 101.1
        first.release()
        silent.release()
        now[0] = 101.5
        second.release()
        return first.beside_s, second.beside_s, silent.beside_s

    beside_first, beside_second, beside_silent = asyncio.run(main())
    assert beside_first == pytest.approx(0.4) and beside_second == pytest.approx(0.4) and beside_silent is None


def test_booked_work_is_priced_at_the_backend_tpot_now():
    b = InflightBook()
    b.add(0.0, 0.1, 100)  # started at 0, first token after 0.1 s, then 100 more tokens
    assert abs(b.nth_finish(0, 0.01) - 1.1) < 1e-9
    # The backend slowed down to 50 ms a token: the same request now ends at 5.1 s.
    assert abs(b.nth_finish(0, 0.05) - 5.1) < 1e-9


def test_a_backend_seen_running_many_at_once_is_not_penalised_as_a_small_one():
    from app.routing.strategies import _load_penalty

    big, fresh = LatencyModel(), LatencyModel()
    big.observe_queue(0.0, ahead=23, now=0)  # 24 running, nobody waited
    assert big.slots is None and big.slots_at_least == 24
    assert _load_penalty(State("big", inflight=16, model=big)) < _load_penalty(State("fresh", inflight=16, model=fresh))


def test_a_cpu_servers_prefill_rate_is_learned_from_prompts_of_similar_length():
    # llama.cpp on one CPU thread: ~8 ms a token and ~10 ms fixed, prompts of 30-130 tokens (the
    # unequal-servers workload). Both ends are predicted, not the middle only.
    m = LatencyModel()
    for k in range(30):
        tokens = 30 + (k * 37) % 100
        m.observe_prefill(tokens, 0.010 + 0.008 * tokens, now=1.0 + k)
    for tokens in (30, 130):
        assert m.prefill_s(tokens, now=31.0) == pytest.approx(0.010 + 0.008 * tokens, rel=0.1)
    fixed, _ = m.prefill.coefficients(31.0)
    assert fixed < 0.05  # each pending prefill in a backlog is not priced at a made-up fixed cost


def test_requests_waiting_for_a_slot_are_simulated_from_now_not_from_what_was_predicted_when_sent():
    # One slot. A decodes (first token at 10 s, 10 tokens of 100 ms left: done at 11 s); B, sent at 5 s
    # while a burst made its queue look 20 s long, waits for A's slot, then prefills 0.5 s and decodes
    # 10 tokens: done at 12.5 s, not at 5 + 20 + 1 = 26 s. The stale prediction is not carried forward.
    b = InflightBook()
    a_ticket = b.add(0.0, 5.0, 10, prefill_s=1.0)
    b.first_token(a_ticket, 10.0)
    b.add(5.0, 20.0, 10, prefill_s=0.5)
    assert b.nth_finish(0, 0.1, now=10.0, slots=1) == pytest.approx(11.0)
    assert b.nth_finish(1, 0.1, now=10.0, slots=1) == pytest.approx(12.5)


def test_a_request_decoding_past_its_predicted_end_is_about_to_finish_and_its_progress_counts():
    b = InflightBook()
    t = b.add(0.0, 1.0, 20, prefill_s=1.0)
    b.first_token(t, 1.0)
    # At 100 ms a token it was due at 3 s; at 5 s it is still running: it ends now, not in the past.
    assert b.nth_finish(0, 0.1, now=5.0, slots=2) == 5.0
    # Halfway through its 20 tokens at 1.5 s: 10 left, done at 2.5 s.
    b.progress(t, 10, 1.5)
    assert b.nth_finish(0, 0.1, now=1.5, slots=2) == pytest.approx(2.5)


def test_a_full_slow_backend_with_overdue_work_still_shows_its_queue():
    # One slot, decoding past its predicted end, and another of ours waiting in the server: the next
    # request waits for that one's whole prefill and decode (2 s), not for nothing (as when each finish
    # was read from the prediction made when it was sent: both overdue, so both gone).
    m = LatencyModel(Prior(slots=1, tpot_s=0.1, tpot_growth=0.0))
    s = State("slow", inflight=2, model=m)
    s.book.first_token(s.book.add(0.0, 1.0, 10, prefill_s=1.0), 1.0)
    s.book.add(1.0, 1.0, 10, prefill_s=1.0)
    est = estimate(s, CTX)  # now = 10 s: both were due by 4 s
    assert est.queue_s == pytest.approx(2.0)


def _two_decoding_and_a_long_prompt_queued(stalls_decodes: bool):
    # Two slots, both decoding at 10 s (100 ms a token): A has 10 tokens left (free at 11 s), B 20 (12 s).
    # C, a long prompt sent before them all, waits for a slot: it takes A's at 11 s and prefills 2 s.
    m = LatencyModel(Prior(slots=2, tpot_s=0.1, tpot_growth=0.0))
    s = State("quick", inflight=3, model=m, stalls_decodes=stalls_decodes)
    s.book.first_token(s.book.add(0.0, 1.0, 10, prefill_s=1.0), 10.0)
    s.book.first_token(s.book.add(0.0, 1.0, 20, prefill_s=1.0), 10.0)
    s.book.add(0.0, 3.0, 10, prefill_s=2.0)
    return s


def test_a_prompt_queued_ahead_holds_up_the_decode_beside_it_and_so_the_newcomers_slot():
    # On llama.cpp, C's prefill (11-13 s) runs in the same steps as B's decode, which stands still for
    # it: B ends at 14 s, not 12 s, and the newcomer, fourth in flight, gets B's slot then. Its slot wait
    # holds C's whole prefill: 4 s, not 2 s.
    assert estimate(_two_decoding_and_a_long_prompt_queued(True), CTX).queue_s == pytest.approx(4.0)
    # A server whose decodes go on beside a prefill (vLLM's chunked prefill) frees B's slot at 12 s.
    assert estimate(_two_decoding_and_a_long_prompt_queued(False), CTX).queue_s == pytest.approx(2.0)


def test_a_prompt_prefilling_now_holds_up_the_decodes_beside_it_by_what_is_left_of_its_prefill():
    # Two slots. A decodes (10 tokens left at 10 s: 11 s alone); P took the other slot at 9 s and
    # prefills until 11 s. A stands still for P's last second (the second already gone is in A's
    # progress): it frees its slot at 12 s, and the newcomer, third in flight, waits 2 s for it.
    m = LatencyModel(Prior(slots=2, tpot_s=0.1, tpot_growth=0.0))
    s = State("quick", inflight=2, model=m, stalls_decodes=True)
    s.book.first_token(s.book.add(0.0, 1.0, 10, prefill_s=1.0), 10.0)
    s.book.add(9.0, 2.0, 30, prefill_s=2.0)
    assert estimate(s, CTX).queue_s == pytest.approx(2.0)
    # A prefill already over by the time a slot frees holds nothing up: with P's first token come, A
    # frees at 11 s.
    s = State("quick", inflight=2, model=m, stalls_decodes=True)
    s.book.first_token(s.book.add(0.0, 1.0, 10, prefill_s=1.0), 10.0)
    s.book.first_token(s.book.add(9.0, 1.0, 30, prefill_s=1.0), 10.0)
    assert estimate(s, CTX).queue_s == pytest.approx(1.0)


def test_the_stalls_are_the_prefills_booked_ahead_and_nothing_more():
    # Whatever the book, simulating the stalls keeps one finish per request, moves none earlier, and
    # moves the newcomer's slot by at most the prefills booked ahead of it (no learned factor to run away).
    import random

    rng = random.Random(7)
    for _ in range(300):
        b = InflightBook()
        slots, now = rng.randint(1, 4), 10.0
        prefills = 0.0
        for _ in range(rng.randint(1, 9)):
            sent = rng.uniform(0.0, 10.0)
            p = rng.uniform(0.0, 3.0)
            t = b.add(sent, p + rng.uniform(0.0, 2.0), rng.randint(0, 40), prefill_s=p, reports_first_token=rng.random() < 0.5)
            if rng.random() < 0.4:
                b.first_token(t, rng.uniform(sent, now))
            else:
                prefills += p
        plain, stalled = sorted(b.finishes(0.1, now, slots)), sorted(b.finishes(0.1, now, slots, stalls=True))
        assert len(plain) == len(stalled) == len(b)
        assert all(y >= x - 1e-9 for x, y in zip(plain, stalled))
        for n in range(len(b)):
            assert stalled[n] <= plain[n] + prefills + 1e-9


def test_the_look_ahead_prices_the_next_arrival_without_the_stall_this_request_imposes():
    # The next arrival's figure (the delay this placement passes on) is read without the stalls: what
    # this request's prefill does to the decodes beside it is lookahead.imposed's charge, counted once.
    from app.routing.predict import figure_at

    s = _two_decoding_and_a_long_prompt_queued(True)
    plain = _two_decoding_and_a_long_prompt_queued(False)
    assert figure_at(s, CTX, 10.5, 10.0) == figure_at(plain, CTX, 10.5, 10.0)


def test_a_stream_past_its_predicted_first_token_still_has_its_decode_ahead():
    b = InflightBook()
    b.add(0.0, 1.0, 10, prefill_s=1.0, reports_first_token=True)  # no first token by 5 s
    assert b.nth_finish(0, 0.1, now=5.0, slots=1) == pytest.approx(6.0)
    b = InflightBook()
    b.add(0.0, 1.0, 10, prefill_s=1.0)  # an answer that reports no first token: due at 2 s, ends now
    assert b.nth_finish(0, 0.1, now=5.0, slots=1) == 5.0


def test_end_to_end_decodes_at_the_median_of_answers_sent_with_as_many_in_flight():
    m = LatencyModel(Prior(slots=2, tpot_s=0.01, tpot_growth=0.5))
    for i in range(5):
        m.observe_decode(50, 49 * (0.008 if i < 3 else 0.05), load=1, now=CTX.now)
    idle = estimate(State("a", model=m), CTX)
    assert idle.e2e_s - idle.ttft_s == pytest.approx(49 * 0.008)


def test_an_answer_to_a_longer_prompt_is_predicted_to_decode_slower_as_like_answers_did():
    # A llama.cpp decode step reads the whole context (issue 24: ~14 ms a token after ~100-token prompts,
    # ~21 ms after ~1,000-token ones, on one real server); the end adds the decode at the prompt's size.
    m = LatencyModel(Prior(slots=2, tpot_s=0.01))
    for _ in range(8):
        for context, per_token in ((100.0, 0.014), (1000.0, 0.021)):
            m.observe_decode(50, 49 * per_token, load=1, now=CTX.now, batch=1, context=context)
    a = State("a", model=m)
    short = estimate(a, CTX)
    long = estimate(a, RouteContext(stream=False, prompt_tokens=1000, max_tokens=50, exact_output=True, now=CTX.now))
    assert short.e2e_s - short.ttft_s == pytest.approx(49 * 0.014, rel=0.1)
    assert long.e2e_s - long.ttft_s == pytest.approx(49 * 0.021, rel=0.1)


def stalling(per_token_stall: float) -> LatencyModel:
    """A server whose answers sent to it idle decode at 0.01 s a token, and stood still for neighbours'
    prefills `per_token_stall` a token at the median."""
    m = LatencyModel(Prior(slots=2, tpot_s=0.01))
    for _ in range(8):
        m.observe_decode(50, 49 * (0.01 + per_token_stall), load=1, now=CTX.now, stalled_s=49 * per_token_stall, batch=1)
    return m


def test_the_predicted_end_includes_the_stall_answers_sent_in_that_state_met():
    e = estimate(State("a", model=stalling(0.01)), CTX)
    assert e.stall_s == pytest.approx(49 * 0.01)
    assert e.e2e_s - e.ttft_s == pytest.approx(49 * 0.01 + 49 * 0.01)


def test_routing_ranks_by_the_end_without_the_stall_the_arrivals_that_cause_it_are_charged_for_it():
    # "a" decodes faster but its answers are stalled more by later arrivals; those arrivals pay for the
    # stall where they are placed (lookahead.imposed), so it does not count against "a" again.
    a, b = State("a", model=stalling(0.02)), State("b", model=stalling(0.0))
    for _ in range(8):
        b.model.observe_decode(50, 49 * 0.015, load=1, now=CTX.now, batch=1)
    estimates, figures = ranked([a, b], CTX)
    assert estimates[0].e2e_s > estimates[1].e2e_s  # "a" is predicted to end later ...
    assert figures[0] < figures[1]  # ... and still ranks first
    assert objective(estimates[0], CTX) == pytest.approx(estimates[0].e2e_s - estimates[0].stall_s)


def test_a_llama_cpp_slot_holds_its_prompts_copy_until_the_answers_end_without_the_stall(monkeypatch):
    # A sibling reuses a llama.cpp slot's copy of its prefix once that slot frees: at the answer's end
    # as routing ranks it, not later for the stall (priced there, siblings went cold elsewhere).
    import time

    from app.config import BackendConfig, ModelAlias
    from app.routing.router import Router
    from app.upstream.adapters import adapter_for
    from tests.routing.test_prefix_routing import ask, ctx_for
    from tests.routing.test_router import FakeBackend

    class LlamaCpp(FakeBackend):
        adapter = adapter_for("llamacpp")

    monkeypatch.setattr(time, "monotonic", lambda: CTX.now)
    config = BackendConfig(base_url="http://127.0.0.1:1/v1", model="m", max_concurrency=4, flavor="llamacpp")
    r = Router({"a": LlamaCpp("a", config)}, {"m": ModelAlias(backends=("a",), strategy="latency_aware")}, 1.0)
    state = r.states["a"]
    state.model = stalling(0.02)
    ctx = ctx_for(ask("What is a slot?"), now=CTX.now)
    lease = asyncio.run(r.acquire("m", ctx=ctx))
    e = lease.estimate
    assert e.stall_s > 0.0
    _, ready_at, _, _ = state.prefixes.match(ctx.prefix.keys, CTX.now)
    assert ready_at == pytest.approx(CTX.now + e.e2e_s - e.stall_s)


@pytest.mark.parametrize("strategy", ["least_inflight", "round_robin", "predicted_latency", "latency_aware"])
def test_every_strategys_estimate_waits_for_the_prefill_work_in_flight_ahead(monkeypatch, strategy):
    # Every lease books its prompt's prefill as work in flight (whichever strategy placed it), and a prompt
    # sent behind it is prefilled after it, slot free or not. Priced only where routing was prefix-aware, the
    # estimates of least_inflight and round_robin (their spans, /admin/backends, the target check) read
    # 40-55 % low behind a prefill on real llama.cpp servers (issue 24).
    import time

    from app.config import BackendConfig, ModelAlias
    from app.dispatch.loop import with_policy
    from app.routing.router import Router
    from app.upstream.adapters import adapter_for
    from tests.routing.test_prefix_routing import ask, ctx_for
    from tests.routing.test_router import FakeBackend

    class LlamaCpp(FakeBackend):
        adapter = adapter_for("llamacpp")

    monkeypatch.setattr(time, "monotonic", lambda: CTX.now)
    config = BackendConfig(base_url="http://127.0.0.1:1/v1", model="m", max_concurrency=4, flavor="llamacpp")
    spec = ModelAlias(backends=("a",), strategy=strategy)
    r = Router({"a": LlamaCpp("a", config)}, {"m": spec}, 1.0)
    r.states["a"].model = LatencyModel(Prior(slots=2, prefill_tokens_per_s=100.0))

    async def two():
        first = await r.acquire("m", ctx=with_policy(ctx_for(ask("a first question"), now=CTX.now), spec))
        second = await r.acquire("m", ctx=with_policy(ctx_for(ask("a second question", "Another system."), now=CTX.now), spec))
        return first.estimate, second.estimate

    first, second = asyncio.run(two())
    # The second, a short prompt, has a slot of its own (2 of 2) and waits for the first's long prefill
    # all the same: its first token after the first's.
    assert first.queue_s == 0.0
    assert second.queue_s == pytest.approx(first.ttft_s - r.states["a"].model.net.get(CTX.now), rel=1e-6)
    assert second.ttft_s > first.ttft_s


def test_predicted_latency_ranks_without_the_prefill_work_in_flight_as_it_did_but_predicts_with_it():
    # Its picks are as they were (its ranking never waited for the backlog); what its leases book and the
    # target check reads do wait for it.
    from tests.routing.test_strategies import fast_small, slow_big

    busy = State("fast", model=fast_small())
    busy.prefilling, busy.uncached_inflight, busy.prefill_busy_since = 1, 50_000.0, CTX.now  # seconds of prefill
    idle = State("slow", model=slow_big())
    ctx = RouteContext(stream=False, prompt_tokens=100, max_tokens=50, now=CTX.now)
    i, scores = PredictedLatency(exploration=0).choose([busy, idle], ctx, 0)
    assert i == 0 and scores[0] < scores[1]
    waits = decided(busy, ctx)  # what the lease books and the target check reads
    assert waits.queue_s > 1.0 and waits.e2e_s > decided(idle, ctx).e2e_s
