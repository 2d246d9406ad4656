"""Prefix-aware routing on hand-made backend states: sticky until saturated, through the latency model."""

from __future__ import annotations

from collections import Counter

from app.config import PrefixPolicy
from app.protocols import CHAT, COMPLETIONS
from app.routing.context import RouteContext
from app.routing.latency_model import LatencyModel, Prior
from app.routing.predict import estimate
from app.routing.prefix_index import BackendPrefixes, prompt_blocks
from app.routing.prefix_routing import PrefixAware, match
from app.routing.state import BackendState, InflightBook


def blocks_of(body: dict):
    """The block keys of a request body, as dispatch computes them (the protocol's canonical text)."""
    protocol = COMPLETIONS if "prompt" in body else CHAT
    return prompt_blocks(protocol.prefix_text(body))


SYSTEM = "You are the support assistant of a large bank. Answer briefly and cite the policy. " * 20  # ~420 tokens
RATE = 150.0  # prompt tokens per second: a CPU llama.cpp server's order of magnitude


class State:
    """The fields of the router's BackendState that prefix-aware routing reads, and its bookings."""

    book_request = BackendState.book_request
    start_prefill = BackendState.start_prefill
    reports_first_token = BackendState.reports_first_token
    stalls_decodes = False  # a server whose running decodes go on through a newcomer's prefill (vLLM's kind)

    def __init__(self, name, inflight=0, slots=4, finishing=(), accuracy=1.0):
        self.name, self.inflight = name, inflight
        self.model = LatencyModel(Prior(prefill_tokens_per_s=RATE, tpot_s=0.01, slots=slots, output_tokens=20))
        for _ in range(3):
            self.model.observe_decode(20, 19 * 0.01, load=1, now=0)
        self.scraped_waiting, self.others_waiting = None, 0.0
        self.book = InflightBook()
        for at in finishing:
            self.book.add(0.0, at, 0.0)
        self.prefixes = BackendPrefixes(accuracy=accuracy)
        self.uncached_inflight = 0.0
        self.prefilling = 0
        self.copy_waiters = 0
        self.held_back = 0
        self.prefill_busy_since = 0.0


def ctx_for(body: dict, now: float = 1.0) -> RouteContext:
    blocks = blocks_of(body)
    return RouteContext(stream=True, prompt_tokens=round(blocks.tokens), max_tokens=20, now=now, prefix=blocks,
                        prefix_policy=PrefixPolicy(), cached={})


def ask(question: str, system: str = SYSTEM) -> dict:
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]}


def warm(state: State, body: dict) -> None:
    state.prefixes.record(blocks_of(body).keys, now=0.0, ready_at=0.0)


def test_predicted_ttft_counts_only_uncached_tokens():
    a = State("a")
    warm(a, ask("first question"))
    ctx = ctx_for(ask("second question"))
    m = match(a, ctx)
    ctx.cached = {"a": m}
    with_prefix = estimate(a, ctx).ttft_s
    ctx.cached = {}
    without = estimate(a, ctx).ttft_s
    assert m.tokens > 0.9 * len(SYSTEM) / 4
    assert without - with_prefix > 0.9 * m.tokens / RATE


def test_stays_on_the_warm_backend_while_it_is_not_saturated():
    a, b, c = State("a", inflight=1), State("b"), State("c")
    warm(b, ask("an earlier question"))
    i, scores = PrefixAware().choose([a, b, c], ctx_for(ask("a new question")), 0)
    assert i == 1 and scores[1] == min(scores)


def test_leaves_the_warm_backend_once_its_queue_costs_more_than_the_prefill():
    a, b = State("a"), State("b", inflight=8, slots=4, finishing=[6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0])
    warm(b, ask("an earlier question"))
    i, scores = PrefixAware().choose([a, b], ctx_for(ask("a new question")), 0)
    assert i == 0
    assert scores[1] > scores[0] * (1 + PrefixPolicy().sticky_ratio)


def test_uncached_prompt_tokens_in_flight_are_load():
    a, b = State("a"), State("b")
    b.uncached_inflight = 2000  # two long cold prompts still prefilling there
    i, scores = PrefixAware().choose([a, b], ctx_for(ask("hello", "short system")), 0)
    assert i == 0 and scores[1] - scores[0] > 1000 / RATE


def test_an_index_that_is_often_wrong_is_believed_less():
    trusted, doubted = State("t", accuracy=1.0), State("d", accuracy=0.2)
    for s in (trusted, doubted):
        warm(s, ask("earlier"))
    ctx = ctx_for(ask("later"))
    assert match(doubted, ctx).tokens < 0.25 * match(trusted, ctx).tokens


def test_replicas_send_a_new_prefix_to_the_same_backend_without_sharing_state():
    fleets = [[State(n) for n in "abc"] for _ in range(3)]  # three gateway replicas' views of one fleet
    picks = Counter()
    for k in range(60):
        body = ask("q", f"System prompt number {k}. " * 30)
        chosen = {PrefixAware().choose(fleet, ctx_for(body), turn=k + r)[0] for r, fleet in enumerate(fleets)}
        assert len(chosen) == 1  # the same on every replica, whatever its round-robin turn
        picks[chosen.pop()] += 1
    # ... and different prefixes spread over the fleet.
    assert min(picks.values()) >= 10


def test_a_busier_hashed_backend_is_passed_over_bounded_load():
    body = ask("q", "A brand new system prompt. " * 30)
    idle = [State(n) for n in "abc"]
    hashed = PrefixAware().choose(idle, ctx_for(body), 0)[0]
    busy = [State(n, inflight=8, slots=4, finishing=[5.0 + i for i in range(8)]) if i == hashed else State(n)
            for i, n in enumerate("abc")]
    assert PrefixAware().choose(busy, ctx_for(body), 0)[0] != hashed
