"""The delay a placement passes on: each candidate priced with what the next arrival would be offered."""

import random
from contextlib import contextmanager

from app.routing import lookahead
from app.routing.latency_aware import LatencyAware
from app.routing.latency_model import LatencyModel, Prior
from app.routing.lookahead import ArrivalRate, booked, first_passed_on, imposed, passed_on
from app.routing.predict import estimate, ranked
from tests.routing.test_prefix_routing import RATE, State, ask, ctx_for

BODY = ask("What is the fee?", "Short prompt. " * 4)  # ~22 tokens


def slower(name: str, factor: float, **kw) -> State:
    """A backend `factor` times slower at prefill and decode (a throttled or smaller server)."""
    s = State(name, **kw)
    s.model = LatencyModel(Prior(prefill_tokens_per_s=RATE / factor, tpot_s=0.01 * factor, slots=2, output_tokens=20))
    for _ in range(3):
        s.model.observe_decode(20, 19 * 0.01 * factor, load=1, now=0)
    return s


def timed(s: State, rate: float) -> State:
    """Its prefill timed (as after a few answers), at `rate` prompt tokens a second."""
    for tokens in (50, 100, 150):
        s.model.observe_prefill(tokens, tokens / rate, now=0)
    return s


def unequal_pair() -> tuple[State, State]:
    """A quick server with both slots busy (one frees 0.2 s from now, the other in 1.5 s) and an idle
    server 2.5 times slower: the quick one is this request's lowest TTFT, by 20 ms."""
    return (timed(State("quick", inflight=2, slots=2, finishing=(1.2, 2.5)), RATE),
            timed(slower("throttled", 2.5), RATE / 2.5))


def arriving_every(gap: float, now: float = 1.0) -> LatencyAware:
    policy = LatencyAware(exploration=0)
    for k in range(16):
        policy.arrivals.observe(now - (16 - k) * gap)
    return policy


def test_the_next_arrival_is_expected_a_mean_gap_later_and_a_slow_spell_stretches_it():
    rate = ArrivalRate()
    assert rate.gap(1.0) is None
    for k in range(10):
        rate.observe(k * 0.5)
    assert abs(rate.gap(5.0) - 0.5) < 1e-9  # the tenth gap ends now
    assert abs(rate.gap(8.5) - 0.85) < 1e-9  # nothing for 4 s: arrivals are no longer half a second apart


def test_after_a_pause_the_rate_is_read_from_the_arrivals_since_it_alone():
    rate = ArrivalRate()
    for k in range(16):
        rate.observe(k * 0.5)
    # 60 s without an arrival (another strategy's run in a bench, a quiet spell in production): the arrival
    # that ends it is priced as sparse traffic, as on a fresh alias, not as the 16 arrivals' 4.2 s mean gap.
    assert rate.gap(67.5) is None
    rate.observe(67.5)
    assert rate.gap(68.0) is None  # one arrival since the pause: no gap yet
    rate.observe(68.0)
    assert abs(rate.gap(68.5) - 0.5) < 1e-9  # arrivals half a second apart again, read at once


def test_a_gap_after_a_burst_sent_at_once_is_not_a_pause():
    rate = ArrivalRate()
    for k in range(6):
        rate.observe(1.0 + k * 1e-4)  # six requests sent together: a mean gap of 0.1 ms
    # 3 s later: far over 8 mean gaps, but short enough that what the burst queued is still there to pass on.
    assert abs(rate.gap(4.0005) - 3.0005 / 6) < 1e-9
    rate.observe(4.0005)
    # 20 s later, the burst's queues long drained: a pause.
    assert rate.gap(24.0) is None


def test_a_gap_of_many_seconds_between_sparse_arrivals_is_not_a_pause():
    rate = ArrivalRate()
    for k in range(5):
        rate.observe(k * 5.0)  # one arrival every 5 s
    assert abs(rate.gap(32.0) - 32.0 / 5) < 1e-9  # a 12 s gap is under 8 mean gaps: the mean stretches


def test_a_request_leaves_the_quick_servers_queue_to_the_next_arrival_when_arrivals_are_close():
    quick, throttled = unequal_pair()
    ctx = ctx_for(BODY)
    own = [estimate(s, ctx).ttft_s for s in (quick, throttled)]
    assert own[0] < own[1]  # for itself, the quick server's queue is best
    # Arrivals 0.3 s apart: taking the quick server's next slot makes the next arrival wait there or go
    # to the slow one; leaving it lets the next one have it 0.2 s from now, and costs this one 20 ms.
    assert arriving_every(0.3).choose([quick, throttled], ctx, 0)[0] == 1


def test_with_arrivals_far_apart_the_lowest_prediction_wins():
    quick, throttled = unequal_pair()
    # A second apart: by then the quick server has a free slot whichever way this one goes.
    assert arriving_every(1.0).choose([quick, throttled], ctx_for(BODY), 0)[0] == 0
    # And with no arrival rate known yet, the plain lowest prediction.
    assert LatencyAware(exploration=0).choose([quick, throttled], ctx_for(BODY), 0)[0] == 0


def test_a_later_arrival_finds_the_requests_due_before_it_finished():
    quick, _ = unequal_pair()
    later = ctx_for(BODY, now=2.0)
    # Known at 1.0, the request due at 1.2 has finished by 2.0: a slot is free, no wait. Simulated from
    # 2.0 itself, it would be overdue, still holding its slot.
    assert estimate(quick, later, ahead=2, known_at=1.0).queue_s == 0.0
    with booked(quick, ctx_for(BODY), estimate(quick, ctx_for(BODY))):
        # This request then holds the slot freed at 1.2 from 1.2 to about 1.54: free again by 2.0.
        assert estimate(quick, later, known_at=1.0).queue_s == 0.0
        assert estimate(quick, ctx_for(BODY, now=1.3), known_at=1.0).queue_s > 0.2


def test_pricing_the_next_arrival_leaves_every_candidate_as_it_was():
    quick, throttled = unequal_pair()
    quick.prefilling, quick.uncached_inflight, quick.prefill_busy_since = 1, 33.3, 0.7
    before = [(s.inflight, s.prefilling, s.uncached_inflight, s.prefill_busy_since, len(s.book)) for s in (quick, throttled)]
    ctx = ctx_for(BODY)
    passed_on([quick, throttled], ctx, [estimate(s, ctx) for s in (quick, throttled)], 0.3)
    assert [(s.inflight, s.prefilling, s.uncached_inflight, s.prefill_busy_since, len(s.book))
            for s in (quick, throttled)] == before


LONG = ask("Summarise.", "A long document to read. " * 120)  # ~750 tokens: ~5 s to prefill at RATE


def answering(s: State, tokens: float = 200.0) -> State:
    """`s` with one stream decoding since 0.5 s: `tokens` more to go, well past any prefill here."""
    s.inflight += 1
    s.book.first_token(s.book.add(0.0, 0.3, tokens, 0.3, True), 0.5)
    return s


def test_a_prefill_is_charged_once_for_each_request_running_where_it_stalls_them():
    ctx = ctx_for(LONG)
    idle = timed(State("idle", slots=2), RATE)
    assert imposed(idle, ctx, estimate(idle, ctx)) == 0.0  # nothing running: nothing stalled
    busy = answering(timed(State("busy", slots=2), RATE))
    est = estimate(busy, ctx)
    assert abs(imposed(busy, ctx, est) - (est.ttft_s - est.queue_s)) < 1e-9  # its prefill, once
    done = answering(timed(State("done", slots=2), RATE), tokens=10.0)  # its answer is out before
    assert imposed(done, ctx, estimate(done, ctx)) == 0.0
    # Three running on two slots: it waits for one, and then stalls the one other slot, not three.
    full = answering(answering(answering(timed(State("full", slots=2), RATE), 200.0), 300.0), 400.0)
    est = estimate(full, ctx)
    assert est.queue_s > 0
    assert abs(imposed(full, ctx, est) - (est.ttft_s - est.queue_s)) < 1e-9


def test_a_long_prompt_goes_where_no_running_answer_stops_for_it_if_that_costs_less():
    def place(stalls: bool) -> str:
        quick = answering(timed(State("quick", slots=2), RATE))
        other = timed(State("other", slots=2), RATE / 1.5)  # prefills 1.5 times slower, idle
        quick.stalls_decodes = other.stalls_decodes = stalls
        i, _ = LatencyAware(exploration=0).choose([quick, other], ctx_for(LONG), 0)
        return (quick, other)[i].name

    # For itself the quick server is best (~5 s against ~7.5 s), but there it stops a running answer
    # for those 5 s: 10 s of waiting in all, against 7.5 s on the other server.
    assert place(stalls=True) == "other"
    # A server whose decodes run on through a prefill (vLLM's kind): the stall is not there to price.
    assert place(stalls=False) == "quick"


def prefilling(s: State, prompts: int, tokens: float, since: float = 0.9) -> State:
    """`s` with `prompts` cold prompts of `tokens` sent at `since`, none at its first token yet: in its
    book (each prefilling for its own share of the time, in its slot) and in its prefill backlog."""
    for _ in range(prompts):
        s.inflight += 1
        s.book.add(since, tokens / RATE, 20.0, tokens / RATE, True)
        s.start_prefill(tokens, since)
    return s


def test_a_later_arrival_finds_the_prefill_backlog_worked_through_meanwhile():
    # Three cold prompts of ~5 s each, the first under way since 0.9 s. Known at 1.0, an arrival 10 s
    # later finds ~5 s of the backlog left, not 10 (only the first prefill done): the look-ahead read a
    # busy server's queue as lasting longer than it does, and priced the idle one's next arrival against it.
    s = prefilling(timed(State("s", slots=8), RATE), 3, 750.0)
    backlog = 3 * 750.0 / RATE
    assert abs(estimate(s, ctx_for(BODY), known_at=1.0).queue_s - (backlog - 0.1)) < 0.05
    later = estimate(s, ctx_for(BODY, now=11.0), known_at=1.0).queue_s
    assert abs(later - (backlog - 10.1)) < 0.05
    assert estimate(s, ctx_for(BODY, now=20.0), known_at=1.0).queue_s == 0.0


def random_fleet(rng: random.Random) -> list[State]:
    """Two to four timed, measured backends near enough alike that the delay passed on often decides:
    some slots free, some full with a queue, streams decoding and prompts prefilling, some of them
    servers whose decodes stall for a prefill."""
    fleet = []
    for k in range(rng.randint(2, 4)):
        s = timed(State(f"b{k}", slots=rng.choice((None, 1, 2, 4))), RATE * rng.uniform(0.8, 1.25))
        for _ in range(rng.randint(0, 3)):
            s.model.observe_decode(20, 19 * 0.01 * rng.uniform(0.7, 1.5), load=rng.randint(1, 4), now=rng.uniform(0, 1))
        for _ in range(rng.randint(0, 5)):
            s.inflight += 1
            ticket = s.book.add(rng.uniform(0.0, 1.0), rng.uniform(0.05, 0.6), rng.uniform(5, 60), None, rng.random() < 0.7)
            if rng.random() < 0.5:
                s.book.first_token(ticket, rng.uniform(0.3, 1.0))
        if rng.random() < 0.4:
            prefilling(s, rng.randint(1, 2), rng.uniform(20, 300), since=rng.uniform(0.5, 1.0))
        s.stalls_decodes = rng.random() < 0.5
        fleet.append(s)
    return fleet


def test_the_first_without_every_delay_predicted_is_the_first_of_every_score():
    # Where no one reads the scores, latency_aware ranks a timed decision by first_passed_on, which
    # predicts the look-ahead's figures only where the delay could change the pick, and prices a stall
    # only for a candidate that ranks first without it: the same pick as every score computed
    # (LatencyAware._scores) would make, in whatever order ties are broken, and every candidate left as
    # it was. Both of its ways are taken, stalls are left unpriced, and the delay moves some picks.
    rng = random.Random(24)
    ways = {"bound": 0, "every figure": 0, "moved": 0, "stall unpriced": 0}
    predicted = {"n": 0, "stalls": 0}
    for case in range(400):
        fleet = random_fleet(rng)
        n = len(fleet)
        ctx = ctx_for(rng.choice((BODY, LONG)))
        ctx.stream = rng.random() < 0.5
        gap = rng.choice((0.02, 0.1, 0.3, 1.0))
        order = [(case + k) % n for k in range(n)]
        assert all(s.model.tpot_base.samples >= 2 for s in fleet)  # measured: each score is its own
        scores = LatencyAware._scores(fleet, ctx, gap, [1.0] * n)[1]
        estimates, raw = ranked(fleet, ctx)
        want = min(order, key=scores.__getitem__)
        before = [(s.inflight, s.prefilling, s.uncached_inflight, s.prefill_busy_since, len(s.book)) for s in fleet]
        stalls = [imposed(c, ctx, e) if c.stalls_decodes else 0.0 for c, e in zip(fleet, estimates)]
        calls, priced = predicted["n"], predicted["stalls"]
        with patch_figures(predicted):
            got, bounds, complete = first_passed_on(fleet, ctx, estimates, gap, raw, order)
        assert got == want, case
        # The first's bound is at least its score, every other's at most its own (the hashed placement's),
        # and the scores completed are every score, to the bit.
        assert bounds[got] >= scores[got] and all(b <= s for j, (b, s) in enumerate(zip(bounds, scores)) if j != got)
        assert [repr(s) for s in complete()] == [repr(s) for s in scores], case
        assert [(s.inflight, s.prefilling, s.uncached_inflight, s.prefill_busy_since, len(s.book)) for s in fleet] == before
        ways["bound" if predicted["n"] - calls == 2 else "every figure"] += 1
        ways["moved"] += want != min(order, key=[r + s for r, s in zip(raw, stalls)].__getitem__)
        ways["stall unpriced"] += predicted["stalls"] - priced < sum(s.stalls_decodes for s in fleet)
    assert all(ways.values()), ways


@contextmanager
def patch_figures(counter: dict[str, int]):
    """Counts the look-ahead's predictions (lookahead.figure_at and booked_figure_at, in "n") and the
    stalls it prices (lookahead.imposed, in "stalls")."""
    saved = lookahead.figure_at, lookahead.booked_figure_at, lookahead.imposed

    def counted(f, key="n"):
        def call(*a, **k):
            counter[key] += 1
            return f(*a, **k)
        return call

    lookahead.figure_at, lookahead.booked_figure_at = counted(saved[0]), counted(saved[1])
    lookahead.imposed = counted(saved[2], "stalls")
    try:
        yield
    finally:
        lookahead.figure_at, lookahead.booked_figure_at, lookahead.imposed = saved
