"""A per-backend latency model, learned online from every request (DESIGN.md section 2).

    TTFT = net + queue + prefill_overhead + prompt_tokens / prefill_rate
    E2E  = TTFT + (output_tokens - 1) * (TPOT(batch) + stall(requests in flight))

Each figure is an exponentially weighted average whose weight decays with time (w = exp(-dt/tau)), so
a backend not heard from for a while drifts back to its prior instead of keeping a stale figure.
TPOT is kept as a line in the backend's batch: TPOT(batch) = tpot_base * (1 + growth * (batch - 1)).

Queueing is modelled from the backend's slots: the model learns how many requests the backend runs at
once (a wait seen with k requests ahead means it has at most k; none means more than k), and the
router's in-flight book says when the requests ahead will finish (app/routing/predict.py). What that
does not explain (other clients of the backend) is kept as a residual queue.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from app.record import ESTIMATED, MEASURED, REPORTED

# A measured queue wait below this is indistinguishable from none (timer and scheduling noise).
QUEUE_NOISE_S = 0.025
# The residual waits a prediction reads as typical (LatencyModel.typical_residual_queue): the median of
# the last this many within this many seconds, once there are at least so many.
TYPICAL_WAITS = 9
TYPICAL_WAITS_S = 30.0
TYPICAL_WAITS_MIN = 3
# TPOT against the batch: samples fade over this many seconds, and the prior slope counts as this much
# spread of batch sizes (in requests squared) until the batch has varied more than that.
DECODE_TAU_S = 30.0
DECODE_RIDGE = 4.0
MIN_TPOT_S = 1e-5
# The most samples' weight a fitted line carries (older ones fade by count past it, as well as by
# time): enough for a stable fit of two coefficients, few enough that a burst's samples are outnumbered
# within about that many requests after it.
LINE_WINDOW = 16.0
# A whole answer's decode per token, per batch it decoded in: the recent answers whose median is taken,
# and the fewest that make a figure.
ANSWER_WINDOW = 16
ANSWER_MIN_SAMPLES = 3
# The stall per token those answers stood still for neighbours' prefills is either none or a whole
# prefill (seconds, beside a decode of a few tenths, on mixed lengths): of a few answers, one or two
# stalled ones made the median, and every like answer after was priced as stalled (issue 24, mixed
# lengths on real llama.cpp: a short answer predicted 2.5 s for 0.6). Only over this many like answers
# does the median say whether most stall.
STALL_MIN_SAMPLES = 8
# An answer's decode per token against the tokens of its prompt (its context): a slope fitted over the
# last this many whole answers, within their levels; prompts that vary by less than CONTEXT_RIDGE_TOKENS
# (their spread, per answer) count as no evidence of one, so on traffic of like prompts it stays ~0. A
# figure it moves stays within CONTEXT_FACTOR of its level's median either way: a slope from a few answers
# never prices a decode at many times what like answers took.
CONTEXT_WINDOW = 32
CONTEXT_RIDGE_TOKENS = 100.0
CONTEXT_FACTOR = 2.0
# What a level's median bounds (AnswerDecode._fold): the ceilings of the levels below (ANSWERS; and its
# own, STRETCHES), or none (the stalls).
NOTHING, ANSWERS, STRETCHES = 0, 1, 2
# A backend's mean answer length is over its last this many answers, whatever the time between them.
OUTPUT_WINDOW = 16
# A backend's failure share is over its last this many outcomes (answers and failures), not its last
# seconds: each outcome moves it 1/OUTCOME_WINDOW of the way.
OUTCOME_WINDOW = 16
# A relative line's weights (DecayingLine.relative) treat a sample below this as this long: timer noise
# on a near-instant sample must not outweigh every other.
RELATIVE_FLOOR_S = 0.005
# Samples' worth of "an empty prompt takes no time" in the prefill line: enough to decide the split
# between fixed part and rate when prompt lengths hardly vary, too little to outweigh a workload that
# shows a real fixed part.
PREFILL_ANCHOR = 0.25


@dataclass
class Prior:
    """What is assumed of a backend before (and long after) it is measured."""

    net_s: float = 0.002
    queue_s: float = 0.0
    prefill_tokens_per_s: float = 5000.0
    tpot_s: float = 0.03
    tpot_growth: float = 0.03
    output_tokens: float = 200.0
    slots: int | None = None  # requests the backend runs at once; None: not known until it queues one


@dataclass
class Decaying:
    """An EWMA over time that relaxes toward `prior` with time constant `stale_tau_s` when unfed."""

    prior: float
    tau_s: float = 10.0
    stale_tau_s: float = 120.0
    value: float = field(init=False)
    updated: float = field(init=False, default=0.0)
    samples: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.value = self.prior

    def get(self, now: float) -> float:
        if not self.samples:
            return self.prior
        # Read at an instant before its last sample (a snapshot asked for an earlier time), it has not
        # drifted: a negative age made exp() overflow once the clock read far past it (a host up a day).
        drift = 1.0 - math.exp(-max(0.0, now - self.updated) / self.stale_tau_s)
        return self.value + (self.prior - self.value) * drift

    def add(self, sample: float, now: float, peak: bool = False) -> None:
        """Fold in a sample; with `peak`, a sample above the estimate replaces it at once (peak-EWMA).

        The sample is blended with the last fed value, not with the read that has relaxed toward the
        prior: the relaxation is for a figure no one feeds. Blended with it, every sample pulled the
        figure part of the way back to the prior, so a steadily fed figure settled between the prior and
        the truth (output tokens fed 24 a second read 83 against the prior's 200; network time fed 1 ms
        read 1.08 ms): the longer the sample's time constant against the relaxation's, the worse. A
        figure unfed for long gets a weight near zero from the gap itself (w below)."""
        if peak and sample > self.get(now) or not self.samples:
            self.value = sample
        else:
            w = math.exp(-(now - self.updated) / self.tau_s)
            self.value = self.value * w + sample * (1.0 - w) if self.updated else sample
        self.updated = now
        self.samples += 1


@dataclass
class OutcomeShare(Decaying):
    """The share of a backend's recent outcomes that failed (0..1): a mean of its outcomes, answers and
    failures, each weighed (1 - 1/`window`) less for every outcome after it, so about its last `window`
    count; unfed, it relaxes toward `prior` with `stale_tau_s` like `Decaying` (whose reads it shares, so
    the inline read in app/routing/predict.py holds), and the outcomes before a silence weigh that much
    less against the ones after it (a backend shunned for its failures and tried again minutes later is
    judged on the new outcome, not pulled back to the old share).

    A rate weighted by time (`Decaying`'s w = exp(-dt/tau)) reads a failure that comes after a silence as
    nearly every outcome failing, since the silence faded everything before it. A slow server goes silent
    exactly when it is overloaded: on two real llama.cpp servers (issue 24, mixed prompt lengths), a
    closed-loop burst queued long prompts on the throttled one, which reported nothing for ~20 s while it
    prefilled them, then two of its queued requests hit the first-token timeout (retried on the quick
    one). Its failure rate read 0.90 and 0.97 after two such bursts, a 4.6-4.9x failure penalty on
    every prediction there: the default sent 12 of 12 requests of the run after it to the quick server
    and lost to least_inflight at the median (1.13x TTFT, 1.58x E2E). Two failures after 16 answers,
    20 s after the last of them, read ~0.2. A backend whose answers all fail reads 1.0 from its first.

    A mean, not a step of 1/`window` from the last read: stepped from a read that had relaxed toward the
    prior between outcomes, a backend failing every request sent 10 s apart read 0.45, falling from
    1.0 as its failures came, and one failing every other request 30 s apart read 0.10."""

    window: int = OUTCOME_WINDOW
    # The outcomes' weight in all (each 1 when it came, less for every later outcome and for silence).
    weight: float = field(init=False, default=0.0)

    def add(self, sample: float, now: float, peak: bool = False) -> None:
        if not self.samples:
            self.value, self.weight = sample, 1.0
        else:
            earlier = self.weight * (1.0 - 1.0 / self.window) * math.exp(-(now - self.updated) / self.stale_tau_s)
            self.weight = earlier + 1.0
            self.value = (self.value * earlier + sample) / self.weight
        self.updated = now
        self.samples += 1


@dataclass
class SampleMean:
    """A mean over about the last `window` samples, each weighed the same whatever the time between them
    (a running mean until there are that many, then each moves it 1/`window` of the way); unfed, it keeps
    its figure. For a property of the requests (how long their answers are), not of a backend's health:
    silence says nothing new about it.

    Kept as a `Decaying` (time constant 60 s, relaxing toward the prior of 200 tokens over 120 s), a
    backend's mean answer length drifted whenever it was unfed, and answers that came close together
    hardly moved it (each weighed by the seconds since the last): on two real llama.cpp servers (issue
    24, unequal), every answer exactly 24 tokens, the quick server's figure read 44-85 tokens in every
    snapshot, and 40-60 once it idled; it prices decode where no alias-and-shape figure exists and the
    turnover of a full backend's slots."""

    prior: float
    window: int = OUTPUT_WINDOW
    value: float = field(init=False)
    samples: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.value = self.prior

    def get(self, now: float | None = None) -> float:
        """The mean (the prior before any sample); `now` is accepted as `Decaying.get` takes it, and unused."""
        return self.value

    def add(self, sample: float, now: float | None = None) -> None:
        self.samples += 1
        self.value += (sample - self.value) / min(self.samples, self.window)


@dataclass
class DecayingLine:
    """y = intercept + slope * x by least squares over samples that fade with time (w = exp(-dt/tau)).

    Until x has varied enough to tell the slope apart from the intercept, one of two things holds the
    line: `ridge` (in x^2 units) pulls the slope toward the prior's, or `anchor` counts as that many
    samples at the origin, which never fade (a line through the origin unless the data say otherwise).
    Unfed, both coefficients relax toward the prior line like `Decaying`.

    Samples fade with time and, past `window` samples, with count: a burst's dense samples carry at
    most `window` samples' weight, so the first requests after it are not priced at the burst's
    conditions until a minute of quieter samples outnumbers them (issue 24: after a calibration burst,
    the strategy that ran first was over-predicted by +32 % to +157 % at the median).

    With `relative`, the line is fitted to relative errors (each sample weighs 1/y^2, y the larger of
    its own time and what the line predicted for it before it; the anchor counts as that many samples of
    the samples' mean weight): a prediction is judged against its own size, and where samples come in
    two sizes the small ones set the fixed part, the large ones the rate. Fitted
    on absolute errors, a real llama.cpp server's prefill line (issue 24, eight shared prompts: cached
    prompts of ~25 uncached tokens in 0.18 s, cold ones of ~590 in 2.4 s, the first two prefilled
    together 1,180 in 5.05 s) was set by the large samples and the anchor: 0.00-0.07 s fixed, and every
    cached prompt predicted 0.10-0.15 s, 20-40 % low.
    """

    prior_intercept: float
    prior_slope: float
    tau_s: float = 60.0
    stale_tau_s: float = 300.0
    ridge: float = 1e5
    anchor: float = 0.0
    window: float = math.inf
    relative: bool = False
    samples: int = field(init=False, default=0)
    updated: float = field(init=False, default=0.0)
    # Faded sums: the samples' count, their weights, and the weighted x, y, x^2 and xy (weight 1, and the
    # weights the count, unless `relative`).
    _sums: tuple[float, float, float, float, float, float] = field(init=False, default=(0.0,) * 6)
    # The fitted (intercept, slope) before relaxing toward the prior: fitted at the first read after a
    # sample, not at every prediction (each routing decision reads two lines per candidate).
    _fit: tuple[float, float] | None = field(init=False, default=None, repr=False, compare=False)

    def add(self, x: float, y: float, now: float) -> None:
        n, w, sx, sy, sxx, sxy = self._sums
        if self.samples:
            # Every answer feeds two lines: the fade applied term by term, not through a generator.
            # Unfed, the sums are still zero (what fading them by 0.0 left).
            d = math.exp(-(now - self.updated) / self.tau_s) * (1.0 - 1.0 / self.window)
            n, w, sx, sy, sxx, sxy = n * d, w * d, sx * d, sy * d, sxx * d, sxy * d
        k = 1.0
        if self.relative:
            # Weighed by the larger of its own y and what the line predicted for it: by its own alone, the
            # samples that came in low weigh most and the fit reads low (a llama.cpp prompt prefilled
            # beside another's comes in high, never low); by the prediction alone, the first samples
            # were weighed by the prior's line (a GPU's rate on a CPU server) and outweighed every later one.
            a, b = (self._fit or self._fitted()) if self.samples else (self.prior_intercept, self.prior_slope)
            k = 1.0 / max(y, a + b * x, RELATIVE_FLOOR_S) ** 2
        self._sums = (n + 1.0, w + k, sx + k * x, sy + k * y, sxx + k * x * x, sxy + k * x * y)
        self.updated = now
        self.samples += 1
        self._fit = None

    def coefficients(self, now: float) -> tuple[float, float]:
        """(intercept, slope) now."""
        if not self.samples:
            return self.prior_intercept, self.prior_slope
        intercept, slope = self._fit or self._fitted()
        drift = 1.0 - math.exp(-(now - self.updated) / self.stale_tau_s)
        return (intercept + (self.prior_intercept - intercept) * drift, slope + (self.prior_slope - slope) * drift)

    def fit(self) -> tuple[float, float] | None:
        """The fitted (intercept, slope) before relaxing toward the prior (`coefficients` relaxes it by the
        time since the last sample); None while unfed (the prior's line, at any instant)."""
        return (self._fit or self._fitted()) if self.samples else None

    def _fitted(self) -> tuple[float, float]:
        n, w, sx, sy, sxx, sxy = self._sums
        # Points at (0, 0) add weight and nothing else to the sums (as much as that many average samples).
        w += self.anchor * (w / n if self.relative else 1.0)
        mx, my = sx / w, sy / w
        slope = max(0.0, (sxy - sx * my + self.ridge * self.prior_slope) / (sxx - sx * mx + self.ridge))
        intercept = my - slope * mx
        if intercept < 0:
            # No fixed part fits better than a negative one: the line through the origin.
            slope, intercept = max(0.0, (sxy + self.ridge * self.prior_slope) / (sxx + self.ridge)), 0.0
        self._fit = (intercept, slope)
        return self._fit

    def at(self, x: float, now: float) -> float:
        a, b = self.coefficients(now)
        return a + b * x


@dataclass
class AnswerDecode:
    """A whole answer's decode time per token, as the median of recent answers that decoded in the same
    batch (requests decoding together, this one included): the figure a request's predicted end-to-end
    time multiplies, read at the batch it will decode in.

    The TPOT line (LatencyModel.decode) is a least-squares fit, a mean: right for when the requests in
    flight will finish (the book), wrong as a prediction of one answer. An answer's decode is stalled
    for a whole prefill whenever another request takes a slot beside it (llama.cpp runs a neighbour's
    prompt in the same steps as the running decodes), and that either happens or it does not. On two
    real llama.cpp servers (issue 24, unequal, 24-token answers) the quick server's answers sent to an
    idle server decoded in 0.26 s at the median and 0.51 s on average (half of them met a neighbour's
    prefill); priced at the mean, every one was off, the median end-to-end error 28 %. The median of
    like answers is what one answer most likely takes.

    Answers are alike by the batch they decoded in, as the in-flight book measured it (the others
    decoding beside each, per second of its own decode), not by the requests in flight when they were
    sent: sent to an idle server, an answer that a later arrival joined decoded in a batch of two, and
    on a CPU server a token takes 2.5 times as long in one. Keyed by the state at sending (issue 24,
    mixed lengths on real llama.cpp, 2 slots), the idle state's figure mixed both: the quick server's
    answers that decoded alone took 0.27-0.36 s and were predicted 0.5-0.97 s, and after a calibration
    burst, which taught no answer sent to an idle server, they were priced at the burst's batch of two.
    Read at the batch of the requests in flight when sent (those beyond the slots wait, and then decode
    beside a full batch), the median end-to-end error on the default's dumps of that workload read 16 %
    and 13 % against the 26 % predicted (each answer priced at the other answers' medians). Arrivals
    expected during the decode (at the backend's arrival rate) are not priced: they raised it to 18 %,
    since an arrival that joins an answer also stalls it for its prefill, which no prediction at sending
    can know of; the answers that arrivals join are missed either way, and pricing them only moved the
    others.

    Levels are the batch up to 4, then powers of two (5-8, 9-16, ...), so a large batch shares figures
    with its neighbours. A level with fewer than ANSWER_MIN_SAMPLES answers has no figure: the line
    prices it, but never above what answers in a larger batch, or stretches of answers decoded in a
    batch at least as large, took at the median (fewer requests do not decode slower). The line is a
    mean over the last samples, and a closed-loop burst's samples are stalled by the prefill of every
    request that takes a freed slot: after one, the slow llama.cpp server's line read 0.17 s per token
    at batch 1 against its 0.03, and that server, sent few requests, had no answers of its own at batch
    1 to correct it. Unfed, a figure drifts to the line with `stale_tau_s`, but to no more than that bound
    either: on real llama.cpp servers with mixed prompt lengths (issue 24) the line read 0.34-2.0 s a token
    at batch 1 after the bursts (their answers took 0.015-0.04), and a batch-1 median a minute old,
    drifting toward it, priced an idle answer on the throttled server at 2.2 s and 5.8 s for 0.8 and 1.2.

    Where a newcomer's prefill stops the decodes beside it (llama.cpp), an answer is taught without the
    time it stood still for prefills logged during it: what it takes when no one takes a slot beside it.
    Those stalls come from requests not yet sent when it was predicted (in five real runs of the mixed
    workload, issue 24, every stalled answer was stalled by a later arrival, none by one already in
    flight), and at ~70 % load fewer than half the answers meet one (31-46 %), so the stall-free decode
    is the likelier outcome. Taught with them, the medians priced every answer as if stalled: on main,
    the default's quick-server answers that met no prefill decoded in 0.43 s at the median and were
    predicted 0.92 s (E2E +32 %). Where more than half the answers stall (a closed loop, or the
    simulator's longer prefills at 0.7-0.8 req/s), this under-predicts instead: on unequal servers
    (short prompts at 1.2 req/s, issue 24) 77 % of the quick server's answers met a prefill and the
    default's E2E read -23 % at the median. The median of the whole decode per batch read 14 % on that
    dump (against 24 %), but 19 % against 15 % on mixed lengths: the batch an answer decoded in is
    itself biased toward stalled answers (a neighbour that joins prefills first).

    So the stall is kept apart (`stall`): per token of the answer, the median over like answers, zeros
    included, where answers are alike by the requests in flight when they were sent, the state routing
    sees. An answer's predicted end adds it; routing does not rank by it (app/routing/predict.py): the
    arrivals that stall an answer are charged for it where they are placed (lookahead.imposed).

    A llama.cpp decode step reads the whole context, so an answer to a long prompt decodes slower than
    one to a short prompt in the same batch: on two real servers (issue 24, mixed lengths, seven dumps,
    462 answers) the quick server's answers decoded alone at 13.7 ms a token after 20-80-word prompts and
    18-22 ms after 350-900-word ones (the throttled server's 40 against 53-61), and with one median per
    level both were priced alike: the short prompts' decode +50 % (0.63 s for 0.41 s, stalls taken
    out), their median E2E error 31 %. s28p's split of each level by the prompt's size class (0bb9013,
    reverted) left each median too few answers. So each level's median stays one median, of the
    answers' own sizes too, and a prediction moves it by `context_slope` per token its prompt has more
    (or fewer) than that: the slope of per-token decode on prompt tokens within levels, over the last
    CONTEXT_WINDOW answers, shrunk to 0 where prompts hardly vary. Replayed causally on those dumps
    (each answer priced from the answers that had ended before it), the median E2E error read 22 %
    against 24 % with the level's median alone, the short prompts' 23-24 % against 25 %; unequal
    servers' (like prompts) unchanged, 28 % both.
    """

    window: int = ANSWER_WINDOW
    stale_tau_s: float = 120.0
    # Per level, the last `window` samples in the order they came (the one to leave first) and the same
    # samples sorted (`_fold`), so a median is read off, not sorted afresh at every sample.
    _levels: dict[int, deque[float]] = field(default_factory=dict)
    _ranked: dict[int, list[float]] = field(default_factory=dict)
    _medians: dict[int, tuple[float, float]] = field(default_factory=dict)  # level -> (median, updated)
    # Stretches of answers still under way, per batch they decoded in (running requests, at most the
    # slots): their medians bound the levels no answer has taught yet.
    _stretches: dict[int, deque[float]] = field(default_factory=dict)
    _stretch_ranked: dict[int, list[float]] = field(default_factory=dict)
    _stretch_medians: dict[int, tuple[float, float]] = field(default_factory=dict)
    # Per level with an answers' median, the lowest median of answers in a larger batch or stretches in
    # one at least as large (math.inf: none): what an unfed median drifts to where the line reads above
    # it. Kept as the medians move (`_rebound`), so a prediction reads it and never works it out.
    _ceilings: dict[int, float] = field(default_factory=dict)
    # Per level, where each answer in its window came from: (how its decode was timed, how its batch was
    # known), for the snapshot (/admin/backends).
    _answer_sources: dict[int, deque[tuple[str, str]]] = field(default_factory=dict)
    # Seconds per token each whole answer stood still for neighbours' prefills, per requests in flight
    # when it was sent (zeros included): the stall is keyed by the state at sending, the rate by the batch.
    _stalls: dict[int, deque[float]] = field(default_factory=dict)
    _stall_ranked: dict[int, list[float]] = field(default_factory=dict)
    _stall_medians: dict[int, tuple[float, float]] = field(default_factory=dict)
    # Per level, each answer's prompt tokens beside its decode (None: not known), the known ones sorted,
    # and their median; the last answers' (level, prompt tokens, per-token decode), and the slope fitted
    # on them.
    _contexts: dict[int, deque[float | None]] = field(default_factory=dict)
    _context_ranked: dict[int, list[float]] = field(default_factory=dict)
    _context_medians: dict[int, float] = field(default_factory=dict)
    _context_pairs: deque[tuple[int, float, float]] = field(default_factory=lambda: deque(maxlen=CONTEXT_WINDOW))
    # Per level, the running sums over those pairs (count, x, y, xy, xx), so each answer folds in and
    # out in constant time (learning runs at every answer); summed afresh now and then, so float
    # residues of the subtractions never build up.
    _context_sums: dict[int, list[float]] = field(default_factory=dict)
    _context_folds: int = 0
    context_slope: float = 0.0

    @staticmethod
    def level(load: float) -> int:
        if type(load) is int and 0 <= load < len(_LEVELS):  # every prediction asks: a table, built once
            return _LEVELS[load]
        return _level(load)

    def add(self, batch: float, per_token_s: float, now: float, source: str = MEASURED,
            batch_source: str = ESTIMATED, context: float | None = None) -> None:
        """A whole answer that decoded in `batch` (requests decoding together, this one included).
        `source`: how its decode was timed (measured by the gateway, reported by the backend, or
        estimated); `batch_source`: measured where the in-flight book measured the batch, estimated
        where it is the batch the requests in flight at sending make; `context`: its prompt's tokens
        (as routing estimates them), None where not known."""
        key = self.level(batch)
        self._fold(self._levels, self._ranked, self._medians, key, per_token_s, now, ANSWER_MIN_SAMPLES, ANSWERS)
        tags = self._answer_sources.get(key)
        if tags is None:
            tags = self._answer_sources[key] = deque(maxlen=self.window)
        tags.append((source, batch_source))
        # The level's prompt sizes, as `_fold` keeps its samples (None: not known, and not ranked).
        contexts = self._contexts.get(key)
        if contexts is None:
            contexts = self._contexts[key] = deque(maxlen=self.window)
            known = self._context_ranked[key] = []
        else:
            known = self._context_ranked[key]
            if len(contexts) == contexts.maxlen:
                gone = contexts[0]
                if gone is not None:
                    del known[bisect_left(known, gone)]
        contexts.append(context)
        if context is not None:
            insort(known, context)
            self._fold_context(key, context, per_token_s)
        if known:
            self._context_medians[key] = _middle(known)
        else:
            self._context_medians.pop(key, None)

    def _fold_context(self, key: int, x: float, y: float) -> None:
        """Fold an answer's (prompt tokens, per-token decode) at level `key` into the last CONTEXT_WINDOW
        and refit the slope: least squares of per-token decode on prompt tokens, each answer against its
        own level's means (a batch's decode is not a long prompt's), shrunk toward none by
        CONTEXT_RIDGE_TOKENS of spread per answer, never below none (a longer context never decodes
        faster)."""
        pairs, sums = self._context_pairs, self._context_sums
        self._context_folds += 1
        if len(pairs) == pairs.maxlen:
            k0, x0, y0 = pairs[0]
            old = sums[k0]
            old[0] -= 1.0
            old[1] -= x0
            old[2] -= y0
            old[3] -= x0 * y0
            old[4] -= x0 * x0
        pairs.append((key, x, y))
        if self._context_folds % (16 * CONTEXT_WINDOW) == 0:
            sums.clear()
            for k1, x1, y1 in pairs:
                _add_pair(sums, k1, x1, y1)
        else:
            _add_pair(sums, key, x, y)
        sxy = sxx = 0.0
        for n, sx, sy, sxy_k, sxx_k in sums.values():
            if n >= 2.0:
                sxy += sxy_k - sx * sy / n
                sxx += sxx_k - sx * sx / n
        denominator = sxx + len(pairs) * CONTEXT_RIDGE_TOKENS * CONTEXT_RIDGE_TOKENS
        self.context_slope = max(0.0, sxy / denominator) if denominator > 0.0 else 0.0

    def at_context(self, key: int, median: float, context: float | None) -> float:
        """Level `key`'s `median` moved to an answer whose prompt has `context` tokens: by the slope, for
        each token more (or fewer) than the median prompt of the answers it rests on, within
        CONTEXT_FACTOR of it."""
        slope = self.context_slope
        if context is None or not slope:
            return median
        typical = self._context_median(key)
        if typical is None:
            return median
        moved = median + slope * (context - typical)
        low, high = median / CONTEXT_FACTOR, median * CONTEXT_FACTOR
        return max(low, min(moved, high))

    def add_stall(self, load: float, per_token_s: float, now: float) -> None:
        """The stall of a whole answer sent with `load` in flight, per token of its answer."""
        self._fold(self._stalls, self._stall_ranked, self._stall_medians, self.level(load), per_token_s, now,
                   STALL_MIN_SAMPLES, NOTHING)

    def stall(self, load: float, now: float) -> float:
        """Per-token stall of an answer sent with `load` in flight (this one included): the median of
        like answers', drifting to none unfed; none while fewer than STALL_MIN_SAMPLES were seen."""
        # Every prediction asks: the level from the table, and no drift to work out for none.
        known = self._stall_medians.get(_LEVELS[load] if type(load) is int and 0 <= load < _NLEVELS else _level(load))
        if known is None or not known[0] > 0.0:
            return 0.0
        median, updated = known
        return median * math.exp(-(now - updated) / self.stale_tau_s)

    def stall_snapshot(self, now: float) -> dict[str, dict]:
        """Per requests in flight when answers were sent (the highest of its range), the median stall per
        token of like answers and what it rests on: every predicted end adds it (`stall`), so it is shown
        beside the decode medians. Timed by the gateway (the prefills it logged during each answer)."""
        return {str(k): {"stall_s": v[0], "samples": len(self._stalls[k]), "age_s": round(now - v[1], 1),
                         "source": MEASURED}
                for k, v in sorted(self._stall_medians.items())}

    def add_stretch(self, batch: float, per_token_s: float, now: float) -> None:
        """A stretch of an answer under way (timed by the gateway), decoded in a batch of `batch` running
        requests (the requests in flight then, at most the slots: an estimate of the batch)."""
        # Every stretch is timed by the gateway and its batch estimated: no sources to keep (`snapshot`).
        key = _LEVELS[batch] if type(batch) is int and 0 <= batch < _NLEVELS else _level(batch)
        self._fold(self._stretches, self._stretch_ranked, self._stretch_medians, key, per_token_s, now,
                   ANSWER_MIN_SAMPLES, STRETCHES)

    def _context_median(self, key: int) -> float | None:
        """The median prompt tokens of level `key`'s answers (None: none known)."""
        return self._context_medians.get(key)

    def ceiling(self, key: int) -> float | None:
        """Level `key`'s ceiling: the lowest median of answers in a larger batch or of stretches in one at
        least as large (fewer requests decoding together do not decode slower); None where no fuller
        batch bounds it, or the level has no answers' median."""
        ceiling = self._ceilings.get(key)
        return None if ceiling is None or ceiling == math.inf else ceiling

    def _ceiling_of(self, key: int) -> float:
        """Level `key`'s ceiling worked out from the medians as they are now (math.inf: none)."""
        low = math.inf
        for k, v in self._medians.items():
            if k > key and v[0] < low:
                low = v[0]
        for k, v in self._stretch_medians.items():
            if k >= key and v[0] < low:
                low = v[0]
        return low

    def _rebound(self, key: int, old: float | None, new: float, bounds: int) -> None:
        """Level `key`'s median of answers (of stretches where `bounds` is STRETCHES) moved from `old`
        (None: it had none) to `new`: the ceilings it bounds (the levels below it, and its own for a
        stretch) follow. A ceiling is a minimum, so only where `new` is lower, or the minimum was `old`
        and it rose, does it change, and only then is it worked out again: the same figures as from
        scratch (learning moves a median at every answer and progress stretch; predictions read the
        ceilings). A level's first answers' median gets its own ceiling."""
        ceilings = self._ceilings
        stretch = bounds == STRETCHES
        if old is None and not stretch:
            ceilings[key] = self._ceiling_of(key)
        for k, ceiling in ceilings.items():
            if k < key or (stretch and k == key):
                if new < ceiling:
                    ceilings[k] = new
                elif old == ceiling and new > old:
                    ceilings[k] = self._ceiling_of(k)

    def toward(self, key: int, line: float) -> float:
        """What level `key`'s median drifts to unfed: the line, but no more than the level's ceiling."""
        ceiling = self.ceiling(key)
        return line if ceiling is None or line < ceiling else ceiling

    def _fold(self, levels: dict[int, deque[float]], ranked: dict[int, list[float]],
              medians: dict[int, tuple[float, float]], key: int, per_token_s: float, now: float,
              fewest: int, bounds: int) -> None:
        """Fold a sample into level `key`'s window and its sorted copy, set the level's median once it
        holds `fewest`, and where the median moved and `bounds` (ANSWERS, STRETCHES) the ceilings follow.
        The copy is what sorted(window) gives, element for element: a sample goes in after those equal
        to it (insort), and the one leaving, the oldest, is the first of its equals (samples are never
        NaN: the model keeps only decodes of positive seconds)."""
        samples = levels.get(key)
        if samples is None:
            samples = levels[key] = deque(maxlen=self.window)
            ordered = ranked[key] = []
        else:
            ordered = ranked[key]
            if len(samples) == samples.maxlen:
                del ordered[bisect_left(ordered, samples[0])]
        samples.append(per_token_s)
        insort(ordered, per_token_s)
        if len(ordered) >= fewest:
            median = _middle(ordered)
            old = medians.get(key)
            medians[key] = (median, now)
            if bounds:
                if old is None:
                    self._rebound(key, None, median, bounds)
                elif old[0] != median:
                    self._rebound(key, old[0], median, bounds)

    def _drifted(self, known: tuple[float, float], line: float, now: float) -> float:
        median, updated = known
        return median + (line - median) * (1.0 - math.exp(-(now - updated) / self.stale_tau_s))

    def get(self, batch: float, line: float, now: float, context: float | None = None) -> float:
        """Per-token decode of an answer that will decode in `batch`, to a prompt of `context` tokens;
        `line` where nothing is known. Stretches under way are not moved by the prompt's size (theirs is
        not kept)."""
        key = self.level(batch)
        known = self._medians.get(key)
        if known is not None:
            return self._drifted((self.at_context(key, known[0], context), known[1]), self.toward(key, line), now)
        out = line
        for k, v in self._medians.items():
            if k >= key:
                out = min(out, self._drifted((self.at_context(k, v[0], context), v[1]), line, now))
        for k, v in self._stretch_medians.items():
            if k >= key:
                out = min(out, self._drifted(v, line, now))
        return out

    def snapshot(self, now: float) -> dict[str, dict]:
        """Per level (the batch decoding together, the highest of its range), each median and what it
        rests on: of whole answers, and of stretches of answers under way. Its `source` is the least
        direct of its samples' (estimated, then reported, then measured), and so is its
        `batch_source`, how the batches that place the samples at that level were known: a median
        partly estimated is never shown as measured."""
        sources = self._answer_sources
        return {"answers": {str(k): {"tpot_s": v[0], "samples": len(self._levels[k]), "age_s": round(now - v[1], 1),
                                     "source": _least_direct(t[0] for t in sources[k]),
                                     "batch_source": _least_direct(t[1] for t in sources[k])}
                            for k, v in sorted(self._medians.items())},
                # Every stretch is timed by the gateway (measured), its batch the requests in flight then.
                "stretches": {str(k): {"tpot_s": v[0], "samples": len(self._stretches[k]),
                                       "age_s": round(now - v[1], 1), "source": MEASURED, "batch_source": ESTIMATED}
                              for k, v in sorted(self._stretch_medians.items())}}


class LatencyModel:
    """Live estimates for one backend; every update says where its sample came from."""

    def __init__(self, prior: Prior | None = None, tau_s: float = 10.0) -> None:
        self.prior = prior or Prior()
        p = self.prior
        self.net = Decaying(p.net_s, tau_s)
        self.queue = Decaying(p.queue_s, tau_s)
        # The same waits as (instant, seconds), for their median (typical_residual_queue).
        self.recent_waits: deque[tuple[float, float]] = deque(maxlen=TYPICAL_WAITS)
        self._typical: float | None = None  # their median while all are recent (None: not worked out yet)
        # Prefill time against prompt tokens: a fixed part (scheduling, the first step) plus a rate.
        # Anchored at the origin (an empty prompt costs nothing), not held to the prior's rate: prompts
        # of one workload vary too little in length to separate the two, and a slope held at a GPU's
        # 5,000 tokens/s put a CPU server's whole cost in the fixed part (real llama.cpp, issue 24: 0.34 s
        # fixed + 0.2 ms/token fitted for ~8 ms/token; 30-token prompts predicted +60 %, 130-token ones
        # -25 %, and each pending prefill in a backlog priced at 0.34 s). Fitted to relative errors: a
        # prompt mostly read from the cache prefills a few dozen tokens, and its time is mostly the
        # fixed part (see DecayingLine).
        self.prefill = DecayingLine(0.0, 1.0 / p.prefill_tokens_per_s, ridge=0.0, anchor=PREFILL_ANCHOR,
                                    window=LINE_WINDOW, relative=True)
        # The rate the server publishes (None: the line starts from the prior's), in the server's tokens,
        # and routing's tokens per server token (TokenRatio; None until an answer's usage says): the line's
        # prior is their product.
        self.published_prefill_rate: float | None = None
        self.prompt_token_ratio: float | None = None
        # TPOT at batch 1 (an average, for the record and the console), and TPOT against the running
        # batch as a line learned from every decode sample (issue 24: a fixed 3 % per extra request
        # read a CPU server's 2-slot batch, ~40 % slower, as a slower server).
        self.tpot_base = Decaying(p.tpot_s, tau_s)
        self.decode = DecayingLine(p.tpot_s, p.tpot_s * p.tpot_growth, tau_s=DECODE_TAU_S, stale_tau_s=120.0,
                                   ridge=DECODE_RIDGE, window=LINE_WINDOW)
        # A whole answer's decode per token, per batch it decoded in (medians).
        self.answers = AnswerDecode()
        self.output_tokens = SampleMean(p.output_tokens)
        self.slots = p.slots
        # Where the slot count came from: the prior, learned from queueing, or published by the server
        # (then queueing never overrides it).
        self.slots_source = "prior" if p.slots is not None else "unknown"
        # The most requests seen running here at once with none waiting: what it surely handles.
        self.slots_at_least = 1
        # Share of recent attempts that failed (0..1), over outcomes, not seconds (OutcomeShare), and
        # the plain average of observed end-to-end latency that simpler strategies route on.
        self.failure_rate = OutcomeShare(0.0)  # counted in outcomes: no time constant but the relaxation
        self.observed_latency = 0.0

    # --- observations -------------------------------------------------------------------------
    def observe_network(self, seconds: float, now: float | None = None, peak: bool = True) -> None:
        """A network sample; a probe's round trip (not a request's) is averaged, never taken as a peak:
        one probe that waited on a busy event loop says nothing of the next request's network."""
        self.net.add(max(0.0, seconds), _now(now), peak=peak)

    def observe_queue(self, seconds: float, ahead: int = 0, expected: float = 0.0, tolerance: float = QUEUE_NOISE_S,
                      now: float | None = None) -> None:
        """A queue wait seen with `ahead` requests already in flight here, where `expected` was predicted.

        A wait beyond `tolerance` (what the measurement cannot tell from no wait) with k ahead means the
        backend runs at most k at once; no wait means more than k. A wait with nothing of ours ahead is
        someone else's traffic: the residual queue.

        A wait within `tolerance` is not queueing, but it is not nothing either: the server's admission
        (reading the request, tokenizing the prompt, choosing a slot), which every request pays before
        its prefill, is learned in the residual as measured. Learned as none, every prediction on an idle
        real llama.cpp server missed it (issue 24, shared prefixes: 12-21 ms to the headers at the median,
        warm requests' TTFT of ~0.15 s predicted 0.84-0.90x).
        """
        queued = seconds > tolerance
        t = _now(now)
        if ahead == 0:
            self._residual(seconds, t)
            return
        if self.slots_source == "reported":
            if not queued and expected <= tolerance:
                self._residual(seconds, t)
            return
        if queued and (self.slots is None or self.slots > ahead):
            self.slots, self.slots_source = ahead, "learned"
        elif not queued:
            self.slots_at_least = max(self.slots_at_least, ahead + 1)
            if self.slots is not None and self.slots <= ahead:
                self.slots, self.slots_source = ahead + 1, "learned"
            if expected <= tolerance:
                self._residual(seconds, t)

    def _residual(self, seconds: float, t: float) -> None:
        self.queue.add(seconds, t)
        self.recent_waits.append((t, seconds))
        self._typical = None

    def set_reported_slots(self, slots: int) -> None:
        """The server published how many requests it runs at once (llama.cpp /props total_slots)."""
        self.slots, self.slots_source = slots, "reported"
        self.slots_at_least = max(self.slots_at_least, slots)

    def set_published_prefill_rate(self, tokens_per_s: float) -> None:
        """The server's own prefill rate over what it has processed (llama.cpp /metrics) becomes the rate
        the prefill line starts from and relaxes back to, in place of the prior's GPU rate: a gateway fresh
        from its start prices a prompt at what this server takes, not 5,000 tokens a second. On two real
        llama.cpp servers (issue 24, unique prompts at 0.5 a second, 10 s runs from a fresh gateway) every
        request of most runs came before any answer had taught a prefill, and every TTFT read 95 % low.
        The rate is per token the server counts; routing counts its own (see set_prompt_token_ratio)."""
        self.published_prefill_rate = tokens_per_s
        self._price_published_rate()

    def set_prompt_token_ratio(self, ratio: float) -> None:
        """Routing's prompt tokens (a quarter of the characters) per token the server's tokenizer counts,
        from the answers' usage (TokenRatio). Unconverted, the published rate priced every prompt by the
        ratio too high until the line's own samples outweighed it, and again whenever the line relaxed
        back to it: 1.6x on real llama.cpp servers (SmolLM2's tokenizer, the shared-prefix bench's English
        system prompts at ~6.5 characters a token)."""
        self.prompt_token_ratio = ratio
        self._price_published_rate()

    def _price_published_rate(self) -> None:
        if self.published_prefill_rate:
            self.prefill.prior_slope = 1.0 / (self.published_prefill_rate * (self.prompt_token_ratio or 1.0))

    def observe_prefill(self, prompt_tokens: int, seconds: float, now: float | None = None) -> None:
        """A prefill (or a first-token wait with nothing queued) of `seconds` for `prompt_tokens`, the
        tokens the server processed: a prefix it reused from its KV cache is not counted."""
        if prompt_tokens > 0 and seconds > 0:
            self.prefill.add(float(prompt_tokens), seconds, _now(now))

    def observe_decode(self, output_tokens: int, seconds: float, load: float, now: float | None = None,
                       source: str = MEASURED, count_output: bool = True, stalled_s: float | None = None,
                       batch: float | None = None, context: float | None = None) -> None:
        """TPOT from a decode phase seen with `load` requests in flight (never TTFT divided by tokens),
        a point on the line of TPOT against the batch. `source` says how it was timed: measured (a
        stream), reported (the backend's report) or estimated (inferred from a whole answer's time);
        all count alike, since no sample replaces the estimate, and the answers' medians show it. A decode still under way (`count_output` off) says nothing of the
        answer's length. `stalled_s` of a whole answer's `seconds` stood still for other requests'
        prefills (a newcomer's, on a server that runs it in the same steps): the line, which prices the
        book's finish times, keeps them; the answer's median is taught the decode without them (see
        `AnswerDecode`), under the `batch` it decoded in (requests decoding, itself included, as the
        in-flight book measured them; by default the batch `load` makes), and the stall per token apart,
        under `load` (the state it was sent in). None: not measured (an answer not streamed upstream has
        no first token to measure it from; its decode is reported or inferred), and no stall is taught.
        `context`: the answer's prompt tokens (as routing estimates them), which its decode per token
        grows with (`AnswerDecode`); None where not known."""
        if output_tokens > 1 and seconds > 0:
            t = time.monotonic() if now is None else now
            tpot = seconds / (output_tokens - 1)
            # batch() and tpot_growth, inline (the same figures): learning runs this at every answer and
            # every progress stretch.
            slots = self.slots
            running = load if slots is None else min(load, slots)
            extra = max(0.0, running - 1.0)
            # A plain average, never a peak: a peak-EWMA tracks the slowest recent samples, and its
            # predictions stayed high for seconds after every burst.
            decode = self.decode
            decode.add(extra, tpot, t)
            a, b = decode.coefficients(time.monotonic())
            self.tpot_base.add(tpot / (1.0 + (b / a if a > 0 else 0.0) * extra), t)
            if count_output:
                # A whole answer (not a stretch of one still under way): a sample of what one takes,
                # unless it stood still throughout (nothing of its own decode to learn).
                stalled = 0.0 if stalled_s is None else stalled_s
                if seconds > stalled:
                    decoded_in = self.batch(load if batch is None else batch)
                    self.answers.add(decoded_in, (seconds - stalled) / (output_tokens - 1), t, source,
                                     ESTIMATED if batch is None else MEASURED, context)
                    if stalled_s is not None:  # measured from its first token: else not known
                        self.answers.add_stall(load, stalled / (output_tokens - 1), t)
            else:
                self.answers.add_stretch(running, tpot, t)
        if output_tokens > 0 and count_output:
            self.output_tokens.add(float(output_tokens), _now(now))

    def observe_outcome(self, ok: bool, now: float | None = None) -> None:
        self.failure_rate.add(0.0 if ok else 1.0, _now(now))

    def observe_latency(self, seconds: float, weight: float = 0.2) -> None:
        self.observed_latency = seconds if not self.observed_latency else self.observed_latency * (1 - weight) + seconds * weight

    # --- predictions --------------------------------------------------------------------------
    def batch(self, load: float) -> float:
        """Requests running together when `load` are in flight: the rest wait for a slot."""
        return load if self.slots is None else min(load, self.slots)

    @property
    def tpot_growth(self) -> float:
        """Decode slowdown per extra request in the batch, as a share of TPOT at batch 1 (learned)."""
        a, b = self.decode.coefficients(time.monotonic())
        return b / a if a > 0 else 0.0

    def tpot(self, load: float, now: float | None = None) -> float:
        """Time per output token with `load` requests in flight here (at most `slots` decode together)."""
        # batch() and DecayingLine.at, inline: every routing decision reads this once per candidate.
        a, b = self.decode.coefficients(time.monotonic() if now is None else now)
        batch = load if self.slots is None else min(load, self.slots)
        return max(MIN_TPOT_S, a + b * max(0.0, batch - 1.0))

    def answer_tpot(self, load: float, now: float, context: float | None = None) -> float:
        """Per-token decode of a whole answer sent with `load` requests in flight here (this one
        included), priced at the batch it will decode in (`batch(load)`: those beyond the slots wait, and
        decode beside as many): the median of recent answers that decoded in that batch, moved to a
        prompt of `context` tokens (`AnswerDecode.at_context`), else the TPOT line at that load. The line is read
        either way (a median drifts toward it while unfed): `tpot(load, now)`, inline, with plain
        comparisons for its min() and max() (the same results; every prediction passes through);
        `DecayingLine.fit` and, where the level has a median, `AnswerDecode.get`, inline too."""
        d = self.decode
        if d.samples:  # DecayingLine.fit, inline
            fit = d._fit or d._fitted()
            drift = 1.0 - math.exp(-(now - d.updated) / d.stale_tau_s)
            a, b = fit[0] + (d.prior_intercept - fit[0]) * drift, fit[1] + (d.prior_slope - fit[1]) * drift
        else:
            a, b = d.prior_intercept, d.prior_slope
        slots = self.slots
        batch = load if slots is None or not slots < load else slots
        extra = batch - 1.0
        line = a + b * (extra if extra > 0.0 else 0.0)  # noqa: FURB136 (see above)
        if not line > MIN_TPOT_S:
            line = MIN_TPOT_S
        answers = self.answers
        key = _LEVELS[batch] if type(batch) is int and 0 <= batch < _NLEVELS else _level(batch)
        known = answers._medians.get(key)
        if known is None:
            return answers.get(batch, line, now, context)
        median, updated = known
        slope = answers.context_slope
        if slope and context is not None:
            # AnswerDecode.at_context, inline, its min() and max() as plain comparisons (the same results).
            typical = answers._context_medians.get(key)
            if typical is not None:
                moved = median + slope * (context - typical)
                high = median * CONTEXT_FACTOR
                if high < moved:  # noqa: PLR1730 (see above)
                    moved = high
                low = median / CONTEXT_FACTOR
                median = moved if moved > low else low  # noqa: FURB136 (see above)
        # AnswerDecode.toward, inline: unfed, the median drifts to the line, at most the level's ceiling
        # (math.inf where none bounds it).
        ceiling = answers._ceilings[key]
        if ceiling < line:  # noqa: PLR1730 (a plain comparison, as above)
            line = ceiling
        return median + (line - median) * (1.0 - math.exp(-(now - updated) / answers.stale_tau_s))

    def prefill_s(self, prompt_tokens: int, now: float | None = None) -> float:
        return self.prefill.at(prompt_tokens, _now(now))

    def residual_queue(self, now: float | None = None) -> float:
        """Queueing the in-flight book does not explain (other clients of the backend), never negative."""
        return max(0.0, self.queue.get(time.monotonic() if now is None else now))

    def typical_residual_queue(self, now: float) -> float:
        """The residual wait a request typically meets here: the median of the last TYPICAL_WAITS within
        TYPICAL_WAITS_S (the mean, `residual_queue`, while fewer are).

        The mean is what routing prices: a wait that one request in four meets (another gateway's
        prefill ahead of it, a throttled server's pause) is a cost each placement there risks. As a
        forecast of one request it is neither outcome: behind three gateway replicas on real llama.cpp
        servers (issue 24, six shared prompts), a replica's requests mostly found a slot at once and now
        and then waited 1-3 s behind another replica's cold prefill, and the mean of those waits put
        every warm request's predicted TTFT a second late (0.09-0.5 s predicted 1.0-1.2 s; the median
        error 60-177 %). Routing on the median instead was tried and lost (bench/ROUTING.md, "Behind three
        replicas"): it ignores the waits that should steer the next request away."""
        waits = self.recent_waits
        if len(waits) >= TYPICAL_WAITS_MIN:
            if now - waits[0][0] <= TYPICAL_WAITS_S:
                # Every kept wait is recent (the common case under traffic): worked out once per wait,
                # not at every decision.
                if self._typical is None:
                    self._typical = max(0.0, _middle(sorted(w for _, w in waits)))
                return self._typical
            recent = sorted(w for t, w in waits if now - t <= TYPICAL_WAITS_S)
            if len(recent) >= TYPICAL_WAITS_MIN:
                return max(0.0, _middle(recent))
        return self.residual_queue(now)

    def ttft(self, prompt_tokens: int, now: float | None = None, queue_s: float | None = None,
             line: tuple[float, float] | None = None) -> float:
        """Time to the first token: network, `queue_s` (the residual queue when not given), prefill on
        the prefill `line` (fixed part, seconds per token) when the caller has read it already."""
        t = time.monotonic() if now is None else now
        q = self.residual_queue(t) if queue_s is None else queue_s
        fixed, per_token = self.prefill.coefficients(t) if line is None else line
        return self.net.get(t) + q + (fixed + per_token * prompt_tokens)

    def snapshot(self, now: float | None = None) -> dict:
        """The live figures, for /admin/backends (seconds, tokens per second, tokens)."""
        t = _now(now)
        overhead, per_token = self.prefill.coefficients(t)
        return {
            "net_s": self.net.get(t), "residual_queue_s": self.residual_queue(t),
            # What a request's forecast reads instead (predict.forecast): the median of the recent waits.
            "typical_residual_queue_s": self.typical_residual_queue(t), "slots": self.slots,
            "slots_source": self.slots_source,
            "slots_at_least": self.slots_at_least,
            "prefill_tokens_per_s": 1.0 / per_token if per_token else None, "prefill_overhead_s": overhead,
            "prefill_rate_from": ("learned" if self.prefill.samples
                                  else "published" if self.published_prefill_rate else "prior"),
            "prompt_tokens_per_server_token": self.prompt_token_ratio,
            "tpot_s": self.tpot_base.get(t),
            "tpot_growth": self.tpot_growth, "output_tokens": self.output_tokens.get(t),
            "answer_tpot_s": self.answers.snapshot(t),
            "answer_stall_s": self.answers.stall_snapshot(t),
            "answer_tpot_per_prompt_token_s": self.answers.context_slope,
            "failure_rate": self.failure_rate.get(t), "observed_latency_s": self.observed_latency,
            "samples": {"net": self.net.samples, "queue": self.queue.samples,
                        "prefill": self.prefill.samples, "decode": self.tpot_base.samples},
        }


# The sources of timing figures, most direct first.
_DIRECTNESS = {MEASURED: 0, REPORTED: 1, ESTIMATED: 2}


def _middle(ordered: list[float]) -> float:
    """The median of an already sorted, non-empty list (statistics.median would sort it again)."""
    k = len(ordered)
    return ordered[k // 2] if k % 2 else 0.5 * (ordered[k // 2 - 1] + ordered[k // 2])


def _add_pair(sums: dict[int, list[float]], key: int, x: float, y: float) -> None:
    row = sums.get(key)
    if row is None:
        sums[key] = [1.0, x, y, x * y, x * x]
    else:
        row[0] += 1.0
        row[1] += x
        row[2] += y
        row[3] += x * y
        row[4] += x * x


def _least_direct(sources: Iterable[str]) -> str:
    return max(sources, key=_DIRECTNESS.__getitem__, default=ESTIMATED)


def _level(load: float) -> int:
    """AnswerDecode's level of a batch: itself (rounded) up to 4, then the power of two at or above it."""
    n = max(1, round(load))
    return n if n <= 4 else 1 << (n - 1).bit_length()


_LEVELS = tuple(_level(n) for n in range(257))
_NLEVELS = len(_LEVELS)


def _now(now: float | None) -> float:
    return time.monotonic() if now is None else now


def load_prior(path: str | None) -> Prior | None:
    """The prior in a `slipstream bench` report; None without one (the built-in prior then)."""
    if not path:
        return None
    import orjson

    with open(path, "rb") as f:
        fitted = orjson.loads(f.read()).get("prior", {})
    defaults = Prior()
    return Prior(
        net_s=float(fitted.get("net_s", defaults.net_s)),
        prefill_tokens_per_s=float(fitted.get("prefill_tokens_per_s", defaults.prefill_tokens_per_s)),
        tpot_s=float(fitted.get("tpot_s", defaults.tpot_s)),
        tpot_growth=float(fitted.get("tpot_growth", defaults.tpot_growth)),
        slots=int(fitted["slots"]) if fitted.get("slots") else None,
    )
