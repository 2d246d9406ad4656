"""Strategies, scored on hand-made backend states: what each one prefers and why."""

from __future__ import annotations

from app.routing.context import RouteContext
from app.routing.latency_model import LatencyModel, Prior
from app.routing.predict import predict
from app.routing.state import InflightBook
from app.routing.strategies import (
    LeastInflight,
    LowestLatency,
    PredictedLatency,
    Weighted,
)


class State:
    """The fields of the router's BackendState that strategies read."""

    def __init__(self, name, inflight=0, weight=1.0, model=None, waiting=None, finishing=(), stalls_decodes=False):
        self.name, self.inflight, self.weight = name, inflight, weight
        self.stalls_decodes = stalls_decodes  # a newcomer's prefill stops the decodes here (llama.cpp)
        self.model = model or LatencyModel()
        self.scraped_waiting, self.others_waiting = waiting, waiting or 0.0
        self.wrr_current = 0.0
        self.held_back = 0
        # No prefill work in flight (booked by a lease): the prompt waits for none.
        self.prefilling, self.uncached_inflight, self.prefill_busy_since = 0, 0.0, 0.0
        self.book = InflightBook()
        for at in finishing:
            self.book.add(at, 0.0, 0.0)  # nothing to decode: it finishes at `at` whatever the TPOT


def fast_small():
    m = LatencyModel(Prior(tpot_s=0.01))
    for _ in range(5):
        m.observe_decode(50, 49 * 0.01, load=1, now=0)
    return m


def slow_big():
    m = LatencyModel(Prior(tpot_s=0.04))
    for _ in range(5):
        m.observe_decode(50, 49 * 0.04, load=1, now=0)
    return m


CTX = RouteContext(stream=False, prompt_tokens=100, max_tokens=50, now=0)


def test_predicted_prefers_the_faster_backend_when_idle():
    a, b = State("fast", model=fast_small()), State("slow", model=slow_big())
    i, scores = PredictedLatency(exploration=0).choose([a, b], CTX, 0)
    assert i == 0 and scores[0] < scores[1]


def test_predicted_moves_off_a_backend_whose_queue_builds():
    fast = fast_small()
    fast.observe_queue(1.0, ahead=2, now=0)  # it was full: a second of waiting with 2 ahead
    a = State("fast", inflight=8, model=fast, finishing=[1.0 + i for i in range(8)])
    b = State("slow", inflight=1, model=slow_big(), finishing=[0.5])
    i, _ = PredictedLatency(exploration=0).choose([a, b], CTX, 0)
    assert i == 1


def test_failures_make_a_fast_backend_look_slow():
    flaky = fast_small()
    for _ in range(10):
        flaky.observe_outcome(False, now=0)
    a, b = State("flaky", model=flaky), State("slow", model=slow_big())
    assert predict(a, CTX) > predict(b, CTX)


def test_ttft_is_the_signal_for_streams():
    # Same TTFT, very different decode speed: for a stream only the first token counts.
    a, b = State("fast", model=fast_small()), State("slow", model=slow_big())
    stream = RouteContext(stream=True, prompt_tokens=100, now=0)
    assert predict(a, stream) == predict(b, stream)


def test_scraped_waiting_counts_as_queue():
    m = fast_small()
    assert predict(State("a", model=m, waiting=10), CTX) > predict(State("a", model=m), CTX)


def test_stale_figures_drift_back_to_the_prior():
    m = LatencyModel(Prior(tpot_s=0.03))
    m.observe_decode(11, 10 * 0.3, load=1, now=0)  # one very slow sample
    assert m.tpot(1, now=1) > 0.25
    assert abs(m.tpot(1, now=3600) - 0.03) < 0.005


def test_peak_ewma_reacts_at_once_to_a_slower_sample():
    m = LatencyModel()
    for t in range(10):
        m.observe_network(0.001, now=t)
    m.observe_network(0.050, now=10)
    assert m.net.get(10) == 0.050


def test_exploration_sometimes_tries_another():
    a, b = State("fast", model=fast_small()), State("slow", model=slow_big())
    s = PredictedLatency(exploration=0.5, seed=1)
    picks = {s.choose([a, b], CTX, t)[0] for t in range(50)}
    assert picks == {0, 1}


def test_least_inflight_and_lowest_latency_and_weighted():
    a, b = State("a", inflight=3), State("b", inflight=1)
    assert LeastInflight().choose([a, b], CTX, 0)[0] == 1
    a.model.observe_latency(0.5)
    b.model.observe_latency(0.9)
    assert LowestLatency().choose([a, b], CTX, 0)[0] == 0
    w = Weighted()
    x, y = State("x", weight=3), State("y", weight=1)
    picks = [w.choose([x, y], CTX, t)[0] for t in range(8)]
    assert picks.count(0) == 6 and picks.count(1) == 2


def test_near_tied_first_tokens_go_to_the_backend_that_finishes_first():
    # Both answer the first token within a few milliseconds of each other; one decodes 4x faster.
    a, b = State("slow", model=slow_big()), State("fast", model=fast_small())
    a.model.observe_prefill(100, 0.010, now=0)
    b.model.observe_prefill(100, 0.030, now=0)
    long_stream = RouteContext(stream=True, prompt_tokens=100, max_tokens=300, exact_output=True, now=0)
    strict = PredictedLatency(exploration=0).choose([a, b], long_stream, 0)[0]
    long_stream.ttft_tolerance_s = 0.1
    tolerant = PredictedLatency(exploration=0).choose([a, b], long_stream, 0)[0]
    assert (strict, tolerant) == (0, 1)


def test_exploration_never_sends_a_request_to_wait_in_a_queue():
    full = fast_small()
    full.slots = 1
    a, b = State("idle", model=slow_big()), State("full", inflight=1, model=full, finishing=[5.0])
    picks = {PredictedLatency(exploration=1.0, seed=1).choose([a, b], CTX, t)[0] for t in range(20)}
    assert picks == {0}


def test_a_long_stream_may_start_a_little_later_to_end_much_sooner():
    # The fast decoder is busy: its first token is 400 ms later, but 300 tokens end seconds sooner.
    quick_start, quick_end = State("idle-slow", model=slow_big()), State("busy-fast", model=fast_small())
    quick_end.model.queue.add(0.4, now=0)  # a residual queue of 0.4 s
    ctx = RouteContext(stream=True, prompt_tokens=100, max_tokens=300, exact_output=True, now=0, ttft_tolerance_s=0.1)
    assert PredictedLatency(exploration=0).choose([quick_start, quick_end], ctx, 0)[0] == 0
    ctx.ttft_tolerance_ratio = 0.05  # 5 % of the idle backend's ~12 s answer: 0.6 s of first-token slack
    assert PredictedLatency(exploration=0).choose([quick_start, quick_end], ctx, 0)[0] == 1
    short = RouteContext(stream=True, prompt_tokens=100, max_tokens=5, exact_output=True, now=0,
                         ttft_tolerance_s=0.1, ttft_tolerance_ratio=0.05)
    assert PredictedLatency(exploration=0).choose([quick_start, quick_end], short, 0)[0] == 0
