"""The learned figures of a backend's latency model (app/routing/latency_model.py)."""

from __future__ import annotations

import math

import pytest

from app.routing.latency_model import Decaying, DecayingLine, LatencyModel, Prior


@pytest.mark.parametrize(("prior", "tau_s", "fed"), [(200.0, 60.0, 24.0), (0.002, 10.0, 0.001), (0.0, 10.0, 0.25)])
def test_a_figure_fed_steadily_reads_what_it_is_fed_not_a_blend_with_its_prior(prior, tau_s, fed):
    figure = Decaying(prior, tau_s)
    for t in range(1, 601):
        figure.add(fed, float(t))
    assert figure.get(600.0) == pytest.approx(fed, rel=1e-6)


def test_a_figure_left_unfed_relaxes_to_its_prior_and_a_new_sample_after_the_gap_takes_over():
    figure = Decaying(200.0, 60.0)
    for t in range(1, 61):
        figure.add(24.0, float(t))
    assert 24.0 < figure.get(90.0) < 200.0
    assert figure.get(60.0 + 3600.0) == pytest.approx(200.0, rel=1e-6)
    figure.add(30.0, 60.0 + 3600.0)
    assert figure.get(60.0 + 3600.0) == pytest.approx(30.0, rel=1e-6)


def test_answers_of_steady_length_are_predicted_at_that_length():
    model = LatencyModel(Prior(output_tokens=200.0))
    for t in range(1, 601):
        model.output_tokens.add(24.0, float(t))
    assert model.output_tokens.get(600.0) == pytest.approx(24.0, rel=1e-3)


def test_a_backends_answer_length_keeps_its_figure_while_unfed():
    """Output length is a property of the requests, not of a backend's health: a quick server that idled
    after answers of exactly 24 tokens read 40-60 (issue 24, real llama.cpp), relaxing toward the prior's
    200 as if its silence said something about answer lengths."""
    model = LatencyModel(Prior(output_tokens=200.0))
    for t in range(1, 61):
        model.observe_decode(24, 23 * 0.01, load=1, now=float(t))
    for idle_s in (0.0, 120.0, 3600.0):
        assert model.output_tokens.get(60.0 + idle_s) == pytest.approx(24.0)
        assert model.snapshot(60.0 + idle_s)["output_tokens"] == pytest.approx(24.0)


def test_answers_that_end_together_each_count_toward_a_backends_answer_length():
    """Weighed by the time since the last answer, answers ending at one instant taught nothing past the
    first; each is a sample of the requests' lengths, and the newest window of them is what counts."""
    model = LatencyModel(Prior(output_tokens=200.0))
    for _ in range(8):
        model.observe_decode(24, 23 * 0.01, load=1, now=5.0)
    assert model.output_tokens.get(5.0) == pytest.approx(24.0)
    for _ in range(8):
        model.observe_decode(48, 47 * 0.01, load=1, now=5.0)
    assert model.output_tokens.get(5.0) == pytest.approx(36.0)  # eight of each: their mean
    for _ in range(100):
        model.observe_decode(48, 47 * 0.01, load=1, now=5.0)
    assert model.output_tokens.get(5.0) == pytest.approx(48.0, rel=1e-3)


def test_an_answer_decode_figure_is_shown_as_direct_as_its_least_direct_sample():
    """A median is shown measured only while every answer in its window was timed with its batch
    measured; one estimated answer among them marks it estimated until it leaves the window."""
    model = LatencyModel(Prior(tpot_s=0.03))
    for i in range(4):
        model.observe_decode(24, 23 * 0.01, load=1, now=float(i), batch=1.0)
    model.observe_decode(24, 23 * 0.01, load=2, now=4.0, count_output=False)  # a stretch under way
    snap = model.snapshot(5.0)["answer_tpot_s"]
    assert (snap["answers"]["1"]["source"], snap["answers"]["1"]["batch_source"]) == ("measured", "measured")
    assert "2" not in snap["stretches"]  # one stretch: no figure, nothing shown
    model.observe_decode(24, 23 * 0.01, load=1, now=5.0, source="estimated")
    model.observe_decode(24, 23 * 0.01, load=1, now=5.0, source="reported", batch=1.0)
    level = model.snapshot(6.0)["answer_tpot_s"]["answers"]["1"]
    assert (level["source"], level["batch_source"], level["samples"]) == ("estimated", "estimated", 6)
    for i in range(16):
        model.observe_decode(24, 23 * 0.01, load=1, now=6.0 + i, source="reported", batch=1.0)
    level = model.snapshot(30.0)["answer_tpot_s"]["answers"]["1"]
    assert (level["source"], level["batch_source"]) == ("reported", "measured")
    for i in range(3):
        model.observe_decode(24, 23 * 0.01, load=2, now=30.0 + i, count_output=False)
    stretch = model.snapshot(33.0)["answer_tpot_s"]["stretches"]["2"]
    assert (stretch["source"], stretch["batch_source"]) == ("measured", "estimated")


def test_an_answers_decode_is_the_median_of_recent_answers_sent_in_the_same_state_not_their_mean():
    """Half the answers sent to an idle server meet a neighbour's prefill and take three times as long:
    one answer most likely takes the short time, not the mean of the two (issue 24, real llama.cpp)."""
    model = LatencyModel(Prior(tpot_s=0.03))
    for i in range(12):
        model.observe_decode(24, 23 * (0.033 if i % 3 == 2 else 0.011), load=1, now=float(i))
    for i in range(12):
        model.observe_decode(24, 23 * 0.02, load=2, now=float(i))
    assert model.answer_tpot(1, 11.0) == pytest.approx(0.011)
    assert model.answer_tpot(2, 11.0) == pytest.approx(0.02)
    # The line through all of them (a mean) is what the in-flight book prices decode with.
    assert model.tpot(1, 12.0) > 0.013


def test_a_state_with_too_few_answers_is_priced_by_the_line_and_a_figure_unfed_drifts_back_to_it():
    model = LatencyModel(Prior(tpot_s=0.03))
    model.observe_decode(24, 23 * 0.01, load=3, now=0.0)
    model.observe_decode(24, 23 * 0.01, load=3, now=0.0)
    assert model.answer_tpot(3, 0.0) == model.tpot(3, 0.0)  # two answers: no figure yet
    model.observe_decode(24, 23 * 0.01, load=3, now=0.0)
    assert model.answer_tpot(3, 0.0) == pytest.approx(0.01)
    # Past four in flight, levels are powers of two: 5-8 in flight share a figure.
    for _ in range(3):
        model.observe_decode(24, 23 * 0.05, load=6, now=0.0)
    assert model.answer_tpot(8, 0.0) == pytest.approx(0.05)
    assert model.answer_tpot(9, 0.0) == model.tpot(9, 0.0)
    later = 3600.0
    assert model.answer_tpot(3, later) == pytest.approx(model.tpot(3, later), rel=1e-6)


def test_a_request_queued_behind_a_full_server_is_priced_at_the_batch_it_will_decode_in():
    # Two slots, both busy: however many wait ahead of it, it decodes beside one other once it has a
    # slot, at the median of the answers that decoded so (one of three was slow: the line, a mean, is not).
    model = LatencyModel(Prior(slots=2, tpot_s=0.03))
    for i, per_token in enumerate((0.032, 0.1, 0.032)):
        model.observe_decode(24, 23 * per_token, load=2, now=float(i))
    assert model.tpot(2, 2.0) > 0.05
    assert model.answer_tpot(3, 2.0) == pytest.approx(0.032)
    assert model.answer_tpot(6, 2.0) == pytest.approx(0.032)


def test_a_stretch_of_an_answer_still_under_way_is_no_sample_of_a_whole_answer():
    model = LatencyModel(Prior(tpot_s=0.03))
    for i in range(5):
        model.observe_decode(9, 8 * 0.01, load=1, now=float(i), count_output=False)
    assert model.answers.snapshot(5.0)["answers"] == {}


def test_after_a_burst_a_state_no_answer_has_taught_is_priced_no_slower_than_fuller_ones_decoded():
    """A closed-loop burst keeps every slot busy and a queue behind: each stretch of decode between two
    samples may hold a neighbour's whole prefill, and the line (a mean) reads batch 1 as slow as the
    burst. What answers and stretches took at the median, with as many or more in flight, bounds it."""
    model = LatencyModel(Prior(slots=2, tpot_s=0.03))
    for i in range(16):
        # Stretches at a batch of 2 (four in flight): most 0.05 s a token, some stalled by a prefill.
        model.observe_decode(9, 8 * (0.05 if i % 3 else 0.4), load=4, now=16.0, count_output=False)
    for i in range(4):
        model.observe_decode(24, 23 * 0.2, load=4, now=16.0)  # whole answers sent with 4 in flight
    line = model.tpot(1, 16.0)
    assert line > 0.1
    assert model.answer_tpot(1, 16.0) == pytest.approx(0.05)  # the stretches' median at batch 2
    assert model.answer_tpot(4, 16.0) == pytest.approx(0.2)  # its own answers' median


def test_a_failure_after_a_silence_is_one_outcome_among_the_recent_ones_not_all_of_them():
    # A throttled llama.cpp server answered steadily, then went silent for 20 s prefilling long prompts,
    # and two of its queued requests hit the first-token timeout (issue 24, mixed lengths: read as a
    # 0.90 failure rate, the default then sent it nothing for a whole run). Two of the last 18 outcomes,
    # the latest weighing most and those before the silence a sixth less for it (stale_tau_s): ~0.2.
    m = LatencyModel()
    for k in range(16):
        m.observe_outcome(True, now=float(k))
    m.observe_outcome(False, now=36.0)
    m.observe_outcome(False, now=36.0)
    assert 0.05 < m.failure_rate.get(36.0) < 0.25


def test_a_backend_whose_outcomes_turn_to_failures_reads_as_failing_within_a_window_of_them():
    m = LatencyModel()
    for k in range(16):
        m.observe_outcome(True, now=float(k))
    for k in range(16):
        m.observe_outcome(False, now=16.0 + 0.01 * k)  # fast errors
    assert m.failure_rate.get(16.2) > 0.6
    fresh = LatencyModel()
    fresh.observe_outcome(False, now=0.0)
    assert fresh.failure_rate.get(0.0) == 1.0  # nothing else known of it: its one outcome failed


def test_a_backend_failing_every_request_reads_so_however_far_apart_its_requests_come():
    # The failure share is over outcomes: a slow backend sent a request every 10-30 s that fails each
    # one is failing all of them, not a third of them; one failing every other request, half.
    for gap in (1.0, 10.0, 30.0):
        every, half = LatencyModel(), LatencyModel()
        for k in range(40):
            every.observe_outcome(False, now=gap * k)
            half.observe_outcome(k % 2 == 1, now=gap * k)
        last = gap * 39
        assert every.failure_rate.get(last) == pytest.approx(1.0), gap
        assert 0.4 < half.failure_rate.get(last) < 0.6, gap


def test_an_answers_stall_is_learned_by_how_busy_its_server_was_when_it_was_sent_zeros_included():
    # A llama.cpp server stops its decodes for a newcomer's prefill. Of eight answers sent to an idle
    # server, five met one (0.46 s each); the stall-free decode is what the batch teaches, and the stall
    # is the median of like answers, those that met none counted as none.
    model = LatencyModel(Prior(slots=2, tpot_s=0.03))
    stalls = (0.46, 0.46, 0.0, 0.46, 0.0, 0.46, 0.0, 0.46)
    for i, stalled in enumerate(stalls):
        assert model.answers.stall(1, float(i)) == 0.0  # fewer than eight like answers: no figure
        model.observe_decode(24, 23 * 0.02 + stalled, load=1, now=float(i), stalled_s=stalled, batch=2)
    assert model.answers.stall(1, 7.0) == pytest.approx(0.02)  # 0.46 s over 23 tokens
    assert model.answer_tpot(1, 7.0) == pytest.approx(0.02)  # the decode itself stays stall-free
    assert model.answers.stall(2, 7.0) == 0.0  # sent with another in flight: nothing learned yet
    # Unfed, the stall fades to none.
    assert model.answers.stall(1, 7.0 + 10 * model.answers.stale_tau_s) < 1e-5
    for i in range(3):
        model.observe_decode(24, 23 * 0.02, load=1, now=8.0 + i, stalled_s=0.0, batch=1)
    assert model.answers.stall(1, 10.0) == 0.0  # most like answers now met no prefill: the median is none


def test_a_few_stalled_answers_do_not_price_every_like_answer_as_stalled():
    # Mixed lengths: a short answer either stands still for a long prompt's whole prefill (seconds) or
    # for nothing. Two of the first three like answers stalled; the next is not priced as stalled.
    model = LatencyModel(Prior(slots=2, tpot_s=0.03))
    for i, stalled in enumerate((3.0, 0.0, 4.4)):
        model.observe_decode(24, 23 * 0.012 + stalled, load=1, now=float(i), stalled_s=stalled, batch=1)
    assert model.answers.stall(1, 3.0) == 0.0


def test_an_answer_whose_stall_was_not_measured_teaches_no_stall():
    # An answer not streamed upstream shows no first token, so the prefills it stood still for are not
    # known: it is no sample of "none" (counted so, answers of both kinds on one server read half the stall).
    model = LatencyModel(Prior(slots=2, tpot_s=0.03))
    for i in range(8):
        model.observe_decode(24, 23 * 0.02 + 0.46, load=1, now=float(i), stalled_s=0.46, batch=1)
    for i in range(8):
        model.observe_decode(24, 23 * 0.04, load=1, now=7.0)
    assert model.answers.stall(1, 7.0) == pytest.approx(0.02)


def test_the_stall_every_predicted_end_adds_is_shown_with_what_it_rests_on():
    # /admin/backends shows the figures predictions read: the stall medians beside the decode ones, none
    # before eight like answers, each with its samples, age and source (timed by the gateway).
    model = LatencyModel(Prior(slots=2, tpot_s=0.03))
    for i in range(8):
        assert "1" not in model.snapshot(float(i))["answer_stall_s"]
        model.observe_decode(24, 23 * 0.02 + 0.46, load=1, now=float(i), stalled_s=0.46, batch=2)
    level = model.snapshot(9.0)["answer_stall_s"]["1"]
    assert level == {"stall_s": pytest.approx(0.02), "samples": 8, "age_s": 2.0, "source": "measured"}
    assert model.snapshot(9.0)["answer_stall_s"].keys() == {"1"}  # sent with more in flight: nothing yet


def taught_by_prompt_size(model: LatencyModel, pairs, batch: float = 1.0, rounds: int = 8) -> None:
    """Whole answers of 24 tokens, each (prompt tokens, seconds a token) of `pairs` in turn, `rounds` times."""
    for i in range(rounds):
        for context, per_token in pairs:
            model.observe_decode(24, 23 * per_token, load=batch, now=float(i), batch=batch, context=context)


def test_an_answer_to_a_longer_prompt_is_priced_at_the_slower_decode_like_answers_showed():
    """A llama.cpp decode step reads the whole context: on real servers (issue 24, mixed lengths) answers
    to ~100-token prompts decoded at ~14 ms a token alone, to ~1,000-token ones at ~21 ms, and one median
    for the two over-priced the short ones by half."""
    model = LatencyModel(Prior(slots=2, tpot_s=0.03))
    taught_by_prompt_size(model, [(100.0, 0.014), (1000.0, 0.021)])
    short, long = model.answer_tpot(1, 7.0, context=100.0), model.answer_tpot(1, 7.0, context=1000.0)
    assert short == pytest.approx(0.014, rel=0.1)
    assert long == pytest.approx(0.021, rel=0.1)
    # Without a prompt size, the level's median as before.
    assert model.answer_tpot(1, 7.0) == pytest.approx(0.0175)


def test_like_prompts_teach_no_slope_however_their_decodes_scatter():
    # Prompts within a few tokens of each other say nothing of how context slows a decode: a prompt far
    # longer than any seen is priced at the median, not at a slope fitted to noise.
    model = LatencyModel(Prior(slots=2, tpot_s=0.03))
    taught_by_prompt_size(model, [(58.0, 0.010), (62.0, 0.016), (60.0, 0.013)])
    assert model.answers.context_slope < 1e-6
    assert model.answer_tpot(1, 7.0, context=2000.0) == pytest.approx(0.013, rel=0.1)


def test_a_slope_is_learned_within_a_batch_not_from_long_prompts_decoding_beside_others():
    # Long prompts' answers all decoded two at a time, short ones alone: the difference is the batch's,
    # and a long prompt decoding alone is priced at what answers decoding alone took.
    model = LatencyModel(Prior(slots=2, tpot_s=0.03))
    taught_by_prompt_size(model, [(100.0, 0.014)], batch=1.0)
    taught_by_prompt_size(model, [(1000.0, 0.030)], batch=2.0)
    assert model.answers.context_slope == 0.0
    assert model.answer_tpot(1, 7.0, context=1000.0) == pytest.approx(0.014)


def test_a_longer_prompt_never_decodes_faster_and_a_slope_moves_a_median_at_most_twofold():
    model = LatencyModel(Prior(slots=2, tpot_s=0.03))
    taught_by_prompt_size(model, [(100.0, 0.021), (1000.0, 0.014)])  # noise that reads a negative slope
    assert model.answers.context_slope == 0.0
    model = LatencyModel(Prior(slots=2, tpot_s=0.03))
    taught_by_prompt_size(model, [(100.0, 0.014), (1000.0, 0.021)])
    median = model.answer_tpot(1, 7.0)
    assert model.answer_tpot(1, 7.0, context=100_000.0) == pytest.approx(2 * median)
    assert model.answer_tpot(1, 7.0, context=0.0) >= median / 2


def test_a_level_no_answer_has_taught_reads_the_fuller_levels_medians_at_the_prompts_size():
    # After a burst that taught only answers decoding two at a time, a short prompt sent alone is priced
    # no slower than a short prompt's answer at that batch, not at the level's median of both sizes.
    model = LatencyModel(Prior(slots=2, tpot_s=0.03))
    taught_by_prompt_size(model, [(100.0, 0.028), (1000.0, 0.036)], batch=2.0)
    short = model.answer_tpot(1, 7.0, context=100.0)
    assert short == pytest.approx(0.028, rel=0.1)
    assert model.answer_tpot(1, 7.0, context=1000.0) > short


def test_the_slope_of_decode_on_prompt_size_is_shown():
    model = LatencyModel(Prior(slots=2, tpot_s=0.03))
    assert model.snapshot(0.0)["answer_tpot_per_prompt_token_s"] == 0.0
    taught_by_prompt_size(model, [(100.0, 0.014), (1000.0, 0.021)])
    assert model.snapshot(8.0)["answer_tpot_per_prompt_token_s"] == pytest.approx(0.007 / 900, rel=0.2)


def test_the_slope_is_the_within_level_least_squares_fit_of_the_last_answers_however_many_came_before():
    # Learning runs at every answer, so the fit is kept as running sums: after thousands of answers
    # they still give the fit computed afresh over the window.
    import random
    from collections import defaultdict

    from app.routing.latency_model import CONTEXT_RIDGE_TOKENS, CONTEXT_WINDOW

    rng = random.Random(7)
    model = LatencyModel(Prior(slots=4, tpot_s=0.03))
    seen = []
    for i in range(5000):
        batch, context = rng.choice((1, 2, 3)), rng.uniform(20.0, 4000.0)
        per_token = 0.01 * batch + 8e-6 * context + rng.uniform(0.0, 0.004)
        model.observe_decode(24, 23 * per_token, load=batch, now=i * 0.01, batch=batch, context=context)
        seen.append((batch, context, per_token))
    by_level = defaultdict(list)
    for batch, x, y in seen[-CONTEXT_WINDOW:]:
        by_level[batch].append((x, y))
    sxy = sxx = 0.0
    for points in by_level.values():
        mx, my = sum(x for x, _ in points) / len(points), sum(y for _, y in points) / len(points)
        sxy += sum((x - mx) * (y - my) for x, y in points)
        sxx += sum((x - mx) ** 2 for x, _ in points)
    fit = sxy / (sxx + CONTEXT_WINDOW * CONTEXT_RIDGE_TOKENS**2)
    assert model.answers.context_slope == pytest.approx(fit, rel=1e-9)
    assert model.answers.context_slope == pytest.approx(8e-6, rel=0.25)


def test_an_unfed_median_drifts_to_the_line_only_as_far_as_fuller_batches_decoded():
    """After bursts on mixed lengths the line (a mean, stalls included) read 0.58-2.0 s a token at batch
    1 on a real llama.cpp server whose answers took 0.04-0.1 (issue 24): a batch-1 median a minute old,
    drifting toward it, priced an idle answer at 5.8 s for 1.2. Fewer requests do not decode slower than
    answers in a larger batch took, so that bounds the drift as it bounds a level no answer taught."""
    model = LatencyModel(Prior(slots=2, tpot_s=0.03))
    for i in range(4):
        model.observe_decode(24, 23 * 0.04, load=1, now=float(i), batch=1.0)
    for i in range(16):
        model.observe_decode(24, 23 * 0.1, load=2, now=60.0, batch=2.0)  # answers beside another
        model.observe_decode(9, 8 * 2.0, load=2, now=60.0, count_output=False)  # stretches, stalls in them
    later = 120.0
    assert model.tpot(1, later) > 0.5
    # Unfed since 3 s, the batch-1 median has drifted most of the way: to the batch-2 answers' 0.1.
    assert model.answer_tpot(1, later) == pytest.approx(0.04 + (0.1 - 0.04) * (1 - math.exp(-(later - 3.0) / 120.0)))


def test_the_medians_and_ceilings_kept_as_answers_come_are_those_of_the_windows_as_they_are_now():
    # Learning runs at every answer and progress stretch and every prediction reads the figures, so they
    # are kept as samples come, not worked out at each read: after every sample each level's median is
    # still the median of its last `window` samples, its median prompt that of the answers it rests on,
    # and its ceiling the lowest median of answers in a larger batch or stretches in one at least as large.
    import random
    import statistics
    from collections import defaultdict, deque

    from app.routing.latency_model import ANSWER_MIN_SAMPLES, AnswerDecode

    rng = random.Random(11)
    decode = AnswerDecode()
    answers, stretches, prompts = defaultdict(deque), defaultdict(deque), defaultdict(deque)
    moved = 0
    for i in range(3000):
        now, batch = float(i), rng.choice((1, 2, 3, 4, 8))
        per_token = rng.choice((0.01, 0.02, 0.03, 0.05)) * (1 + 0.1 * batch)  # few values: ties in every window
        if rng.random() < 0.6:
            decode.add_stretch(batch, per_token, now)
            stretches[batch].append(per_token)
        else:
            context = None if rng.random() < 0.2 else rng.choice((100, 400.0, 1600))
            per_token += 2e-5 * (context or 0)  # a longer prompt decodes slower: a slope is learned
            decode.add(batch, per_token, now, context=context)
            answers[batch].append(per_token)
            prompts[batch].append(context)
        for kept in (answers, stretches, prompts):
            for window in kept.values():
                while len(window) > decode.window:
                    window.popleft()
        snapshot = decode.snapshot(now)
        medians = {k: statistics.median(w) for k, w in answers.items() if len(w) >= ANSWER_MIN_SAMPLES}
        fuller = {k: statistics.median(w) for k, w in stretches.items() if len(w) >= ANSWER_MIN_SAMPLES}
        assert {int(k): v["tpot_s"] for k, v in snapshot["answers"].items()} == pytest.approx(medians, rel=1e-12)
        assert {int(k): v["tpot_s"] for k, v in snapshot["stretches"].items()} == pytest.approx(fuller, rel=1e-12)
        for level in medians:
            bounds = [m for k, m in medians.items() if k > level] + [m for k, m in fuller.items() if k >= level]
            assert decode.ceiling(level) == (min(bounds) if bounds else None)
            known = [c for c in prompts[level] if c is not None]
            slope = decode.context_slope
            if known and slope:
                # Moved to the median prompt itself, a median stays put (each token more would move it).
                assert decode.at_context(level, slope, statistics.median(known)) == slope
                moved += 1
    assert moved > 1000


def _prefill_samples(line: DecayingLine) -> float:
    """Feed a real llama.cpp server's prefill samples (issue 24, eight shared prompts on two servers): two
    cold prompts prefilled together first, then cached prompts of ~25 uncached tokens and cold ones of
    ~590, half a second apart; returns the time after the last."""
    t = 0.0
    for x, y in [(1184, 5.04), (1185, 5.04), (25, 0.18), (590, 2.42), (27, 0.19), (24, 0.17), (600, 2.45),
                 (26, 0.18), (25, 0.185), (30, 0.19), (580, 2.40), (28, 0.18)]:
        line.add(x, y, t)
        t += 0.5
    return t


def test_the_prefill_line_is_fitted_to_relative_errors_so_a_cached_prompts_small_prefill_is_priced_right():
    relative = LatencyModel().prefill
    assert relative.relative
    now = _prefill_samples(relative)
    assert relative.at(25, now) == pytest.approx(0.18, rel=0.05)
    assert relative.at(590, now) == pytest.approx(2.42, rel=0.05)
    # Fitted to absolute errors, the large samples set the line and the small ones read 13 % low.
    absolute = DecayingLine(0.0, relative.prior_slope, ridge=0.0, anchor=relative.anchor, window=relative.window)
    now = _prefill_samples(absolute)
    assert absolute.at(25, now) < 0.16
    assert absolute.at(590, now) == pytest.approx(2.42, rel=0.05)


def test_a_relative_line_weighs_its_first_samples_by_their_own_size_not_by_the_priors_line():
    # The prior's rate is a GPU's (5,000 tokens/s): weighed by what that line predicts, a first sample
    # prefilled beside another prompt (1.3 s for 270 tokens, about 0.87 s alone) was predicted 54 ms and
    # outweighed every later one (0.03 s + 3.1 ms a token) for the rest of its life.
    line = LatencyModel().prefill
    t = 0.0
    for x, y in [(270, 1.3)] + [(600, 1.89), (120, 0.40), (700, 2.20), (160, 0.53)] * 3:
        line.add(x, y, t)
        t += 0.5
    assert line.at(600, t) == pytest.approx(1.89, rel=0.05)
    assert line.at(120, t) == pytest.approx(0.40, rel=0.05)


def test_a_wait_within_the_noise_is_the_servers_admission_and_is_learned_as_measured():
    # Real llama.cpp with nothing queued: 12-21 ms from sending to the headers (reading the request,
    # tokenizing, taking a slot), which every request pays. Learned as none, every TTFT read that low.
    m = LatencyModel()
    for t in range(20):
        m.observe_queue(0.015, ahead=0, now=float(t))
    assert m.residual_queue(20.0) == pytest.approx(0.015, rel=0.05)
    # With requests of ours ahead and a slot free, the same: admission, not a full backend.
    m = LatencyModel()
    for t in range(20):
        m.observe_queue(0.015, ahead=1, now=float(t))
    assert m.slots is None and m.residual_queue(20.0) == pytest.approx(0.015, rel=0.05)
