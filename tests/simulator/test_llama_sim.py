"""bench/llama_sim.py: the real router in front of llama.cpp-like servers on a virtual clock."""

import pytest

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


def test_after_a_burst_every_strategy_meets_the_same_arrivals_and_prompts():
    """A burst runs as long as each strategy's answers take: its prompts come from a generator of their own,
    so the arrivals after it (their gaps and prompts) are the same for every strategy, as --burst's
    per-seed comparisons assume."""

    def arrivals(strategy: str) -> list[tuple[float, float]]:
        done = run(strategy, 4, 12, 0.33, 0, 2, 2.5, True, 2, burst_s=6.0, detail=True, spread=True)
        rows = sorted((x for x in done if not x[5]), key=lambda x: x[4])
        return [(round(x[4] - rows[0][4], 9), x[7]) for x in rows]

    quick_first, balanced = arrivals("latency_aware"), arrivals("least_inflight")
    assert len(quick_first) == 12
    assert quick_first == balanced


def test_spread_lengths_are_the_real_mixed_benchs_two_classes_and_answers_take_output_tokens():
    done = run("round_robin", 2, 60, 0.2, 0, 2, 1.0, True, 2, detail=True, spread=True, output=24)
    tokens = sorted(x[7] for x in done)
    short, long_ = [t for t in tokens if t < 400], [t for t in tokens if t >= 400]
    assert 15 <= len(short) <= 45 and len(short) + len(long_) == 60  # about half each
    # 20-80 words against 200-800 (plus an 8-word question and the template): the classes far apart.
    assert max(short) * 2 < min(long_) and max(long_) > 3 * min(long_)
    # Far apart (0.2 req/s on two servers), most answers decode alone: 23 tokens after the first.
    decode = sorted(x[1] - x[0] for x in done)
    assert abs(decode[0] - 23 * TPOT_S) < 1e-6


def test_a_replayed_run_keeps_its_arrival_gaps_and_prompt_lengths():
    replay = [(0.5, 40), (0.7, 600), (3.0, 30), (9.5, 300)]
    done = run("least_inflight", 1, 99, 0.33, 0, 2, 2.5, True, 2, detail=True, replay=replay)
    rows = sorted(done, key=lambda x: x[4])
    assert len(rows) == 4  # the replay's arrivals, not --requests
    assert [round(x[4] - rows[0][4], 9) for x in rows] == [0.0, 0.2, 2.5, 9.0]
    tokens = [x[7] for x in rows]
    assert tokens[2] < tokens[0] < tokens[3] < tokens[1]  # in the order of their words


def test_per_run_ratios_read_each_seed_as_one_run_against_least_inflight(capsys):
    from bench.llama_sim import _per_run

    # (TTFT, E2E, predicted TTFT, predicted E2E, sent, burst, reused, prompt tokens, server)
    def seed(ttfts: list[float]) -> list[tuple[float, ...]]:
        return [(t, 2 * t, t, 2 * t, float(i), 0.0, 0.0, 100.0 if i % 2 else 1000.0, 0.0) for i, t in enumerate(ttfts)]

    base = [seed([1.0, 1.0, 1.0, 1.0]), seed([1.0, 1.0, 1.0, 1.0])]
    mine = [seed([0.5, 0.5, 0.5, 0.5]), seed([3.0, 3.0, 3.0, 3.0])]  # wins one seed 2x, loses the other 3x
    _per_run({"latency_aware": mine, "least_inflight": base}, mixed=True)
    out = capsys.readouterr().out
    assert "TTFT p50 1.75x [50%]" in out  # the median of 0.5x and 3.0x; one seed of two lost
    assert "short E2E p50 1.75x [50%]" in out and "long E2E p50 1.75x [50%]" in out


def test_a_replay_is_open_loop_and_refuses_closed_loop_clients():
    # Its arrival times are the schedule: closed-loop clients sending again after their answers would ask
    # for prompts past the replay's last (they ran into its end).
    replay = [(0.5, 40), (0.7, 600), (3.0, 30)]
    with pytest.raises(ValueError, match="replay"):
        run("least_inflight", 1, 99, 0.33, 0, 2, 2.5, True, 2, detail=True, replay=replay, closed=2)


def test_per_run_without_least_inflight_to_read_against_is_refused(monkeypatch, capsys):
    from bench.llama_sim import main

    monkeypatch.setattr("sys.argv", ["llama_sim.py", "--per-run", "--oracle", "--strategies", "latency_aware"])
    with pytest.raises(SystemExit):
        main()
    assert "add least_inflight to --strategies" in capsys.readouterr().err


def test_per_run_ratios_read_a_class_the_first_seed_lacks(capsys):
    from bench.llama_sim import _per_run

    def seed(tokens: list[float]) -> list[tuple[float, ...]]:
        return [(1.0, 2.0, 1.0, 2.0, float(i), 0.0, 0.0, t, 0.0) for i, t in enumerate(tokens)]

    # With ~10 requests a run, a seed can draw only long prompts: the short class is every other seed's.
    runs = [seed([1000.0, 1000.0, 1000.0]), seed([100.0, 100.0, 1000.0, 1000.0])]
    _per_run({"latency_aware": runs, "least_inflight": runs}, mixed=True)
    out = capsys.readouterr().out
    assert "short E2E p50 1.00x [0%]" in out and "long E2E p50 1.00x [0%]" in out


def test_each_row_names_the_server_its_request_ran_on_while_both_are_busy():
    # Round robin alternates the servers in the order requests are sent; at 2 req/s both servers are busy
    # together, so answers end on one server between the other's events. The row's server is the one that
    # ran it (the by-class quick share reads it), not the server of whatever event came last.
    done = run("round_robin", 1, 40, 2.0, 0, 2, 1.0, False, 2, detail=True)
    servers = [int(x[8]) for x in sorted(done, key=lambda x: x[4])]
    assert servers == [servers[0], 1 - servers[0]] * 20


@pytest.mark.parametrize("context", [0.0, 0.6])
def test_the_oracle_times_a_placement_as_the_simulator_ran_it(context):
    from bench.llama_sim import _placed

    # The real mixed bench's shape: each strategy's own placement, replayed on the oracle's servers, gives
    # every request the times the simulator gave it (so the oracle's least p99 is among placements timed alike).
    for strategy in ("latency_aware", "least_inflight"):
        rows = sorted(run(strategy, 3, 10, 0.33, 0, 2, 2.5, True, 2, burst_s=6.0, detail=True, spread=True, output=24,
                          context=context), key=lambda x: x[4])
        rows = [x for x in rows if not x[5]]
        arrivals = [(x[4] - rows[0][4], x[7]) for x in rows]
        ttft, e2e = _placed(arrivals, tuple(int(x[8]) for x in rows), 2.5, 2, 24, context)
        assert ttft == pytest.approx([x[0] for x in rows], abs=1e-9)
        assert e2e == pytest.approx([x[1] for x in rows], abs=1e-9)


def test_the_oracle_waits_a_prompt_arriving_during_a_prefill_for_it_and_stalls_the_answer_beside_it():
    from bench.llama_sim import PER_TOKEN_S, TEMPLATE_SHARE, _placed

    prefill = (1200 - round(1200 * TEMPLATE_SHARE)) * PER_TOKEN_S
    apart = _placed([(0.0, 1200), (0.1, 1200)], (0, 1), 1.0, 2, 24)
    assert apart[0] == pytest.approx([prefill, prefill])
    together = _placed([(0.0, 1200), (0.1, 1200)], (0, 0), 1.0, 2, 24)
    # The second waits for the first's prefill (a step is not cut short); its own prefill's step carries one
    # token of the first answer, which stands still for it.
    assert together[0] == pytest.approx([prefill, 2 * prefill + TPOT_S - 0.1])
    assert together[1][0] > prefill + 23 * TPOT_S + prefill


def test_the_oracle_says_whether_any_placement_meets_the_aims_on_a_seed(capsys):
    from bench.llama_sim import _oracle, _placed

    def rows(arrivals: list[tuple[float, int]], placement: tuple[int, ...], slow: float) -> list[tuple[float, ...]]:
        ttft, e2e = _placed(arrivals, placement, slow, 2, 24)
        return [(t, e, t, e, a, 0.0, 0.0, float(n), float(k)) for (a, n), t, e, k in zip(arrivals, ttft, e2e, placement)]

    # Two long prompts far apart, the second sent by least_inflight to a server 3x slower: on the quick one
    # it would take a third of the time, which meets both aims. One long prompt alone on the quick server:
    # no placement does better than where it went.
    spread = [(0.0, 1200), (30.0, 1200)]
    _oracle({"least_inflight": [rows(spread, (0, 1), 3.0)], "latency_aware": [rows(spread, (0, 0), 3.0)]}, 3.0, 2, 24, 0.0)
    out = capsys.readouterr().out
    assert "reachable on 100% of seeds" in out and "meets both on 100% of seeds (1 of the 1 reachable)" in out
    alone = [(0.0, 1200)]
    _oracle({"least_inflight": [rows(alone, (0,), 3.0)], "latency_aware": [rows(alone, (1,), 3.0)]}, 3.0, 2, 24, 0.0)
    out = capsys.readouterr().out
    assert "reachable on 0% of seeds" in out and "meets both on 0% of seeds (0 of the 0 reachable)" in out
    assert "median 3.00x TTFT" in out  # latency_aware's p99 over the least reachable: the slow server's 3x
    # Both seeds at once: the median of 1x and 3x is 2x, and their p90 the larger (it read the smaller, 1x).
    _oracle({"least_inflight": [rows(spread, (0, 1), 3.0), rows(alone, (0,), 3.0)],
             "latency_aware": [rows(spread, (0, 0), 3.0), rows(alone, (1,), 3.0)]}, 3.0, 2, 24, 0.0)
    out = capsys.readouterr().out
    assert "median 2.00x TTFT (p90 3.00x)" in out


def test_published_slots_are_known_before_the_first_request_as_llama_cpps_props_gives_them():
    from app.routing.router import Router

    seen = []
    real = Router.decide

    def decide(self, *a, **kw):
        seen.append(sorted((s.model.slots, s.model.slots_source) for s in self.states.values()))
        return real(self, *a, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Router, "decide", decide)
        run("least_inflight", 0, 3, 1.0, 0, 2, 1.0, False, 2, published=True)
        assert seen[0] == [(2, "reported"), (2, "reported")]
        seen.clear()
        run("least_inflight", 0, 3, 1.0, 0, 2, 1.0, False, 2)
        assert all(source != "reported" for _, source in seen[0])
