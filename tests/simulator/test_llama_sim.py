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
