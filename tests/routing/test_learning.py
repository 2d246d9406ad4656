"""Routing learns from attempts: a stream's wait at its first token, its decode speed while it runs,
whole answers when they end, and what the server publishes. Time to headers means what the server
kind says it means; prefill is learned per processed (uncached) prompt token."""

from __future__ import annotations

import time

import pytest

from app.config import BackendConfig, BreakerConfig
from app.record import AttemptRecord, Estimate
from app.routing.health import Breaker
from app.routing.latency_model import LatencyModel
from app.routing.learning import Learner
from app.routing.state import BackendState
from app.upstream.adapters import BackendReport, ServerLoad, adapter_for


class State:
    inflight = 3


class FakeBackend:
    def __init__(self, flavor: str) -> None:
        self.name, self.adapter = "b", adapter_for(flavor)
        self.config = BackendConfig(base_url="http://127.0.0.1:1/v1", model="m", flavor=flavor)


def stream_attempt(load: int, wait: float, predicted_queue: float = 0.0, flavor: str = "openai") -> AttemptRecord:
    a = AttemptRecord(1, "m", "b", flavor, "127.0.0.1", 1, "m", True, start=100.0, load=load,
                      booked=Estimate(predicted_queue, 0.01 + predicted_queue, 1.0, 50))
    a.headers, a.first_event = 100.001, 100.001 + wait
    return a


def telemetry(flavor: str = "openai") -> tuple[Learner, LatencyModel]:
    model = LatencyModel()
    state = BackendState(FakeBackend(flavor), 256, Breaker(BreakerConfig()), model)
    return Learner({"b": state}), model


def wait_then_first_token(t: Learner, a: AttemptRecord, wait_s: float, prefill_s: float = 0.5) -> None:
    """`a`'s headers came `wait_s` after it was sent (a slot took it), its first token `prefill_s` later."""
    a.headers = a.start + wait_s
    a.first_event = a.headers + prefill_s
    t.first_token(a, prompt_tokens=100)


def test_a_first_token_that_waited_behind_others_teaches_the_slot_count_at_once():
    t, model = telemetry()
    model.observe_prefill(100, 0.01, now=0)
    t.first_token(stream_attempt(load=5, wait=0.8), prompt_tokens=100)  # 4 ahead, 0.8 s wait
    assert model.slots == 4


def test_a_first_token_with_nothing_ahead_is_prefill():
    t, model = telemetry()
    for _ in range(3):
        t.first_token(stream_attempt(load=1, wait=0.05), prompt_tokens=500)
    assert abs(model.prefill_s(500) - 0.05) < 0.01 and model.slots is None  # the prior is 0.1 s


def test_decode_speed_is_sampled_while_the_stream_runs():
    t, model = telemetry()
    a = stream_attempt(load=1, wait=0.01)
    t.progress(a, State(), (1, a.first_event), 8, a.first_event + 7 * 0.2)  # 8 events, 7 steps of 200 ms
    assert model.tpot_base.samples == 1 and model.output_tokens.samples == 0
    assert model.tpot(1) > 0.15
    t.progress(a, State(), (8, a.first_event + 7 * 0.2), 16, a.first_event + 7 * 0.2 + 8 * 0.05)  # then 8 of 50 ms
    assert model.tpot_base.samples == 2


def test_a_finished_stream_teaches_decode_and_output_length():
    t, model = telemetry()
    a = stream_attempt(load=1, wait=0.01)
    a.end = a.first_event + 40 * 0.02
    t.learn(a, prompt_hint=0, output=41)
    assert abs(model.tpot(1) - 0.02) < 1e-6 and model.output_tokens.value == 41


def test_on_llamacpp_the_wait_for_headers_is_queue_not_network():
    t, model = telemetry("llamacpp")
    a = stream_attempt(load=1, wait=0.06, flavor="llamacpp")
    a.headers = a.start + 0.797  # a slot freed after 797 ms
    a.first_event = a.headers + 0.06
    t.first_token(a, prompt_tokens=100)
    assert model.net.get(time.monotonic()) < 0.005
    assert model.residual_queue() > 0.7


def test_published_slots_win_over_queueing():
    t, model = telemetry("llamacpp")
    t.server_load("b", ServerLoad(slots=4, running=1, waiting=0, rtt_s=0.0007))
    assert model.slots == 4 and model.slots_source == "reported"
    assert model.net.get(time.monotonic()) == pytest.approx(0.0007)
    a = stream_attempt(load=2, wait=0.01, flavor="llamacpp")
    a.headers = a.start + 0.5  # a long wait with one ahead: on its own, "1 slot"
    t.first_token(a, prompt_tokens=100)
    assert model.slots == 4


def test_prefill_is_learned_per_processed_token():
    t, model = telemetry("llamacpp")
    for i in range(6):
        a = stream_attempt(load=1, wait=0.01, flavor="llamacpp")
        a.end = a.first_event + 0.1
        # The first time all 433 tokens were processed in 2 s; then llama.cpp reused 432 from its cache.
        processed = 433 if i == 0 else 1
        a.report = BackendReport(prefill_s=2.0 if i == 0 else 0.02, prompt_tokens=433,
                                 prompt_processed=processed, prompt_cached=433 - processed)
        t.learn(a, prompt_hint=433, output=10)
    # A new 409-token prompt is predicted near the cold rate (about 1.9 s; the prior slope still pulls), not
    # at the cache-inflated one learning against the whole prompt gives (about 0.35 s).
    assert model.prefill_s(409) > 1.0


def test_a_servers_prefix_cache_counters_give_its_hit_share_between_scrapes():
    t, _ = telemetry("vllm")
    t.server_load("b", ServerLoad(prefix_cache_queries=1000, prefix_cache_hits=100))
    assert "b" not in t.server_prefix_hits  # one reading is no rate
    t.server_load("b", ServerLoad(prefix_cache_queries=3000, prefix_cache_hits=1700))
    assert t.server_prefix_hits["b"] == 0.8


def test_a_backends_waiting_count_is_someone_elses_queue_only_beyond_ours_and_in_two_scrapes():
    t, _ = telemetry("llamacpp")
    state = t.states["b"]
    state.inflight = 3  # two slots, one of ours waiting
    t.server_load("b", ServerLoad(slots=2, running=2, waiting=1))
    assert state.others_waiting == 0.0
    # A stale scrape: ours that waited then holds a slot now, and no one else is there.
    state.inflight = 2
    t.server_load("b", ServerLoad(slots=2, running=2, waiting=1))
    assert state.others_waiting == 0.0
    # Three waiting beyond ours, twice running: another client's queue.
    t.server_load("b", ServerLoad(slots=2, running=2, waiting=3))
    t.server_load("b", ServerLoad(slots=2, running=2, waiting=3))
    assert state.others_waiting == 3.0
    t.server_load("b", ServerLoad(slots=2, running=2, waiting=0))
    assert state.others_waiting == 0.0


def test_requests_held_at_the_gateway_for_a_siblings_copy_are_not_ours_waiting_at_the_server():
    # Held back for a sibling's copy of their prefix (Lease.wait_for_prefix), they are in flight here but
    # not sent: the server's waiting count cannot include them. Counted as ours there, two held siblings hid
    # two requests another gateway (a replica) had queued on the same server.
    t, _ = telemetry("llamacpp")
    state = t.states["b"]
    state.inflight, state.held_back = 4, 2  # two running in the two slots, two held at the gateway
    t.server_load("b", ServerLoad(slots=2, running=2, waiting=2))
    t.server_load("b", ServerLoad(slots=2, running=2, waiting=2))
    assert state.others_waiting == 2.0
    # Sent on, they wait at the server behind the two running: ours, not someone else's.
    state.held_back = 0
    t.server_load("b", ServerLoad(slots=2, running=2, waiting=2))
    assert state.others_waiting == 0.0


def test_a_wait_our_own_requests_may_explain_is_not_someone_elses_queue():
    # Sent with nothing ahead, but others of ours sent with it reached the server first: the backend is
    # over its slots with ours when the first token comes, so the wait is not a residual queue.
    t, model = telemetry("llamacpp")
    t.server_load("b", ServerLoad(slots=2, running=2, waiting=1))
    t.states["b"].inflight = 4
    a = stream_attempt(load=1, wait=0.5, flavor="llamacpp")
    wait_then_first_token(t, a, 4.5)
    assert model.residual_queue() == 0.0
    # Alone on the backend, the same wait is someone else's.
    t.states["b"].inflight = 1
    t.first_token(a, prompt_tokens=100)
    assert model.residual_queue() > 4.0


def test_a_wait_behind_ours_sent_right_after_it_is_not_someone_elses_queue_once_they_have_ended():
    # A burst's clients start together: four sent to a two-slot server, the first with nothing ahead. It
    # reached the server third, and the two that overtook it were prefilled together and ended together:
    # at its first token two of ours are in flight, no more than the slots, yet the 12 s it waited for a
    # slot was theirs. Learned as a residual queue, it priced every request there 12 s high for minutes.
    t, model = telemetry("llamacpp")
    t.server_load("b", ServerLoad(slots=2, running=0, waiting=0))
    state = t.states["b"]
    a = stream_attempt(load=1, wait=0.5, flavor="llamacpp")
    a.sent = state.note_sent(50.0)
    for at in (50.002, 50.003, 50.004):  # three more of ours sent right after it
        state.note_sent(at)
    state.inflight = 2  # the two that overtook it have ended; it and the fourth are in flight
    wait_then_first_token(t, a, 12.0)
    assert model.residual_queue() == 0.0
    # The same wait with none of ours sent there after it is someone else's.
    b = stream_attempt(load=1, wait=0.5, flavor="llamacpp")
    b.sent = state.note_sent(70.0)
    wait_then_first_token(t, b, 12.0)
    assert model.residual_queue() > 11.0


def test_another_tenants_queue_is_learned_while_ours_are_sent_steadily():
    # Others keep a 3 s queue before any slot; ours are sent 1 s apart. The next of ours, sent a second
    # after the first, cannot have reached the server before it: the first's 3 s wait is the others'.
    t, model = telemetry("llamacpp")
    t.server_load("b", ServerLoad(slots=2, running=2, waiting=3))
    state = t.states["b"]
    first = stream_attempt(load=1, wait=0.5, flavor="llamacpp")
    first.sent = state.note_sent(100.0)
    state.note_sent(101.0)
    state.inflight = 2
    wait_then_first_token(t, first, 3.0, prefill_s=0.3)
    assert 2.9 < model.residual_queue() < 3.1


def test_a_send_forgotten_among_many_since_counts_as_one_right_after():
    state = telemetry()[0].states["b"]
    first = state.note_sent(0.0)
    for i in range(1, 200):
        state.note_sent(float(i))
    assert state.sent_after(first, 0.25)  # 199 sent since: which came when is no longer kept
    assert not state.sent_after(150, 0.25)  # the next one came 1 s after it
    assert state.sent_after(150, 1.0)
    assert not state.sent_after(state.sent, 1.0)  # none sent after the last


def test_prefill_is_learned_from_every_prompt_the_server_processed_alongside():
    # Two 50-token prompts prefilled in the same steps, 1 s for both: each reports 1 s. The rate is
    # 100 tokens/s, not 50.
    t, model = telemetry("llamacpp")
    for k in range(8):
        pair = []
        for _ in range(2):
            a = stream_attempt(load=2, wait=1.0, flavor="llamacpp")
            a.start, a.headers, a.first_event = 100.0 + 10 * k, 100.0 + 10 * k, 101.0 + 10 * k
            a.end = a.first_event + 0.5
            a.report = BackendReport(prefill_s=1.0, prompt_tokens=50, prompt_processed=50, prompt_cached=0)
            t.first_token(a, prompt_tokens=50)
            pair.append(a)
        for a in pair:
            t.learn(a, prompt_hint=50, output=10)
    assert model.prefill_s(50) == pytest.approx(0.5, rel=0.15)


def test_a_chat_template_the_server_reuses_of_every_prompt_is_learned_as_routing_counts_it():
    # Unique 90-token prompts (the body's estimate) of which llama.cpp reuses the ~30-token chat template
    # it keeps in the slot, at 0.3 s each: routing predicts from the whole 90, which no index block
    # covers, so the line must give 0.3 s at 90, not 0.3 s at 60 (a rate applied later to all 90).
    t, model = telemetry("llamacpp")
    for k in range(16):
        hint = 60 + 4 * k  # lengths vary, as a workload's do
        a = stream_attempt(load=1, wait=0.01, flavor="llamacpp")
        a.end = a.first_event + 0.1
        a.report = BackendReport(prefill_s=hint / 300, prompt_tokens=hint, prompt_processed=hint - 30,
                                 prompt_cached=30)
        t.learn(a, prompt_hint=hint, output=10)
    assert model.prefill_s(90) == pytest.approx(0.3, rel=0.1)


@pytest.mark.parametrize(("flavor", "learned"), [("llamacpp", False), ("vllm", True)])
def test_a_prompt_missed_on_a_cache_kept_per_slot_teaches_no_capacity(flavor, learned):
    # llama.cpp keeps a prompt in the slot that ran it: a sibling sent while that copy was busy takes the
    # other slot and pushes out whatever it held, however few tokens were sent since. Read as a capacity
    # (what entered the cache since the prompt was last used), one such miss on a real server set it to
    # one block, and the index forgot every prompt it had placed there (issue 24). A block cache (vLLM's)
    # loses prompts to the tokens that entered it since: there the miss is a capacity.
    from app.routing.prefix_index import prompt_blocks
    from app.routing.prefix_routing import PrefixMatch

    t, _ = telemetry(flavor)
    state = t.states["b"]
    blocks = prompt_blocks("Policy zero. " * 100 + "What is my balance?")
    state.prefixes.record(blocks.keys, now=0.0, ready_at=0.0)
    a = stream_attempt(load=1, wait=2.0, flavor=flavor)
    a.end = a.first_event + 0.5
    a.prefix = PrefixMatch(len(blocks.keys), blocks.tokens, blocks.tokens, turnover=32.0)
    a.report = BackendReport(prefill_s=2.0, prompt_tokens=330, prompt_processed=320, prompt_cached=10)
    t.learn(a, prompt_hint=round(blocks.tokens), output=16, blocks=blocks)
    assert state.prefixes.accuracy < 0.5  # the miss counts against the index either way
    assert (state.prefixes.capacity_tokens < 1000) is learned


def answer_beside_a_prefill(t, t0: float, prefill_at: float, prefill_s: float, prompt_tokens: int, end: float):
    """A 60-token prompt's answer on a llama.cpp server, sent at `t0` and first token 0.1 s later, ending at
    `end`; a neighbour takes the other slot at `prefill_at` and prefills `prompt_tokens` for `prefill_s`
    (logged, as its first token is). Returns the answer's attempt, for the caller to teach."""
    neighbour = stream_attempt(load=2, wait=prefill_s, flavor="llamacpp")
    neighbour.start = neighbour.headers = prefill_at
    neighbour.first_event = prefill_at + prefill_s
    t.first_token(neighbour, prompt_tokens=prompt_tokens)
    a = stream_attempt(load=1, wait=0.1, flavor="llamacpp")
    a.start, a.headers, a.first_event, a.end = t0, t0, t0 + 0.1, end
    a.report = BackendReport(prefill_s=0.1, prompt_tokens=60, prompt_processed=60, prompt_cached=0)
    return a


def test_an_answer_is_taught_without_the_time_it_stood_still_for_a_neighbours_prefill():
    # llama.cpp runs a newcomer's prompt in the same steps as the decodes beside it: a 24-token answer
    # decoding at 20 ms a token (0.46 s) stands still through a 3 s prefill that begins 0.2 s into it and
    # ends at 3.46 s. The answer's median is taught the 0.46 s it decoded, not 3.46 s: the stall was a
    # later arrival's, which the next answer's prediction cannot know of.
    t, model = telemetry("llamacpp")
    for k in range(4):
        t0 = 100.0 + 20 * k
        a = answer_beside_a_prefill(t, t0, prefill_at=t0 + 0.3, prefill_s=3.0, prompt_tokens=600, end=t0 + 3.56)
        t.learn(a, prompt_hint=60, output=24)
    now = time.monotonic()  # learned as the answers end, at the clock's now
    assert model.answer_tpot(1, now) == pytest.approx(0.46 / 23, rel=0.05)
    # The line, which prices when the requests in flight will finish, keeps the stalls.
    assert model.tpot(1, now) > 5 * 0.46 / 23


def test_answers_sent_to_an_idle_server_teach_the_batch_they_decoded_in_not_the_state_they_were_sent_in():
    # Real llama.cpp on a 2-core box (issue 24, mixed lengths): sent to an idle server, some answers
    # decode alone (24 tokens in 0.3 s), others beside a later arrival all along (0.75 s: a batch of
    # two is 2.5 times slower a token). One sent to an idle server is priced at the decode alone, and
    # one sent with another in flight at the decode beside it; not at a blend of the two.
    t, model = telemetry("llamacpp")
    model.set_reported_slots(2)
    for k in range(6):
        joined = k % 2 == 1
        a = stream_attempt(load=1, wait=0.1, flavor="llamacpp")
        a.start, a.headers, a.first_event = 100.0 + 10 * k, 100.0 + 10 * k, 100.1 + 10 * k
        a.end = a.first_event + (0.75 if joined else 0.3)
        t.learn(a, prompt_hint=60, output=24, beside_s=0.75 if joined else 0.0)
    now = time.monotonic()
    assert model.answer_tpot(1, now) == pytest.approx(0.3 / 23)
    assert model.answer_tpot(2, now) == pytest.approx(0.75 / 23)
    # Queued behind both slots, a request decodes beside a full batch when it gets one: priced so.
    assert model.answer_tpot(4, now) == pytest.approx(0.75 / 23)


def test_an_answer_stalled_by_a_neighbours_prefill_counts_its_batch_over_its_own_decode():
    # A neighbour takes the other slot 0.1 s into an answer's decode and prefills for 4 s (the answer
    # stands still), then decodes beside it for the answer's last 0.7 s: the answer decoded 0.8 s of its
    # own, 0.7 s of it beside the neighbour, a batch of about two; not 1.15, as over its whole 4.8 s.
    t, model = telemetry("llamacpp")
    model.set_reported_slots(2)
    for k in range(3):
        t0 = 100.0 + 20 * k
        a = answer_beside_a_prefill(t, t0, prefill_at=t0 + 0.2, prefill_s=4.0, prompt_tokens=900, end=t0 + 4.9)
        t.learn(a, prompt_hint=60, output=24, beside_s=0.7)
    now = time.monotonic()
    assert model.answers.snapshot(now)["answers"].keys() == {"2"}
    assert model.answer_tpot(2, now) == pytest.approx(0.8 / 23, rel=0.01)


def test_an_answer_on_a_server_whose_decodes_never_stop_for_a_prefill_is_taught_as_it_took():
    # vLLM chunks a newcomer's prefill between decode steps: whatever else ran, the answer's time is its own.
    t, model = telemetry("vllm")
    for k in range(4):
        t0 = 100.0 + 20 * k
        t.states["b"].prefills.add(t0 + 0.2, t0 + 0.4, 600.0)  # another request's prefill during the decode
        a = stream_attempt(load=1, wait=0.1, flavor="vllm")
        a.start, a.headers, a.first_event = t0, t0, t0 + 0.1
        a.end = a.first_event + 0.46
        a.report = BackendReport(prefill_s=0.1, prompt_tokens=60, prompt_processed=60, prompt_cached=0)
        t.learn(a, prompt_hint=60, output=24)
    assert model.answer_tpot(1, time.monotonic()) == pytest.approx(0.46 / 23, rel=0.05)


def test_each_answer_teaches_its_decode_at_its_whole_prompts_size():
    # The context a decode step reads is the whole prompt (a part the server had cached too), in the
    # units routing predicts with: the body's estimate, whatever the server reports processing.
    t, model = telemetry()
    for k in range(8):
        hint, per_token = (100, 0.014) if k % 2 else (1000, 0.021)
        a = stream_attempt(load=1, wait=0.01)
        a.end = a.first_event + 23 * per_token
        a.report = BackendReport(prompt_tokens=hint, prompt_processed=hint // 10, prompt_cached=hint - hint // 10)
        t.learn(a, prompt_hint=hint, output=24, beside_s=0.0)
    now = time.monotonic()
    assert model.answer_tpot(1, now, context=100.0) == pytest.approx(0.014, rel=0.1)
    assert model.answer_tpot(1, now, context=1000.0) == pytest.approx(0.021, rel=0.1)


def test_prefills_that_ran_together_count_once_in_the_time_a_decode_stood_still():
    from app.routing.state import PrefillLog

    log = PrefillLog()
    for start, end in ((1.0, 3.0), (2.0, 4.0), (6.0, 7.0), (9.0, 10.0)):
        log.add(start, end, 500.0)
    # 1-4 s (two prefills side by side: one stall of 3 s, not 4), then 6-6.5 s of the third; none of the last.
    assert log.covered(0.5, 6.5) == pytest.approx(3.5)
    assert log.covered(4.0, 6.0) == 0.0


def test_each_answer_decode_figure_says_how_its_decode_and_its_batch_were_known():
    # /admin/backends shows the answers' medians per batch: timing data carries its source. A stream's
    # decode is timed by the gateway and its batch measured by the in-flight book; a JSON answer's decode
    # is the backend's report, or, with none, what its total leaves after the predicted wait, and its
    # batch is the one the requests in flight at sending make.
    def answers(learn) -> dict:
        t, model = telemetry()
        for _ in range(3):
            learn(t)
        return model.snapshot(200.0)["answer_tpot_s"]["answers"]

    def stream(t):
        a = stream_attempt(load=1, wait=0.01)
        a.end = a.first_event + 20 * 0.02
        t.learn(a, prompt_hint=10, output=21, beside_s=0.0)

    def json(report: bool):
        def learn(t):
            a = AttemptRecord(1, "m", "b", "openai", "127.0.0.1", 1, "m", False, start=100.0, load=1,
                              booked=Estimate(0.0, 0.05, 0.5, 20))
            a.end = 100.5
            if report:
                a.report = BackendReport(decode_s=0.4, output_tokens=21)
            t.learn(a, prompt_hint=10, output=21)
        return learn

    def tags(level: dict) -> tuple[str, str]:
        return level["source"], level["batch_source"]

    assert tags(answers(stream)["1"]) == ("measured", "measured")
    assert tags(answers(json(report=True))["1"]) == ("reported", "estimated")
    assert tags(answers(json(report=False))["1"]) == ("estimated", "estimated")


def test_a_servers_prompt_cache_kind_once_learned_is_the_rest_of_the_fleets_until_they_say():
    # Whether a llama.cpp server keeps a prompt pushed out of its slot (host memory) is learned from its
    # first report of one; servers of one fleet are as a rule started alike, so the others take it until
    # their own first report says otherwise. A vLLM backend (a block cache, no slots) is not one of them.
    from app.routing.prefix_index import prompt_blocks
    from app.routing.prefix_routing import PrefixMatch

    def learner() -> Learner:
        states = {}
        for name, flavor in (("b", "llamacpp"), ("c", "llamacpp"), ("v", "vllm")):
            backend = FakeBackend(flavor)
            backend.name = name
            states[name] = BackendState(backend, 256, Breaker(BreakerConfig()), LatencyModel())
        return Learner(states)

    prompts = [prompt_blocks(f"Policy {k}. " * 100 + "What is my balance?") for k in range(3)]

    def push_out(state: BackendState) -> None:  # three prompts through two slots: the first leaves its slot
        import asyncio
        for k, p in enumerate(prompts):
            state.prefixes.record(p.keys, now=float(k), ready_at=float(k))
            end = asyncio.Event()
            state.prefixes.occupy(p.keys, release_at=k + 0.5, event=end, computes=True, slots=2)
            end.set()
        assert state.prefixes.in_host_memory(prompts[0].keys[0])

    def report(t: Learner, name: str, reused: bool) -> None:
        p = prompts[0]
        a = stream_attempt(load=1, wait=0.3, flavor=t.states[name].backend.config.flavor)
        a.backend, a.end = name, a.first_event + 0.5
        a.prefix = PrefixMatch(len(p.keys), p.tokens, p.tokens / 2, hosted=True)
        a.report = BackendReport(prefill_s=0.3, prompt_tokens=330, prompt_processed=20 if reused else 320,
                                 prompt_cached=310 if reused else 10)
        t.learn(a, prompt_hint=round(p.tokens), output=16, blocks=p)

    t = learner()
    for name in ("b", "c"):
        push_out(t.states[name])
    report(t, "b", reused=False)
    b, c, v = (t.states[n].prefixes for n in ("b", "c", "v"))
    assert (b.host_memory, c.host_memory, v.host_memory) == (False, False, None)
    assert not c.in_host_memory(prompts[0].keys[0])  # taken to lose it: forgotten there too
    # The other way round, and a server whose own report differs keeps its own.
    t = learner()
    for name in ("b", "c"):
        push_out(t.states[name])
    report(t, "b", reused=True)
    assert t.states["c"].prefixes.host_memory is True
    report(t, "c", reused=False)
    assert (t.states["b"].prefixes.host_memory, t.states["c"].prefixes.host_memory) == (True, False)


def test_a_servers_published_prefill_rate_prices_prompts_until_its_own_answers_teach_the_line():
    # A gateway fresh from its start, in front of a llama.cpp server that has processed prompts before: its
    # /metrics say 178 tokens a second. Priced at the prior's 5,000, a 600-token prompt read 0.12 s.
    t, model = telemetry("llamacpp")
    assert model.prefill_s(600) < 0.2
    t.server_load("b", ServerLoad(slots=2, running=0, waiting=0, prefill_tokens_per_s=178.0))
    assert model.prefill_s(600) == pytest.approx(600 / 178.0, rel=0.01)
    assert model.snapshot()["prefill_rate_from"] == "published"
    # Once the server's answers teach the line, they price the prompt; the published rate is what the line
    # relaxes back to unfed.
    for k in range(6):
        model.observe_prefill(600, 2.4, now=float(k))
        model.observe_prefill(30, 0.18, now=float(k) + 0.5)
    assert model.prefill_s(600, now=6.0) == pytest.approx(2.4, rel=0.05)
    assert model.snapshot(now=6.0)["prefill_rate_from"] == "learned"
    # A server with nothing processed yet publishes no rate: the prior stays.
    fresh_t, fresh = telemetry("llamacpp")
    fresh_t.server_load("b", ServerLoad(slots=2, running=0, waiting=0))
    assert fresh.prefill_s(600) < 0.2 and fresh.snapshot()["prefill_rate_from"] == "prior"


def test_a_published_prefill_rate_is_priced_in_routings_tokens_once_any_answer_of_the_model_says_the_ratio():
    # Routing counts a quarter of a prompt's characters; SmolLM2's tokenizer reads English system prompts
    # at ~6.5 characters a token, so 600 routing tokens are 370 of the server's. The server's published 178
    # tokens a second prefill them in 370 / 178 = 2.08 s; priced per routing token, 600 / 178 = 3.37 s.
    states = {}
    for name, served in (("b", "smollm2"), ("c", "smollm2"), ("o", "other")):
        backend = FakeBackend("llamacpp")
        backend.name, backend.config = name, BackendConfig(base_url="http://127.0.0.1:1/v1", model=served,
                                                           flavor="llamacpp")
        states[name] = BackendState(backend, 256, Breaker(BreakerConfig()), LatencyModel())
    t = Learner(states)
    for name in states:
        t.server_load(name, ServerLoad(slots=2, running=0, waiting=0, prefill_tokens_per_s=178.0))
    b, c, o = (states[n].model for n in ("b", "c", "o"))
    assert b.prefill_s(600) == pytest.approx(600 / 178.0, rel=0.01)
    a = stream_attempt(load=1, wait=0.01, flavor="llamacpp")
    a.end = a.first_event + 0.5
    a.report = BackendReport(prompt_tokens=370, prompt_processed=370, prompt_cached=0)
    t.learn(a, prompt_hint=600, output=10)
    # c has not answered yet: it serves the same model (one tokenizer) and prices its published rate
    # right too; a backend of another model does not take it.
    assert c.prefill_s(600) == pytest.approx(370 / 178.0, rel=0.01)
    assert o.prefill_s(600) == pytest.approx(600 / 178.0, rel=0.01)
    assert c.snapshot()["prompt_tokens_per_server_token"] == pytest.approx(600 / 370)
    # A later scrape's rate is converted the same way, and an answer whose estimate cannot be of the prompt
    # the server counted (an empty body beside a large tool schema) teaches nothing.
    t.server_load("c", ServerLoad(slots=2, running=0, waiting=0, prefill_tokens_per_s=200.0))
    assert c.prefill_s(600) == pytest.approx(370 / 200.0, rel=0.01)
    a.report = BackendReport(prompt_tokens=2000, prompt_processed=2000, prompt_cached=0)
    t.learn(a, prompt_hint=1, output=10)
    assert t.token_ratios["smollm2"].get() == pytest.approx(600 / 370)
