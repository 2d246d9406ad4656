"""Routing learns from what happened: each attempt's measured instants and its backend's own report
feed that backend's latency model, and so do the load figures the backend publishes.

What a measured interval means depends on the server kind, so it is read through the backend's
adapter: on llama.cpp a stream's response headers wait for a slot, so the time to headers is network
plus queue, never network alone. Prefill is learned per processed prompt token: a prompt the server
mostly read from its KV cache teaches the cost of the part it processed, not a faster rate.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import TYPE_CHECKING

from app.record import ESTIMATED, REPORTED, AttemptRecord
from app.routing.accuracy import PredictionErrors
from app.routing.latency_model import QUEUE_NOISE_S, LatencyModel
from app.routing.memory import BackendMemory, RoutingMemory
from app.routing.output_length import OutputLengths, Shape
from app.routing.prefix_index import BLOCK_CHARS, CHARS_PER_TOKEN
from app.routing.prefix_routing import MIN_BURST_BLOCKS
from app.routing.prefix_routing import verify as verify_prefix
from app.routing.reuse import ReuseTracker
from app.routing.state import slot_scoped_cache
from app.routing.token_ratio import TokenRatio
from app.upstream.adapters import BackendReport, ServerLoad

if TYPE_CHECKING:
    from app.routing.prefix_index import PromptBlocks
    from app.routing.state import BackendState

# A server's reuse of a prompt beyond the prefix index's match, shorter than this, is one the index cannot
# see (it matches whole blocks; the token estimate blurs one block's edge): the shortest prefix a burst
# waits for, two blocks.
UNSEEN_REUSE_TOKENS = MIN_BURST_BLOCKS * BLOCK_CHARS / CHARS_PER_TOKEN
# Another of ours can reach a server before one sent earlier only if it was sent before that one's request
# arrived: within a connection's setup (a TLS handshake to a remote host takes tens to a few hundred ms)
# or a moment the event loop was busy. A burst's clients send within milliseconds of each other.
SEND_RACE_S = 0.25


class Learner:
    """Feeds the latency models of the router's backends; the only writer of what routing learns."""

    def __init__(self, states: dict[str, BackendState], outputs: OutputLengths | None = None,
                 memory: RoutingMemory | None = None) -> None:
        """`memory`: what the gateway before a config reload learned (its backends' figures, for those of
        `states` it names; the served models' token ratios)."""
        memory = memory or RoutingMemory()
        self.states = states
        self.outputs = outputs if outputs is not None else OutputLengths()
        kept = {name: memory.backends[name] for name in states if name in memory.backends}
        # The share of prompt tokens each backend found in its prefix cache between its last two scrapes
        # (vLLM's counters), and the counters it was computed from.
        self.server_prefix_hits: dict[str, float] = {
            name: b.prefix_hits for name, b in kept.items() if b.prefix_hits is not None}
        self._prefix_counters: dict[str, tuple[float, float]] = {
            name: b.prefix_counters for name, b in kept.items() if b.prefix_counters is not None}
        # Per alias whose strategy weighs expected reuse (latency_aware): fed the backends' reported reuse.
        self.reuse: dict[str, ReuseTracker] = {}
        # Predicted against measured, per backend (for /admin/backends).
        self.accuracy: dict[str, PredictionErrors] = {name: PredictionErrors() for name in states}
        self.accuracy.update({name: b.accuracy for name, b in kept.items() if b.accuracy is not None})
        # Routing's prompt tokens per server token, per model the backends know (one tokenizer): any of
        # its backends' answers teach all of them, so one that has not answered yet prices its published
        # rate right too.
        self.token_ratios: dict[str, TokenRatio] = dict(memory.token_ratios)
        self._serving: dict[str, list[BackendState]] = {}
        for state in states.values():
            self._serving.setdefault(state.backend.config.model, []).append(state)
        # A backend the reload added serves a model whose ratio is known already.
        for served, ratio in self.token_ratios.items():
            self._price_in_routing_tokens(served, ratio)

    def memory(self, keep: Collection[str]) -> RoutingMemory:
        """What this learner's backends in `keep` (configured again under the same name, URL and model) and its
        served models taught, for the gateway a config reload builds (app/routing/memory.py). The aliases'
        own figures are their strategies' (Router.memory)."""
        return RoutingMemory(
            backends={name: BackendMemory(s.model, s.prefixes, self.accuracy.get(name), self._prefix_counters.get(name),
                                          self.server_prefix_hits.get(name))
                      for name, s in self.states.items() if name in keep},
            outputs=self.outputs, token_ratios=dict(self.token_ratios))

    def _state(self, name: str) -> BackendState | None:
        return self.states.get(name)

    # --- what the backend publishes -----------------------------------------------------------
    def server_load(self, name: str, load: ServerLoad | None) -> None:
        """The backend's published load: its slots replace learned ones, its waiting count is queue,
        and a round trip that never waits for a slot is a network sample."""
        s = self._state(name)
        if s is None:
            return
        s.scraped_waiting = load.waiting if load is not None else None
        if load is None or not load.waiting:
            s.others_waiting = s.waiting_beyond_ours = 0.0
            if load is None:
                return
        else:
            # The backend's waiting count includes this gateway's requests queued there (past its slots),
            # and a scrape is up to an interval old: a request of ours that waited then and holds a slot
            # now read as someone else's queue, a turnover each (issue 24: +1.2 s predicted on the quick
            # llama.cpp server, which no one else used). Only what is beyond ours in two scrapes running
            # counts.
            # Requests held at the gateway for a sibling's copy (held_back) are in flight but not sent: none
            # of them waits there. Counted as ours, they hid as many of another gateway's queued requests.
            slots = load.slots or s.model.slots
            ours = max(0, s.inflight - s.held_back - slots) if slots else 0
            beyond = max(0.0, load.waiting - ours)
            s.others_waiting = min(beyond, s.waiting_beyond_ours)
            s.waiting_beyond_ours = beyond
        if load.slots:
            s.model.set_reported_slots(load.slots)
        if load.rtt_s is not None:
            s.model.observe_network(load.rtt_s, peak=False)
        if load.prefill_tokens_per_s:
            s.model.set_published_prefill_rate(load.prefill_tokens_per_s)
        if load.prefix_cache_queries is not None and load.prefix_cache_hits is not None:
            before = self._prefix_counters.get(name)
            self._prefix_counters[name] = (load.prefix_cache_queries, load.prefix_cache_hits)
            if before is not None and load.prefix_cache_queries > before[0]:
                self.server_prefix_hits[name] = max(0.0, min(1.0, (load.prefix_cache_hits - before[1])
                                                                  / (load.prefix_cache_queries - before[0])))

    def _adopt_host_memory(self, learned: BackendState, keeps: bool) -> None:
        """`learned` just said whether it keeps a prompt pushed out of its slot: every other backend whose
        cache belongs to a slot and that has not said yet is taken to be alike (BackendPrefixes.adopt).
        Each learned it alone, a fleet paid the wrong guess once per server (llama_sim --per-slot, four
        shared prompts on two servers, --cache-ram 0: +7 % mean TTFT against the index before it knew host
        memory at all)."""
        for s in self.states.values():
            if s is not learned and slot_scoped_cache(s):
                s.prefixes.adopt(keeps)

    def _learn_token_ratio(self, s: BackendState, estimated: int, reported: int) -> None:
        served = s.backend.config.model
        ratio = self.token_ratios.get(served)
        if ratio is None:
            ratio = self.token_ratios[served] = TokenRatio()
        ratio.observe(estimated, reported)
        self._price_in_routing_tokens(served, ratio, (s,))

    def _price_in_routing_tokens(self, served: str, ratio: TokenRatio, alone: tuple[BackendState, ...] = ()) -> None:
        """Every backend serving `served` (else `alone`) converts its published prefill rate by `ratio`, once
        an answer has said it."""
        value = ratio.get()
        if value is not None:
            for state in self._serving.get(served, alone):
                state.model.set_prompt_token_ratio(value)

    # --- a stream's first event ---------------------------------------------------------------
    def first_token(self, a: AttemptRecord, prompt_tokens: int) -> None:
        """A stream's first event arrived: learn its network and queue now, not when its decode ends
        (which on a slow backend is many seconds later, while the queue builds)."""
        s = self._state(a.backend)
        if s is None or not a.first_event:
            return
        model, r = s.model, a.report
        ahead = max(0, a.load - 1)
        expected_queue = a.booked.queue_s if a.booked else 0.0
        to_headers = max(0.0, (a.headers or a.start) - a.start)
        if s.backend.adapter.headers_at_slot:
            # Headers left when a slot took the request: what the wait holds beyond the network is queue.
            # Prefill is learned at the end, when the server says how much of the prompt it processed.
            if a.headers:
                s.prefills.add(a.headers, a.first_event, float(prompt_tokens))
            wait = max(0.0, to_headers - model.net.get(time.monotonic()))
            if not _ours_could_explain(s, ahead, wait, a.sent):
                model.observe_queue(wait, ahead, expected_queue)
            return
        model.observe_network(to_headers)
        if r.queue_s is not None and not _ours_could_explain(s, ahead, r.queue_s, a.sent):
            model.observe_queue(r.queue_s, ahead, expected_queue)
        else:
            _learn_wait(model, a.first_event - (a.headers or a.start), r.prefill_s, prompt_tokens, ahead, expected_queue)

    def progress(self, a: AttemptRecord, state: BackendState, last: tuple[int, float], events: int, now: float) -> None:
        """A stream is `events` events into its decode, `last` = (events, instant) of the previous sample:
        a TPOT sample over the events between, so a backend that slowed down is seen within a second or
        two, even mid-answer, rather than when its longest answers end. The batch is the backend's
        in-flight count now."""
        s = self._state(a.backend)
        last_events, last_at = last
        if s is not None and last_at and now > last_at and events > last_events:
            s.model.observe_decode(events - last_events + 1, now - last_at, state.inflight, count_output=False)

    # --- a finished request -------------------------------------------------------------------
    def learn(self, a: AttemptRecord, prompt_hint: int, output: int, blocks: PromptBlocks | None = None,
              shape: tuple[str, Shape] | None = None, beside_s: float | None = None) -> int | None:
        """Feed an attempt that served a whole answer to its backend's latency model (its measured and
        reported figures; `output` tokens from its usage). `beside_s`: the seconds other requests on the
        backend decoded while this one's stream did (its lease's, from the in-flight book), summed over
        them. Called once, by the attempt's owner (app.dispatch.attempt), which it tells the prompt
        tokens the backend reported reusing, if any."""
        s = self._state(a.backend)
        if s is None or a.error_type or not a.end:
            return None
        if shape is not None and output > 0:
            self.outputs.observe(shape[0], shape[1], output, time.monotonic())
        if a.predicted is not None:
            ttft = a.first_event - a.start if a.stream and a.first_event else None
            # Not setdefault: its default, two bounded deques, would be built at every answer.
            errors = self.accuracy.get(a.backend)
            if errors is None:
                errors = self.accuracy[a.backend] = PredictionErrors()
            errors.add(a.predicted.ttft_s, ttft, a.predicted.e2e_s, a.end - a.start)
        known = s.prefixes.host_memory
        cached = verify_prefix(a, s, blocks)
        if s.prefixes.host_memory is not known and s.prefixes.host_memory is not None:
            self._adopt_host_memory(s, s.prefixes.host_memory)
        reuse = self.reuse.get(a.alias)
        if reuse is not None and cached is not None and a.report.prompt_tokens:
            reuse.observe_reported(cached / a.report.prompt_tokens, time.monotonic(), cached)
        model, r = s.model, a.report
        if r.prompt_tokens and prompt_hint > 0:
            self._learn_token_ratio(s, prompt_hint, r.prompt_tokens)
        # Prefill is learned against the prompt size routing predicts from (estimated from the body's
        # length before any usage exists), so the fitted line and its use agree on what x means; of
        # that, only the share the server processed (the rest came from its KV cache).
        prompt = processed_prompt(prompt_hint, r, a.prefix.tokens if a.prefix is not None else 0.0)
        model.observe_latency(a.end - a.start)
        if a.stream and a.first_event:
            if s.backend.adapter.headers_at_slot and a.headers:
                # Other prompts the server prefilled in the same steps took part of this one's prefill
                # time: the rate is learned from all the tokens processed in it (in this prompt's share
                # of them processed, the rest read from its cache).
                share = prompt / prompt_hint if prompt_hint else 1.0
                prompt += round(share * s.prefills.alongside(a.headers, a.first_event))
            if r.prefill_s is not None:
                model.observe_prefill(prompt, r.prefill_s)
            elif s.backend.adapter.headers_at_slot and a.headers:
                # The queue was before the headers: from headers to the first event was prefill.
                model.observe_prefill(prompt, a.first_event - a.headers)
            # Where a newcomer's prefill stops the decodes running beside it (llama.cpp), the time
            # this answer stood still for the prefills logged during it is its neighbours', not its own.
            seconds = a.end - a.first_event
            stalled = s.prefills.covered(a.first_event, a.end) if s.stalls_decodes else 0.0
            # The batch it decoded in: itself and the others decoding beside it, per second of its own
            # decode (a neighbour's prefill it stood still for is no time of its own, and on a server
            # that stalls for one the neighbour was not decoding yet). Not the requests in flight when
            # it was sent: sent to an idle server, an answer that a later arrival joined decoded in two.
            batch = (1.0 + beside_s / (seconds - stalled)) if beside_s is not None and seconds > stalled else None
            model.observe_decode(output, seconds, a.load, stalled_s=stalled, batch=batch, context=prompt_hint)
            return cached
        ahead = max(0, a.load - 1)
        expected_queue = a.booked.queue_s if a.booked else 0.0
        if r.queue_s is not None and not _ours_could_explain(s, ahead, r.queue_s, a.sent):
            model.observe_queue(r.queue_s, ahead, expected_queue)
        if r.prefill_s is not None:
            model.observe_prefill(prompt, r.prefill_s)
        if r.decode_s is not None:
            model.observe_decode(r.output_tokens or output, r.decode_s, a.load, source=REPORTED, context=prompt_hint)
        elif output > 1:
            # A whole answer with no report: what the total leaves after the predicted wait is decode.
            wait = a.booked.ttft_s if a.booked else model.ttft(prompt)
            model.observe_decode(output, max(0.0, (a.end - a.start) - wait), a.load, source=ESTIMATED,
                                 context=prompt_hint)
        return cached


def _ours_could_explain(s: BackendState, ahead: int, wait: float, sent: int | None = None) -> bool:
    """Whether a wait with nothing of ours ahead when it was sent may still have been behind our own
    requests: others sent with it can reach the server first (concurrent connections), and the backend
    is over its slots with ours now, or any of ours was sent there after it (`sent`: the backend's count
    of leases when it was sent, `BackendState.sent`) within SEND_RACE_S of it. Such a wait is not someone else's traffic (the
    residual queue): after a calibration burst, one 4.5 s wait of that kind priced the slow llama.cpp
    server at +3.9 s for the next minute, during which it got 1 request in 49 and so never a sample to
    correct it.

    The count at the first token alone missed the commonest case (issue 24, mixed lengths on real
    llama.cpp, two slots): a closed-loop burst's clients start together, and of the four sent to one
    server the one with nothing ahead can reach it third; the two that overtook it are prefilled in the
    same steps and end together, so at its first token two of ours are in flight, no more than the
    slots, and its wait (their whole answers, 10-13 s for long prompts) became a residual queue. One
    such sample before a run priced every request there 10-13 s high (TTFT predicted 13-18 s for
    1.5-4.7 s, and the run's rest +40-126 %: the figure relaxes over minutes). A later send of ours
    right after it is what such a race needs; without one, a wait with nothing of ours ahead is not
    ours. Any later send during the wait was too wide: while we send steadily, a long wait almost always
    has one, so other tenants' queues were dismissed, the longer the likelier (a 3 s queue met by ours
    sent 1 s apart was learned as 0.00 s; t32v)."""
    if ahead != 0 or not wait > QUEUE_NOISE_S:
        return False
    return s.inflight > (s.model.slots or 1) or (sent is not None and s.sent_after(sent, SEND_RACE_S))


def processed_prompt(hint: int, report: BackendReport, matched: float = 0.0) -> int:
    """The prompt tokens the server processed, in the units routing predicts with (the body's estimate),
    where routing predicted it would reuse `matched` of them (the prefix index's match).

    A reuse beyond the match shorter than the index can ever see (a chat template every prompt starts
    with, which llama.cpp keeps in each slot) counts as routing counts it: processed. Scaled away, it
    taught a rate that routing then applied to the whole prompt (issue 24, real llama.cpp servers and
    unique prompts: ~30 template tokens of 60-120 reused each time, every TTFT predicted +25-30 %)."""
    share = report.processed_share()
    if share is None:
        return hint
    processed, routed = hint * share, max(0.0, hint - matched)
    if 0.0 <= routed - processed < UNSEEN_REUSE_TOKENS:
        return max(1, round(routed))
    return max(1, round(processed))


def _learn_wait(model: LatencyModel, wait: float, reported_prefill: float | None, prompt: int, ahead: int,
                expected_queue: float) -> None:
    """Split a stream's measured wait for its first token (headers left at once) into queue and prefill."""
    if reported_prefill is not None:
        model.observe_queue(max(0.0, wait - reported_prefill), ahead, expected_queue)
        return
    if ahead == 0:
        # Nothing else was in flight here: the wait was prefill (and the backend's fixed costs).
        model.observe_prefill(prompt, wait)
        return
    # Queue is what the wait leaves after the modelled prefill; the model's error widens what counts as
    # no wait at all, and a wait that was not queueing teaches prefill too.
    prefill = model.prefill_s(prompt)
    tolerance = QUEUE_NOISE_S + 0.5 * prefill
    model.observe_queue(max(0.0, wait - prefill), ahead, expected_queue, tolerance)
    if wait - prefill <= tolerance:
        model.observe_prefill(prompt, wait)
