"""The default routing policy: lowest predicted latency, counting what each backend already holds of the
prompt and the prompt tokens it still has to process, with no margin to tune.

Each candidate's prediction (app/routing/predict.py) prefills only the prompt tokens the candidate is
not believed to hold cached (the prefix index's match, scaled by that backend's index accuracy), after
the uncached prompt tokens already in flight there (load counted in tokens, not requests), plus the
slot queue and the decode of the answer at the backend's batch. The lowest prediction wins: affinity
is worth exactly the prefill it saves now, so a warm backend keeps a prefix while waiting for it costs
less than computing it again elsewhere, and a busy warm backend sheds the prefix to a cold one, which
then holds it too.

Each candidate is also charged the delay it passes on: the lowest prediction a like request arriving
one mean gap later would get with this one placed there (app/routing/lookahead.py), and, on a server
whose running decodes stop for a newcomer's prefill (llama.cpp), that prefill once for each request
still running there. A request that
takes the quick server's last slot for itself, when a slower server has room, leaves the next arrival
to wait or to go slow. Unpriced, half the quick server's requests waited for a slot there and the
default lost to least_inflight at the median on unequal real servers (issue 24); priced, about a fifth.

A prefix no candidate holds has nothing to save now, but a shared one will come again: placing it where
it hashes to (rendezvous hashing over the candidates) makes every gateway replica send it to the same
backend without a shared index, so all of them reuse one copy. That placement may cost at most what
it is expected to save: the prefill of the prompt's reusable part times the share of this alias's
recent requests that found a prefix cached (app/routing/reuse.py measures both). On traffic that never
repeats a prefix there is no margin: unique prompts go to the lowest prediction, as if prefixes did
not exist (issue 24: the previous sticky margin of 50 ms plus 25 % sent unique prompts to a hashed
backend that was not the best, 6-30 % behind round robin's mean TTFT). The share alone does not fall
to zero there: llama.cpp reports reusing the chat template's first ~20-30 tokens of every prompt (~7 %
of a ~380-token one), which every backend holds whoever placed it, so a share of the prompt's prefill
stayed open as a margin and 16 % of simulated unique prompts went to their hash, not to the lowest
prediction. So the margin opens only while the recent mean of reused tokens per request is over a
burst's shortest prefix (MIN_HOME_TOKENS), the test the home rule below makes: below it, what is
reused is a floor every backend holds, and consistent placement saves nothing. Over it, a template's
tokens are a small part of the reuse and the share prices it as before. (Not the smaller of the share
times the prompt and the mean reused tokens: the backends report tokens as their tokenizer counts them,
~0.6 of the gateway's estimate on SmolLM2, which the margin's prefill is priced in, so that would cut
a real shared prefix's margin by the tokenizers' ratio.)

Behind several gateway replicas that margin is not enough. Each replica sees only its own share of
the load on each backend and learns its latency models from a third of the answers, so its
predictions for the same backends differ by more than any one prompt saves (the spread between
candidates' predictions for a prompt no one holds was 2.6x across 3 replicas against 1.45x with one
gateway, on the simulator's multi-turn chats). A replica then leaves the home on noise, the turn
warms a second backend, and the replicas' local indexes pull the conversation's later turns apart
(47-64 % of prompt tokens cached against 76-78 % with one gateway). So while this alias's prompts
repeat a prefix longer than a burst wait's minimum (a recent mean of reused tokens per request: a chat
template's first ~20 tokens, which every backend holds, are no such prefix, however large a share of
a short prompt they are), a prompt goes to its home whenever no candidate is
known to hold more of it and the home carries at most its bounded share of the requests this gateway
has in flight: consistent hashing with bounded loads (Mirrokni, Thorup and Zadeh, 2018; HAProxy's
hash-balance-factor 125), counted in requests and in uncached prompt tokens: a bound on load that
noise in the latency models cannot move. Over it, or when another backend is known to hold more of
the prompt, the lowest prediction decides.

Bounded load counts requests as if the servers were equal. A home that is clearly the worse server,
over twice the quickest candidate's time per output token at batch 1 (times the failure penalty), is
no home: a throttled, smaller or failing server would otherwise take its full hashed share of the
conversations, each of them slow for good (simulator, one backend 3x slower, multi-turn: mean TTFT
192 ms against the previous default's 108; with this guard 103-148 ms over three repeats, the slow
backend taking 7 of 289 requests). Decode speed is the server's own figure; the queue and prefill
backlog parts of a prediction are what bounded load already handles. It costs some affinity behind
replicas, whose decode figures also carry load they cannot see: 68 % of prompt tokens cached behind
three simulated replicas against 74 % without it (a guard on the whole prediction at 3x the best
cost the same).
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING

from app.routing.lookahead import ArrivalRate, first_passed_on, imposed, passed_on
from app.routing.memory import AliasMemory
from app.routing.predict import failure_penalty, ranked
from app.routing.prefix_index import BLOCK_CHARS, CHARS_PER_TOKEN
from app.routing.prefix_routing import MIN_BURST_BLOCKS, matches, rendezvous
from app.routing.reuse import ReuseTracker
from app.routing.state import slot_scoped_cache
from app.routing.strategies import PredictedLatency

if TYPE_CHECKING:
    from collections.abc import Callable

    from app.record import Estimate
    from app.routing.context import RouteContext

# A prefix's home may carry this many times its fair share of the requests in flight (Mirrokni et al.'s
# 1 + epsilon; HAProxy's hash-balance-factor 125): within it, affinity holds whatever the latency models
# say; past it, the load spills to the lowest prediction.
BALANCE_FACTOR = 1.25
# A home whose time per output token (times its failure penalty) is over this many times the quickest
# candidate's is clearly the worse server: the predictions decide. Replicas' noise stays well under it.
SLOWER_HOME = 2.0
# Before a backend is timed, a sibling waits for its prompt's copy there however late the copy runs (its
# server computes at a rate no one has seen), unless it is this many times later than a rate seen for
# certain: then the server looks hung. At SLOWER_HOME (2x) a copy on a server 3x slower was left for a cold
# prefill on the quick one, which cost 8 % mean TTFT (llama_sim --per-slot --shared 4 --slow 3, 60 seeds;
# 9 % with 3 slots); at 16x every row reads as without the bound, but 1 of 200 seeds.
HUNG_COPY = 16.0
# A stream this much past its predicted first token, and SLOWER_HOME times its predicted wait, says its
# backend is slower than its model (below it, a late first token is scheduling noise).
OVERDUE_SLACK_S = 0.25
# Below this many reused tokens a prompt's prefix is worth no detour from the best prediction (the
# shortest prefix a burst waits for: two blocks, ~64 tokens).
MIN_HOME_TOKENS = MIN_BURST_BLOCKS * BLOCK_CHARS / CHARS_PER_TOKEN
# The scores returned where no one reads them and no pick needed them (RouteContext.scored): not computed.
_UNSCORED = [math.nan]


class LatencyAware:
    name = "latency_aware"

    def __init__(self, exploration: float = 0.01, seed: int | None = None, learned: AliasMemory | None = None) -> None:
        """`learned`: the alias's reuse and arrivals as its strategy before a config reload knew them."""
        self.exploration = exploration
        self._rng = random.Random(seed)
        # How often this alias's prompts find a prefix cached, and how much of them: the expected worth
        # of placing a new prefix consistently (one tracker per alias: each alias has its own strategy).
        self.reuse = learned.reuse if learned is not None else ReuseTracker()
        # How often this alias's requests arrive: when the next one is expected.
        self.arrivals = learned.arrivals if learned is not None else ArrivalRate()

    def choose(self, candidates, ctx: RouteContext, turn: int):
        n = len(candidates)
        if ctx.prefix is not None and ctx.prefix.keys:
            ctx.cached = matches(candidates, ctx)
        elif ctx.cached is None:
            ctx.cached = {}
        gap = self.arrivals.gap(ctx.now) if n > 1 else None
        if ctx.explore:
            self.arrivals.observe(ctx.now)
        order = [(turn + k) % n for k in range(n)]
        # A backend never timed holds a GPU's prior and is ranked as good as the best measured one. If a
        # stream there has waited over SLOWER_HOME times its predicted wait for a first token, it is at
        # least that much slower than that: censored evidence, known before any answer teaches the
        # model. Its score is scaled by it. (_untimed_lag, inline: a timed backend's lag is 1.0.)
        lags = [1.0] * n
        hopeless: list[bool] | None = None  # late past the rate shown for certain somewhere (below)
        timed = measured = True
        for i, c in enumerate(candidates):
            m = c.model
            if not m.prefill.samples:
                timed = False
                lags[i] = c.book.overdue(ctx.now, OVERDUE_SLACK_S)
            elif m.tpot_base.samples < 2:  # PredictedLatency's _measured
                measured = False
        if not timed and any(lag >= SLOWER_HOME for lag in lags):
            # Judged against how late first tokens are where they were seen: a first token that came
            # anywhere, a timed candidate's prefill over the prior's (the prior may be a GPU's for all).
            # Judged against the prior alone, a CPU server computing a shared prompt read as 10-40x late
            # beside a timed server just as slow, or beside an idle one never tried, and the prompt's
            # siblings went cold to the other: on two real llama.cpp servers (four shared prompts, two
            # slots each) every collapsed run had prompts placed on both servers this way in its first
            # seconds, three or four prompts a server for two slots (issue 24; tests/routing/
            # test_latency_aware.py's test on a backend judged late beside timed ones).
            # Each is lateness against the prior: a timed candidate's book predicts from its learned model,
            # so its first tokens come on time (~1.0) and say nothing of the prior; its prefill does. A
            # candidate never timed counts its first tokens and, with streams in flight, how late they are
            # so far (censored: at least that late, 1.0 when on time). Judged against a timed server's own
            # first tokens, a never-timed one read as 27x late for a sibling waiting on a copy it was
            # computing; judged against nothing when every candidate was late, the one whose cold stream
            # started first read as the slower and a new prompt went to the other, whose two slots were
            # full (llama_sim --per-slot, four shared prompts: 10-16 cold prefills where 4 were needed).
            seen: list[float] = []
            proven: list[float] = []
            for c, lag in zip(candidates, lags):
                if (r := _proven_lag(c, ctx)) is not None:
                    seen.append(r)
                    proven.append(r)
                if not c.model.prefill.samples and c.book.streams:
                    seen.append(lag)
            if proven:
                # A copy's server HUNG_COPY times later than the rate shown for certain somewhere (a first
                # token that came, a prefill timed; not a wait still running) is no copy worth waiting
                # for. Held a sibling however late, a server that hung on a shared prompt before it was
                # ever timed drew that prompt's every sibling to wait for the first-token timeout (60 s),
                # where the other server had answered at the prior's rate (t31v's review of cd2095e).
                bar = HUNG_COPY * max(1.0, min(proven))
                hopeless = [lag >= bar for lag in lags]
            ref = max(1.0, min(seen, default=1.0))
            if ref > 1.0:
                lags = [lag / ref if lag > 1.0 else lag for lag in lags]
        matched = max([m.tokens for m in ctx.cached.values()], default=0.0)
        if ctx.explore and ctx.cached:  # a real placement, not a question (explain, the deadline check)
            self.reuse.observe(matched / ctx.prompt_tokens if ctx.prompt_tokens else 0.0, ctx.now, matched)
        estimates: list[Estimate] | None = None
        scores: list[float] | None = None
        bounds: list[float] | None = None
        complete: Callable[[], list[float]] | None = None
        keys: list[tuple[bool, bool, int, int, int]] | None = None  # before every candidate is timed: their load
        # Each placement's eviction charge (_evicting's; None: nothing charged), worked out once in the
        # decision and only where read (the timed scores, the load keys, the home, the hash margin): empty
        # until then. A timed decision adds it to its scores and the home and the margin read it again.
        charges: list[list[float] | None] = []
        if timed and measured and not ctx.scored and gap is not None:
            # No one reads the scores (the decision is not traced) and every candidate is measured (so none
            # is ranked as the best measured one: each score is its own): the pick needs every candidate's
            # prediction now, but the look-ahead's only where the delay it passes on could change the pick.
            estimates, raw = ranked(candidates, ctx)
            if (charged := self._charges(candidates, ctx, charges)) is not None:
                raw = [r + x for r, x in zip(raw, charged)]
            first, bounds, complete = first_passed_on(candidates, ctx, estimates, gap, raw, order)
        elif timed:
            estimates, scores = self._scores(candidates, ctx, gap, lags)
            if (charged := self._charges(candidates, ctx, charges)) is not None:
                scores = [s + x for s, x in zip(scores, charged)]
            first = min(order, key=scores.__getitem__)
        else:
            # A candidate whose prefill was never timed prices the prompts in flight at its prior (a GPU's
            # rate): on a CPU llama.cpp server a cold ~370-token prompt read as 0.12 s for 2-3 s, so the
            # first three requests of a run, sent before any answered, all went to one server while the
            # other stood idle. Until each candidate has been timed, fewer requests in flight go first.
            # Of those with as many in flight, the one holding more of the prompt (a sibling there computing
            # it) goes first: the prior prices a cold prefill elsewhere at 0.12 s and the wait for the
            # sibling at its whole answer, so a burst's third copy of a prompt went cold to the other
            # server (4.2 s, behind another cold prefill there) where the sibling's copy was 2.4 s away.
            # One with a stream seen far slower than predicted is ranked by its scaled score, after the rest
            # (when every one is, the scaled scores alone decide: in-flight counts say less than that).
            keys = self._load_keys(candidates, ctx, lags, hopeless, self._charges(candidates, ctx, charges))
            lowest = min(keys)
            if not ctx.scored and keys.count(lowest) == 1:
                # One candidate ranks first before any score is read, and no one reads the scores (the
                # decision is not traced): neither they nor the predictions behind them are computed (the
                # chosen backend's lease predicts its own request, as the ranking would have).
                first = keys.index(lowest)
            else:
                estimates, scores = self._scores(candidates, ctx, gap, lags)
                ranks = [(*key, score) for key, score in zip(keys, scores)]
                first = min(order, key=ranks.__getitem__)
        if (ctx.explore and n > 1 and self.exploration and self._rng.random() < self.exploration
                and not self._holds(candidates[first], ctx)):
            # Now and then the backend heard from least recently is tried (only an idle one, so exploring
            # never queues a request), so one that recovered gets measured again. Never with a prompt the
            # pick holds: tried elsewhere, it is prefilled cold there and, on a server whose cache is per
            # slot, pushes out another prompt, whose next request does the same (issue 24: on two real
            # llama.cpp servers, --cache-ram 0, four shared prompts in four slots, one such try 26 s into a
            # run took three cold prefills to settle). A prompt no backend holds explores as before, but
            # never to where it pushes another prompt out of a slot (_evicting charges it): a new prompt
            # tried on a server whose two slots held two others, while the pick had a free one, pushed one
            # out, and its next request went cold to the other server (two real llama.cpp servers,
            # --cache-ram 0, four shared prompts: the one extra cold prefill of a repeat, seed 59).
            if estimates is None:
                estimates = ranked(candidates, ctx)[0]
            idle = [i for i in range(n) if i != first and estimates[i].queue_s == 0.0]
            if idle and ctx.cached and (pushes := self._charges(candidates, ctx, charges)) is not None:
                idle = [i for i in idle if not pushes[i] > 0.0]
            if idle:
                return min(idle, key=lambda i: candidates[i].model.tpot_base.updated), scores or _UNSCORED * n
        if not ctx.cached or n == 1:
            return first, scores or _UNSCORED * n
        home = self._home(candidates, ctx, charges)
        if home is not None and (keys is None or keys[home][:4] == keys[first][:4]):
            # Before every candidate is timed, the home only if it ranks first by load (_load_keys): bounded
            # load counts requests, and a closed-loop burst's sixth request, a new prompt, went to its home
            # within its 1.25x share (4 of 6 in flight), which computed a prompt two siblings waited for,
            # rather than to the server computing one that one sibling waited for: three first tokens 2.6 s
            # later where two would have been (two llama.cpp servers, 6 clients on 4 shared prompts). On
            # llama_sim's closed loop the burst's mean TTFT fell 2-4 %; the margin's hash below is left as
            # it was (restricted to the first by load too, it cost 8 prompts on 8 clients 0.6 %).
            return home, scores or _UNSCORED * n
        if matched > 0 or not ctx.prefix:
            # Something is warm: its saving is already in the predictions.
            return first, scores or _UNSCORED * n
        # A prefix no one holds: its hashed backend, if that costs at most the expected saving.
        c = candidates[first]
        margin = self._margin(c, ctx)
        if margin <= 0.0 or (ctx.prefix_policy is not None and not ctx.prefix_policy.consistent_hashing):
            return first, scores or _UNSCORED * n
        group = ctx.prefix.group
        hashed = [rendezvous(group, x.name) for x in candidates]
        if bounds is not None and complete is not None:
            # The pick is the first candidate, in hash order, whose score is within the margin of the best:
            # those whose bounds are over it are not, and the first candidate is (first_passed_on's bounds).
            if math.isfinite(cutoff := bounds[first] + margin):
                for i in sorted(range(n), key=lambda i: (-hashed[i], i)):
                    if i == first:
                        return first, _UNSCORED * n
                    if not bounds[i] > cutoff:
                        break  # it may be within: every score decides
            scores = complete()
        elif scores is None:
            scores = self._scores(candidates, ctx, gap, lags)[1]  # untimed, ranked by load: as if read
        best = scores[first]
        # Where some candidates are timed and others still priced at the prior (a GPU's rate), their scores
        # are not alike: the margin reaches only those ranked first by load, as the pick did (_load_keys).
        # Compared so, an untimed server computing three cold prompts read 1.5 s against an idle timed one's
        # 2.3 s, and a new prompt went to it, a third prompt for its two slots (issue 24, llama_sim
        # --per-slot). Where none is timed (a burst's start) the scores are alike and the margin holds:
        # restricted there too, eight prompts on eight closed-loop clients waited 1.5 % longer.
        load = keys if keys is not None and any(c.model.prefill.samples for c in candidates) else None
        needless = self._pushes_out_needlessly(candidates, ctx, charges)
        within = [i for i in range(n) if scores[i] <= best + margin and (load is None or load[i][:4] == load[first][:4])
                  and not needless[i]]
        return max(within or [first], key=hashed.__getitem__), scores

    @staticmethod
    def _holds(c, ctx: RouteContext) -> bool:
        """Whether `c` is believed to hold a prefix of the prompt worth waiting for (a burst's shortest)."""
        held = ctx.cached.get(c.name) if ctx.cached else None
        return held is not None and held.blocks >= MIN_BURST_BLOCKS

    def _evicting(self, candidates, ctx: RouteContext) -> list[float] | None:
        """Each placement's charge for the prompt it pushes out of a slot, to add to its score (None where
        no placement is charged): on a server whose cache belongs to a slot and whose published slots all
        hold copies of other prompts (the prefix index's, app/routing/prefix_index.py), a prompt it does
        not hold takes one of them, and the prompt there is computed again when it next comes. That is
        priced as this prompt's prefill there (the evicted one is like it), whole where the prompt pushed
        out has come more than once, else times the share of recent requests that found a prefix cached;
        and only while this alias's prompts repeat a prefix worth keeping.

        Unpriced, a busy warm server shed its prompt to the other, whose two slots held two others: on
        two real llama.cpp servers (--cache-ram 0, four shared prompts at 1.0 req/s) the sibling went
        cold there, pushed one of them out, and that one's next request did the same the other way: all
        four prompts on both servers, 13-43 % of prompt tokens cached where a partition held ~83 %
        (issue 24). A new prompt, which every server computes cold, goes where a slot is free of others."""
        if not ctx.cached or not ctx.prefix or not ctx.prefix.keys or not self._prefixes_repeat(ctx.now):
            return None
        share, first = self.reuse.expected_share(ctx.now), ctx.prefix.keys[0]
        out: list[float] | None = None
        bound = [_slots_bound(c) for c in candidates]
        held_elsewhere = any(m.blocks >= MIN_BURST_BLOCKS for m in ctx.cached.values())
        for i, c in enumerate(candidates):
            m = c.model
            if not bound[i]:
                continue
            held = ctx.cached.get(c.name)
            if held is not None and held.blocks >= MIN_BURST_BLOCKS:
                continue
            besides = c.prefixes.copies_besides(first)
            if besides < m.slots:
                # A slot free of other prompts takes it, and pushes nothing out now. But a second copy of a
                # prompt held elsewhere, in the last slot free anywhere, leaves the next prompt no one holds
                # to push one out: charged as a prompt that may come again (the reuse share). Uncharged, a
                # sibling of a prompt whose copy was busy took the other server's last free slot whenever
                # that was a little sooner than the wait, a fifth copy of four prompts in four slots, and the
                # next new prompt pushed one out (llama_sim --per-slot, four shared prompts: the first extra
                # cold prefill of 31 of the 72 seeds that made more than 4).
                if (held_elsewhere and besides + 1 >= m.slots
                        and all(b and (x is c or x.prefixes.copies_besides(None) >= x.model.slots)
                                for b, x in zip(bound, candidates))):
                    if out is None:
                        out = [0.0] * len(candidates)
                    out[i] = share * m.prefill_s(ctx.prompt_tokens, ctx.now)
                continue
            gone = c.prefixes.pushed_out(first)
            # A prompt that came more than once comes again: its next request computes it cold.
            again = 1.0 if gone is not None and any(x.prefixes.repeated(gone) for x in candidates) else share
            if gone is not None and (waiting := c.prefixes.waiting_for(gone)):
                # With every slot running, llama.cpp gives this request the first to free: the copy's there.
                # Siblings the gateway holds for that copy are sent when it frees, find it gone, and each
                # computes it cold (a prefill each, certain) and pushes out another prompt in turn (the
                # charge above). Counted as one push-out whatever waited, a new prompt sent to a full
                # llama.cpp server took the slot of a copy with a sibling about to be released there, and
                # 15 cold prefills followed where 4 were needed (issue 24, two servers, --cache-ram 0).
                again += waiting
            # (Priced at the alias's reuse share, the charge fell as prompts spread and fewer requests
            # found theirs, and spread them further: four shared prompts on llama_sim --per-slot
            # at 1.0 req/s, 50 of 200 seeds made 12 or more cold prefills where 4 were needed.)
            if out is None:
                out = [0.0] * len(candidates)
            out[i] = again * m.prefill_s(ctx.prompt_tokens, ctx.now)
        return out

    def _charges(self, candidates, ctx: RouteContext, memo: list[list[float] | None]) -> list[float] | None:
        """Each placement's eviction charge (`_evicting`'s), kept in `memo` for the rest of the decision:
        nothing it reads changes within one (the index, the reuse share, the instant)."""
        if not memo:
            memo.append(self._evicting(candidates, ctx))
        return memo[0]

    def _pushes_out_needlessly(self, candidates, ctx: RouteContext, memo: list[list[float] | None]) -> list[bool]:
        """For each candidate, whether placing the prompt there pushes a prompt out of a slot (`_evicting`
        charges it) where another candidate has room for it. Consistent placement (the home, the hash
        margin) is worth the reuse it expects; a prompt pushed out that repeats is a cold prefill certain
        to come. Unchecked, a new prompt went to its home, a full two-slot server, past an idle slot on the
        other, and the prompt it pushed out went cold the other way when it next came (llama_sim
        --per-slot, four shared prompts in four slots)."""
        charges = self._charges(candidates, ctx, memo)
        if charges is None:
            return [False] * len(candidates)
        room = min(charges) == 0.0
        return [room and charge > 0.0 for charge in charges]

    def _margin(self, c, ctx: RouteContext) -> float:
        """What placing a prompt no candidate holds at its hash may cost over `c`'s prediction: the share
        of recent prompts found cached times this prompt's prefill on `c`, while the recent reuse is a
        prefix worth keeping in one place (a mean over MIN_HOME_TOKENS per request); else nothing (a chat
        template's first tokens, held by every backend, reported reused on every unique prompt)."""
        if not self._prefixes_repeat(ctx.now):
            return 0.0
        return self.reuse.expected_share(ctx.now) * c.model.prefill_s(ctx.prompt_tokens, ctx.now)

    def _prefixes_repeat(self, now: float) -> bool:
        """This alias's prompts repeat a prefix worth keeping in one place: a recent mean of reused tokens
        per request over a burst's shortest prefix, more than a chat template's head every backend holds."""
        return self.reuse.expected_tokens(now) >= MIN_HOME_TOKENS

    @staticmethod
    def _scores(candidates, ctx: RouteContext, gap: float | None, lags: list[float]) -> tuple[list[Estimate], list[float]]:
        """Every candidate's estimate (kept on `ctx` for the lease) and score: its predicted latency, plus
        the delay it passes on to the next arrival expected `gap` from now, plus the stall it imposes on
        the decodes running there; a candidate not yet measured as good as the best measured one; one
        never timed whose streams lag (`lags`, over SLOWER_HOME) scaled by that lag."""
        estimates, raw = ranked(candidates, ctx)
        if gap is not None:
            # Each placement is also charged what the next arrival would be offered after it
            # (app/routing/lookahead.py): the delay it passes on, not only its own.
            raw = [r + delay for r, delay in zip(raw, passed_on(candidates, ctx, estimates, gap))]
        # And the stall it imposes on the decodes running there, where a prefill stops them (lookahead.py).
        raw = [r + imposed(c, ctx, e) if c.stalls_decodes else r for r, c, e in zip(raw, candidates, estimates)]
        scores = PredictedLatency._unmeasured_as_best(candidates, raw)
        for i, lag in enumerate(lags):
            if lag >= SLOWER_HOME:
                scores[i] *= lag
        return estimates, scores

    @staticmethod
    def _load_keys(candidates, ctx: RouteContext, lags: list[float], hopeless: list[bool] | None = None,
                   charges: list[float] | None = None) -> list[tuple[bool, bool, int, int, int]]:
        """Each candidate's rank before its score, while some candidate was never timed: lagging ones
        last, then, among either, those where the placement pushes a prompt out of a slot or takes the
        fleet's last free one (`charges`, _evicting's); lagging ones then by their scaled scores alone, the
        rest by the prefills each placement leaves running there, then the most blocks of the prompt held. A placement
        where the prompt's prefix is held adds no prefill there, whether a sibling is still computing it or
        it is settled (a warm prompt's prefill is its question's few tokens).

        The charge goes ahead of the load count: before every backend is timed the scores are the prior's
        (a GPU's rate) and cannot weigh a prompt pushed out against a wait, so ranked by requests in
        flight a sibling whose prompt's server ran both slots went cold to an idle server whose two slots
        held two other prompts, and pushed one out, whose next request did the same (llama_sim --per-slot,
        four shared prompts, 200 seeds: the first extra cold prefill of 30 of the 55 seeds over 4; with the
        charge first, seeds at 4 cold prefills 144 -> 172, mean TTFT 0.781 -> 0.756 s)."""
        cached = ctx.cached or {}
        keys = []
        for i, (c, lag) in enumerate(zip(candidates, lags)):
            held = cached.get(c.name)
            blocks = held.blocks if held is not None else 0
            pushes = charges is not None and charges[i] > 0.0
            if lag >= SLOWER_HOME and (blocks < MIN_BURST_BLOCKS or (hopeless is not None and hopeless[i])):
                # Not where it holds the prompt: there the late stream is (or waits for) the copy this
                # request would share, not a prefill it adds, and elsewhere it is computed again at a rate
                # no one has seen either. Ranked last, a sibling of a prompt computed for 0.7 s on a server
                # never timed went cold to the other one, and the prompt was held on both (llama_sim
                # --per-slot, four shared prompts: the first extra cold prefill of 19 of 24 collapsed seeds
                # came before both servers were timed).
                keys.append((True, pushes, 0, 0, 0))
                continue
            # Counted are the prefills each placement leaves running there: a request held back for
            # a sibling's copy of its prefix computes none, and neither does this one where a sibling
            # is computing its prompt (it waits for that copy). Ranked by requests in flight, a burst's
            # second request for a prompt went cold to the other server: two prompts prefilled on both
            # (6 clients, 4 prompts of ~680 tokens, two llama.cpp servers: 6 cold prefills where 4
            # were needed, the other server's own cold prompt slowed from ~7.5 s to 15 s).
            # Settled copies count alike: with lags judged against the lateness seen (above), a backend
            # holding the prompt with two in flight and a cold one with one tied on load, and the warm
            # one lost to the cold one's prefill of the same prompt (the pinned real scenario in the test
            # on a stream long past its predicted first token).
            holds = blocks >= MIN_BURST_BLOCKS
            # Of placements leaving as many prefills running, the one whose cold prefill delays fewer first
            # tokens goes first: each prefill there, and each sibling held back for one of their copies,
            # waits for it too (one thread's compute is shared). Where it holds the prompt it delays none.
            keys.append((False, pushes, c.inflight - c.copy_waiters + (not holds), 0 if holds else c.prefilling, -blocks))
        return keys

    def _home(self, candidates, ctx: RouteContext, charges: list[list[float] | None]) -> int | None:
        """The candidate the prompt's prefix group hashes to, if affinity should hold there: this alias's
        prompts repeat a prefix worth keeping, no candidate is known to hold more of this one, and the
        home is within its bounded share of the requests in flight. None: the lowest prediction decides."""
        if ctx.prefix is None or not ctx.prefix.keys or ctx.cached is None:
            return None
        if ctx.prefix_policy is not None and not ctx.prefix_policy.consistent_hashing:
            return None
        if not self._prefixes_repeat(ctx.now):
            return None
        blocks = [ctx.cached[c.name].blocks for c in candidates]
        most = max(blocks)
        if most and blocks.count(most) > 1:
            # Two candidates hold as much of it as anyone (the home among them, or the home holds less):
            # the prefix stays held wherever this request goes, so affinity keeps nothing and the
            # predictions decide. (Three shared prompts on two llama.cpp servers all hashed to one home:
            # once the other server held them too, bounded load still sent it 44 of 52 requests, which
            # queued behind each other's cold prefills there: 366 ms mean warm TTFT against
            # least_inflight's 145.) Known before any hashing.
            return None
        n, group = len(candidates), ctx.prefix.group
        home = max(range(n), key=lambda i: rendezvous(group, candidates[i].name))
        at_home = ctx.cached[candidates[home].name]
        held = at_home.blocks
        if held < most:
            # Another candidate is known to hold more of the prompt.
            return None
        if held and at_home.leader is not None:
            # The home's copy of the prefix is busy (being prefilled, or in a running request's slot on
            # llama.cpp): whether to wait for it or compute it elsewhere is the predictions' question.
            return None
        if self._clearly_worse(candidates, home, ctx.now):
            return None
        if self._pushes_out_needlessly(candidates, ctx, charges)[home]:
            return None
        # Its bounded share of the requests in flight, the one being placed included, rounded up to a
        # whole request; and of the uncached prompt tokens in flight (a long prefill backlog, which a
        # count of requests hides), rounded up by this prompt's tokens alike.
        c = candidates[home]
        requests = sum(x.inflight for x in candidates) + 1
        if c.inflight + 1 > math.ceil(BALANCE_FACTOR * requests / n):
            return None
        own = max(0.0, ctx.prompt_tokens - ctx.cached[c.name].tokens)
        tokens = sum(x.uncached_inflight for x in candidates) + own
        if c.uncached_inflight + own > BALANCE_FACTOR * tokens / n + ctx.prompt_tokens:
            return None
        return home

    @staticmethod
    def _clearly_worse(candidates, home: int, now: float) -> bool:
        """Whether the home's time per output token at batch 1, times its failure penalty, is over
        SLOWER_HOME times the quickest measured candidate's (unmeasured ones say nothing yet), or, never
        timed, a stream there has waited over SLOWER_HOME times its predicted first token."""

        def cost(c) -> float:
            return c.model.tpot(1, now) * failure_penalty(c, now)

        measured = [c for c in candidates if c.model.decode.samples]
        c = candidates[home]
        if _untimed_lag(c, now) >= SLOWER_HOME:
            # Never timed, and a stream there has waited over SLOWER_HOME times its predicted first token:
            # whatever its prior says, it is the worse server for now.
            return True
        if c not in measured:
            return failure_penalty(c, now) > SLOWER_HOME
        return cost(c) > SLOWER_HOME * min(cost(x) for x in measured)


def _slots_bound(c) -> bool:
    """Whether `c`'s prompt cache belongs to its published slots (llama.cpp --cache-ram 0): a prompt it
    computes takes a slot, and one pushed out of it is gone."""
    m = c.model
    return m.slots_source == "reported" and bool(m.slots) and c.prefixes.slot_bound and slot_scoped_cache(c)


def _proven_lag(c, ctx: RouteContext) -> float | None:
    """How many times the prior's time `c` is known for certain to take for a first token: a timed
    backend's prefill of this prompt over the prior's, else the least late of the first tokens that came
    there (None: none came, and none was timed). Never a wait still running: that is only a lower bound."""
    if c.model.prefill.samples:
        t = max(ctx.prompt_tokens, 1)
        return float(c.model.prefill_s(t, ctx.now) * c.model.prior.prefill_tokens_per_s / t)
    return c.book.first_token_lag()


def _untimed_lag(c, now: float) -> float:
    """On a backend whose prefill was never timed, how many times longer than predicted its latest-running
    stream has waited for its first token (1.0: timed, or nothing late; see InflightBook.overdue). Once
    timed, the model itself has the evidence, and a first token a little late is left to it."""
    return 1.0 if c.model.prefill.samples else c.book.overdue(now, OVERDUE_SLACK_S)
