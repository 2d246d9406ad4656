"""bench/llama_sim.py: the real router in front of llama.cpp-like servers on a virtual clock."""

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


def test_burst_errors_are_signed_and_absolute_medians():
    from bench.llama_sim import _errors

    # (TTFT, E2E, predicted TTFT, predicted E2E, sent, burst)
    rows = [(1.0, 2.0, 1.1, 3.0, 0.0, 0.0), (1.0, 2.0, 0.9, 1.0, 1.0, 0.0), (1.0, 2.0, 1.0, 2.4, 2.0, 0.0)]
    assert _errors(rows) == "TTFT +0% / 10%, E2E +20% / 50%"
    assert _errors([]) == "TTFT n/a, E2E n/a"


def test_with_a_context_cost_an_answer_to_a_long_prompt_decodes_slower_than_one_to_a_short_prompt():
    """--context: each decoding slot's step reads its context, as a llama.cpp decode step does (issue 24:
    ~13 against ~20 ms a token for ~60- and ~900-token prompts on the real quick server)."""
    # Far apart (0.05 req/s): every answer decodes alone, so only its own context sets its pace.
    plain = run("round_robin", 1, 30, 0.05, 0, 2, 1.0, True, 2)
    costly = run("round_robin", 1, 30, 0.05, 0, 2, 1.0, True, 2, context=0.6)
    decode = lambda done: sorted(e - t for t, e in done)
    alone = (OUTPUT - 1) * TPOT_S
    assert all(abs(d - alone) < 1e-6 for d in decode(plain))  # without it, every answer decodes alike
    fast, slow = decode(costly)[0], decode(costly)[-1]
    assert fast > alone + 1e-3  # even a short prompt's context costs something
    assert slow > 1.25 * fast  # the mix's long prompts (~10x the short ones) decode much slower


def test_per_slot_a_prompt_lives_in_the_slot_that_ran_it():
    # One shared prompt, two servers of two slots: once it ran in a slot, a request taking that slot is
    # warm; one taking the other slot (its copy busy, or another server) computes it again. Nothing is
    # warm before its first run, and runs repeat exactly.
    done = run("round_robin", 3, 60, 0.65, 1, 2, 1.0, False, 2, per_slot=True)
    ttft = sorted(t for t, _ in done)
    assert ttft[30] < 0.5 and ttft[-1] > 1.6  # most warm; the first run of each slot cold
    assert done == run("round_robin", 3, 60, 0.65, 1, 2, 1.0, False, 2, per_slot=True)
    # Four prompts round-robined over four slots: some request always finds its prompt pushed out.
    four = [t for t, _ in run("round_robin", 3, 60, 0.65, 4, 2, 1.0, False, 2, per_slot=True)]
    assert sum(t > 1.6 for t in four) > sum(t > 1.6 for t in ttft)


def test_with_a_host_cache_a_prompt_pushed_out_of_its_slot_comes_back_warm():
    # llama.cpp's default --cache-ram: a prompt a slot gives up is kept in host memory and moved back into
    # the slot that next takes it. Four prompts round-robined over two servers' four slots: without it some
    # request always finds its prompt pushed out; with it each server computes a prompt again only while
    # its one copy is in a running request's slot.
    cold = lambda done: sum(t > 1.6 for t, _ in done)
    without = run("round_robin", 3, 60, 0.65, 4, 2, 1.0, False, 2, per_slot=True)
    kept = run("round_robin", 3, 60, 0.65, 4, 2, 1.0, False, 2, per_slot=True, host_cache=True)
    assert cold(kept) < cold(without)
    assert cold(kept) >= 4  # each prompt is cold at least once
    assert kept == run("round_robin", 3, 60, 0.65, 4, 2, 1.0, False, 2, per_slot=True, host_cache=True)


def test_closed_loop_clients_start_together_and_send_again_only_after_their_answer():
    # bench/prefix_routing.py's --clients: six clients send at once (a burst before any server is timed),
    # then each its next request a think time after its answer, 22 requests in all, every one counted.
    done = run("latency_aware", 5, 22, 0.52, 4, 2, 1.0, False, 2, detail=True, per_slot=True, host_cache=True,
               closed=6, think=6 / 0.52)
    assert len(done) == 22 and not any(x[5] for x in done)
    start = min(x[4] for x in done)
    assert sum(x[4] == start for x in done) == 6
    # Never more than six in flight: at each send, at most five others were sent and not yet answered.
    spans = [(x[4], x[4] + x[1]) for x in done]
    assert all(sum(s <= t < e for s, e in spans) <= 6 for t, _ in spans)
    assert all(0.0 <= x[6] <= 1.0 for x in done)  # the share of each prompt reused
