"""The router spreads load, never exceeds a backend's concurrency, and queues fairly when full."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field

import pytest

from app.config import BackendConfig, BreakerConfig, ModelAlias
from app.errors import FirstTokenTimeout, Overloaded, UpstreamStatus
from app.routing.context import RouteContext
from app.routing.health import BreakerState
from app.routing.output_length import shape_of
from app.routing.prefix_index import prompt_blocks
from app.routing.router import Router
from app.routing.token_ratio import TokenRatio
from app.upstream.adapters.llamacpp import LlamaCppAdapter
from app.upstream.adapters.report import ServerLoad


@dataclass
class FakeBackend:
    # The router reads the name and the configuration (a real one): no network needed for its logic.
    name: str
    config: BackendConfig


def router(caps: dict[str, int], strategy: str = "least_inflight", timeout: float = 1.0) -> Router:
    backends = {n: FakeBackend(n, BackendConfig(base_url="http://127.0.0.1:1/v1", model="m", max_concurrency=c))
                for n, c in caps.items()}
    return Router(backends, {"m": ModelAlias(backends=tuple(caps), strategy=strategy)}, timeout)


def test_least_inflight_spreads_over_idle_backends():
    async def main():
        r = router({"a": 10, "b": 10, "c": 10})
        for _ in range(6):
            await r.acquire("m")
        return sorted(s.inflight for s in r.states.values())

    assert asyncio.run(main()) == [2, 2, 2]


def test_round_robin_cycles():
    async def main():
        r = router({"a": 10, "b": 10}, "round_robin")
        names = []
        for _ in range(4):
            lease = await r.acquire("m")
            names.append(lease.backend.name)
            lease.release()
        return names

    names = asyncio.run(main())
    assert names[0] != names[1] and names[0] == names[2] and names[1] == names[3]


def test_full_backends_queue_fifo_and_hand_over_slots():
    async def main():
        r = router({"a": 1})
        first = await r.acquire("m")
        order = []

        async def waiter(i):
            lease = await r.acquire("m")
            order.append(i)
            await asyncio.sleep(0)
            lease.release()

        tasks = [asyncio.create_task(waiter(i)) for i in range(3)]
        await asyncio.sleep(0.01)
        assert r.queued == 3 and r.states["a"].inflight == 1
        first.release()
        await asyncio.gather(*tasks)
        return order, r.states["a"].inflight

    order, inflight = asyncio.run(main())
    assert order == [0, 1, 2]
    assert inflight == 0


def test_every_lease_counts_as_a_request_sent_to_its_backend_queued_or_not():
    # The learner asks whether any of ours was sent to a backend while one waited there (BackendState.sent).
    async def main():
        r = router({"a": 1, "b": 1})
        first, second = await r.acquire("m"), await r.acquire("m")
        queued = asyncio.create_task(r.acquire("m"))
        await asyncio.sleep(0.01)
        first.release()
        third = await queued  # handed the slot `first` gave back
        return {n: s.sent for n, s in r.states.items()}, first.state.name, second.state.name, third.state.name

    sent, a, b, c = asyncio.run(main())
    assert a != b and c == a
    assert sent == {a: 2, b: 1}


def test_queue_timeout_is_overloaded_503():
    async def main():
        r = router({"a": 1}, timeout=0.05)
        await r.acquire("m")
        with pytest.raises(Overloaded) as exc:
            await r.acquire("m")
        return exc.value

    err = asyncio.run(main())
    assert err.status == 503 and err.headers["retry-after"]


def test_cancelled_waiter_leaks_no_slot():
    async def main():
        r = router({"a": 1})
        first = await r.acquire("m")
        t = asyncio.create_task(r.acquire("m"))
        await asyncio.sleep(0.01)
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)
        first.release()
        return r.states["a"].inflight, r.queued

    assert asyncio.run(main()) == (0, 0)


def test_release_is_idempotent():
    async def main():
        r = router({"a": 2})
        lease = await r.acquire("m")
        lease.release()
        lease.release()
        return r.states["a"].inflight

    assert asyncio.run(main()) == 0


def test_one_decision_for_dispatch_deadline_check_and_explain():
    from app.routing.context import RouteContext

    async def main():
        r = router({"a": 10, "b": 10}, "predicted_latency")
        slow, fast = r.states["a"].model, r.states["b"].model
        for m, tpot in ((slow, 0.2), (fast, 0.01)):
            for _ in range(3):
                m.observe_decode(41, 40 * tpot, 1)
        r._aliases["m"].strategy.exploration = 1.0  # dispatch may explore; asking never does
        asked = [r.decide("m", RouteContext(max_tokens=50)) for _ in range(20)]
        assert {c.state.name for c in asked} == {"b"}
        assert asked[0].predicted_s < r.decide("m", RouteContext(max_tokens=50), avoid={"b"}).predicted_s
        r._aliases["m"].strategy.exploration = 0.0
        lease = await r.acquire("m", ctx=RouteContext(max_tokens=50))
        assert lease.state.name == asked[0].state.name

    asyncio.run(main())


@dataclass
class LlamaBackend(FakeBackend):
    # llama.cpp's adapter: its prompt cache belongs to the slot that computed a prompt.
    adapter: object = field(default_factory=LlamaCppAdapter)


def _one_llama_backend_and_a_long_prompt():
    """A router over one llama.cpp backend, and a context maker for a prompt long enough to hold a prefix."""
    blocks = prompt_blocks("system: You are the billing assistant; cite the policy. " * 30 + "user: hi")
    backends = {"a": LlamaBackend("a", BackendConfig(base_url="http://127.0.0.1:1/v1", model="m", flavor="llamacpp"))}

    def ctx() -> RouteContext:
        return RouteContext(stream=True, prompt_tokens=round(blocks.tokens), max_tokens=20, prefix=blocks, cached={})

    return blocks, ctx, Router(backends, {"m": ModelAlias(backends=("a",), strategy="latency_aware")}, 1.0)


def test_a_llama_cpp_lease_holds_its_prompts_copy_until_released():
    # Scripted, no server: the prefix is computed once (the first lease), then each later request on the
    # same backend finds that one copy in use while a lease holds it, and waits for it rather than
    # being counted warm and prefilled cold in another slot.
    _, ctx, r = _one_llama_backend_and_a_long_prompt()

    async def main():
        (await r.acquire("m", ctx=ctx())).release()  # computed it; its slot holds it, free now
        first = await r.acquire("m", ctx=ctx())
        assert first.prefix.blocks > 2 and first.prefix.leader is None and not first.burst_wait_s
        second = await r.acquire("m", ctx=ctx())
        assert second.prefix.leader is not None and second.burst_wait_s > 0
        first.release()
        third = await r.acquire("m", ctx=ctx())  # the second took the copy over: in use again
        assert third.prefix.leader is not None
        second.release()
        third.release()
        assert (await r.acquire("m", ctx=ctx())).prefix.leader is None

    asyncio.run(main())


def test_a_sibling_waits_past_its_limit_while_the_copy_is_still_being_prefilled():
    # Scripted, no server: the first request is computing the prefix (no first token yet). A sibling's
    # wait does not end at its limit meanwhile (sent then, it would prefill the same prompt beside the
    # first, on the same compute); once the first token is out, the limit counts, and the copy freeing
    # (the first request's end, on llama.cpp) ends the wait.
    _, ctx, r = _one_llama_backend_and_a_long_prompt()

    async def main():
        first = await r.acquire("m", ctx=ctx())
        second = await r.acquire("m", ctx=ctx())
        assert second.prefix.leader is not None and second.burst_wait_s > 0
        waiting = asyncio.ensure_future(second.wait_for_prefix(0.05))
        await asyncio.sleep(0.15)
        assert not waiting.done()  # past its limit, the copy still being computed
        first.prefilled()
        first.first_token()
        await asyncio.sleep(0.01)
        assert not waiting.done()  # computed, in the first request's slot until it ends
        first.release()
        done = await waiting
        assert 0.15 < done.waited_s < 0.3 and done.outcome == "ready" and not done.reroute
        second.release()

    asyncio.run(main())


def test_a_sibling_waits_for_a_computed_copy_as_long_as_the_copy_took_to_compute():
    # Scripted, no server. Once the copy is computed, the wait for it to be free is bounded by the limit
    # priced at placement (there the prior's, ~0.1 s for a cold prompt on a backend never timed) or by
    # what the copy itself took to compute plus the burst margin, whichever is longer: sent past it, on
    # a llama.cpp server it is computed cold in whichever slot frees first and pushes the prompt there out
    # (issue 24: two real servers, --cache-ram 0, four shared prompts; a sibling held 2 s past a copy that
    # took 3.7 s took the slot of another prompt, and three more cold prefills followed).
    from app.config import PrefixPolicy

    _, make, r = _one_llama_backend_and_a_long_prompt()

    def ctx() -> RouteContext:
        c = make()
        c.prefix_policy = PrefixPolicy(burst_wait_ms=10)  # a 10 ms margin: the copy's time decides
        return c

    async def main():
        for took, ends in ((0.3, "ready"), (0.01, "limit")):
            first = await r.acquire("m", ctx=ctx())
            second = await r.acquire("m", ctx=ctx())
            waiting = asyncio.ensure_future(second.wait_for_prefix(0.05))
            await asyncio.sleep(took)
            first.prefilled()
            first.first_token()
            await asyncio.sleep(0.15)  # past the 0.05 s limit
            if took > 0.15:  # took 0.3 s to compute: waits up to 0.31 s more for it to be free
                assert not waiting.done()
                first.release()
                done = await waiting
                assert done.outcome == "ready" and took + 0.15 <= done.waited_s < took + 0.25
            else:  # computed at once: the limit priced at placement bounds the wait
                done = await waiting
                assert done.outcome == "limit" and took + 0.04 < done.waited_s < took + 0.1
                first.release()
            second.release()

    asyncio.run(main())


def test_a_copy_took_as_long_to_compute_as_its_first_token_came_whenever_its_request_ends():
    # Scripted, no server. On llama.cpp a copy is computed at its request's first token and freed at its
    # end: the end, or a failure after the first token, does not move when it was computed, which bounds
    # a sibling's wait for it (Lease.hold_limit). A copy lost before its first token was never computed.
    _, ctx, r = _one_llama_backend_and_a_long_prompt()

    async def main():
        for failed in (False, True):
            first = await r.acquire("m", ctx=ctx())
            second = await r.acquire("m", ctx=ctx())
            await asyncio.sleep(0.2)
            first.prefilled()
            first.first_token()
            computed = second.hold_limit(0.0)
            assert computed >= 0.2
            await asyncio.sleep(0.3)
            first.release(failed=failed)
            assert second.hold_limit(0.0) == computed, failed
            second.release()
        first = await r.acquire("m", ctx=ctx())
        second = await r.acquire("m", ctx=ctx())
        await asyncio.sleep(0.2)
        first.release(failed=True)  # before its first token: nothing computed, so no time to hold by
        assert second.hold_limit(0.0) == 0.0
        second.release()

    asyncio.run(main())


def test_a_sibling_waiting_for_a_copy_being_prefilled_keeps_the_deadline():
    _, ctx, r = _one_llama_backend_and_a_long_prompt()

    async def main():
        first = await r.acquire("m", ctx=ctx())
        second = await r.acquire("m", ctx=ctx())
        assert 0.08 < (await second.wait_for_prefix(0.05, cap_s=0.1)).waited_s < 0.2
        # A JSON sibling says nothing before its end: the limit alone bounds the wait for its copy.
        json = RouteContext(stream=False, prompt_tokens=ctx().prompt_tokens, max_tokens=20, prefix=ctx().prefix, cached={})
        for lease in (first, second):
            lease.release()
        leader = await r.acquire("m", ctx=json)
        sibling = await r.acquire("m", ctx=ctx())
        assert sibling.prefix.leader is not None
        assert 0.04 < (await sibling.wait_for_prefix(0.05)).waited_s < 0.1
        for lease in (leader, sibling):
            lease.release()

    asyncio.run(main())


def test_a_sibling_whose_deadline_leaves_no_time_to_wait_for_a_busy_copy_ends_at_the_limit():
    # Scripted, no server: the copy is computed and still in its request's slot. A deadline with no time
    # left (a cap of zero, or a limit the dispatch loop capped to zero) sends the sibling at once: the copy
    # is busy, so the wait ended at its limit, not with the copy ready.
    _, ctx, r = _one_llama_backend_and_a_long_prompt()

    async def main():
        first = await r.acquire("m", ctx=ctx())
        second = await r.acquire("m", ctx=ctx())
        first.prefilled()
        first.first_token()
        for limit, cap in ((1.0, 0.0), (0.0, 5.0)):
            done = await second.wait_for_prefix(limit, cap_s=cap)
            assert done.outcome == "limit" and done.waited_s < 0.05 and not done.reroute, (limit, cap, done)
        first.release()
        assert (await second.wait_for_prefix(0.0)).outcome == "ready"  # free now: nothing to wait for
        second.release()

    asyncio.run(main())


def test_a_request_held_for_a_siblings_copy_is_not_ahead_of_one_sent_now():
    # Scripted, no server. llama.cpp queues what it is sent, in order, for the first slot to free; a
    # request the gateway holds back for a sibling's copy of its prefix (Lease.wait_for_prefix) is not
    # there yet, so a request sent now takes that slot ahead of it. Counted ahead, four held siblings
    # priced a new prompt's wait on a full llama.cpp server at 9.8 s where it waited 3.9 s (issue 24).
    from app.routing.predict import estimate

    backends = {"a": LlamaBackend("a", BackendConfig(base_url="http://127.0.0.1:1/v1", model="m", flavor="llamacpp"))}
    r = Router(backends, {"m": ModelAlias(backends=("a",), strategy="latency_aware")}, 1.0)
    state = r.states["a"]
    state.model.set_reported_slots(2)
    for tokens in (300, 600):  # timed: a CPU server's ~5 ms a token
        state.model.observe_prefill(tokens, tokens * 0.005)

    def ctx(policy: str) -> RouteContext:
        blocks = prompt_blocks(f"system: {policy} " * 30 + "user: hi")
        return RouteContext(stream=True, prompt_tokens=round(blocks.tokens), max_tokens=20, prefix=blocks, cached={})

    async def main():
        running = [await r.acquire("m", ctx=ctx(p)) for p in ("Cite the refund policy.", "Cite the fee policy.")]
        for lease in running:  # both slots decoding, each holding its prompt's copy
            lease.prefilled()
            lease.first_token()
        now = time.monotonic()
        new = ctx("Cite the tax policy.")
        new.now = now
        alone = estimate(state, new).queue_s
        assert alone > 0  # it waits for the first slot to free
        held = await r.acquire("m", ctx=ctx("Cite the refund policy."))
        assert held.burst_wait_s > 0 and state.held_back == 1
        assert estimate(state, new).queue_s == alone
        held.sent_on()  # its hold is over: at the server, ahead of a request sent after it
        assert state.held_back == 0 and estimate(state, new).queue_s > alone
        for lease in (*running, held):
            lease.release()
        assert state.inflight == 0  # a hold already over leaves nothing of it to give back at the release

    asyncio.run(main())


def test_a_hold_for_a_siblings_copy_is_counted_until_it_ends_on_every_path():
    # Scripted, no server. BackendState.held_back is what the slot wait leaves out (not at the server yet):
    # a hold that ended and stayed counted priced every later request there as if a slot were free. It ends
    # when the wait does (the dispatch loop then sends the request, or routes it again), when the wait is
    # cancelled (its client left), and when the lease is given back without ever waiting.
    _, ctx, r = _one_llama_backend_and_a_long_prompt()
    state = r.states["a"]

    async def main():
        first = await r.acquire("m", ctx=ctx())
        held = [await r.acquire("m", ctx=ctx()) for _ in range(3)]
        assert all(lease.burst_wait_s for lease in held) and state.held_back == 3
        waiting = asyncio.ensure_future(held[0].wait_for_prefix(5.0))
        cancelled = asyncio.ensure_future(held[1].wait_for_prefix(5.0))
        await asyncio.sleep(0.02)
        cancelled.cancel()
        await asyncio.sleep(0)
        assert state.held_back == 2  # the wait cancelled: its lease is given back by its owner next
        held[2].release(failed=True)  # never waited (its client left first)
        assert state.held_back == 1
        first.prefilled()
        first.release()  # the copy is free: the wait ends and the request is sent
        assert (await waiting).outcome == "ready" and state.held_back == 0
        for lease in held:
            lease.release()
        assert state.held_back == 0

    asyncio.run(main())


def test_a_sibling_stops_waiting_at_once_when_the_copy_is_lost():
    # Scripted, no server: the first request ends before its first token. A sibling waiting for its copy
    # learns at that moment that nothing is coming, and whether the backend failed it (a timeout, a 5xx)
    # or the request just ended (its client left); the copy's blocks are forgotten, not counted as held.
    blocks, ctx, r = _one_llama_backend_and_a_long_prompt()

    async def main():
        for backend_failed in (True, False):
            first = await r.acquire("m", ctx=ctx())
            second = await r.acquire("m", ctx=ctx())
            waiting = asyncio.ensure_future(second.wait_for_prefix(0.05))
            await asyncio.sleep(0.1)
            assert not waiting.done()
            first.release(backend_failed=backend_failed, failed=True)
            done = await waiting
            assert done.outcome == "lost" and done.reroute and done.backend_failed is backend_failed
            assert done.waited_s < 0.15
            second.release()
            assert r.states["a"].prefixes.match(blocks.keys, time.monotonic())[0] == 0  # forgotten

    asyncio.run(main())


def test_a_json_copy_that_failed_is_lost_and_one_that_answered_is_not():
    _, ctx, r = _one_llama_backend_and_a_long_prompt()
    json = RouteContext(stream=False, prompt_tokens=ctx().prompt_tokens, max_tokens=20, prefix=ctx().prefix, cached={})

    async def main():
        for failed in (True, False):
            leader = await r.acquire("m", ctx=json)
            sibling = await r.acquire("m", ctx=ctx())
            waiting = asyncio.ensure_future(sibling.wait_for_prefix(1.0))
            await asyncio.sleep(0.02)
            leader.release(backend_failed=failed, failed=failed)
            done = await waiting
            assert done.outcome == ("lost" if failed else "ready"), done
            sibling.release()

    asyncio.run(main())


def test_a_sibling_waits_for_a_copy_on_a_timed_backend_only_until_it_is_far_overdue():
    # Scripted, no server: once the backend's prefill is timed, a copy far past its predicted first
    # token (twice its predicted time, and at least the sibling's limit past it) is taken for stuck: the
    # sibling ends its wait ("overdue") rather than waiting out the copy's first-token timeout. Untimed,
    # the prediction is only a prior, and the sibling waits on (the test above).
    _, ctx, r = _one_llama_backend_and_a_long_prompt()

    async def main():
        m = r.states["a"].model
        for tokens in (300, 600):
            m.observe_prefill(tokens, tokens * 0.0001)  # a quick server: the copy is predicted in ~0.1 s
        first = await r.acquire("m", ctx=ctx())
        second = await r.acquire("m", ctx=ctx())
        assert second.prefix.leader is not None and second.burst_wait_s > 0
        predicted = first.estimate.ttft_s
        limit = 0.05
        done = await second.wait_for_prefix(limit, cap_s=5.0)
        assert done.outcome == "overdue" and done.reroute and not done.backend_failed
        assert max(2 * predicted, predicted + limit) - 0.05 < done.waited_s < max(2 * predicted, predicted + limit) + 0.2
        for lease in (first, second):
            lease.release()

    asyncio.run(main())


def test_a_sibling_waiting_for_a_busy_copy_releases_it_when_predicted_not_a_cold_prefill_later():
    # Scripted, no server: on a llama.cpp backend the prefix's one copy is in a running request's slot;
    # a second request waits for it (its estimate counts that wait). The copy frees when the second
    # ends as predicted, not after its burst-wait limit (at least a cold prefill) and then its whole
    # predicted time again.
    blocks, ctx, r = _one_llama_backend_and_a_long_prompt()

    async def main():
        m = r.states["a"].model
        for tokens in (300, 600):  # timed: a CPU server's ~5 ms a token
            m.observe_prefill(tokens, tokens * 0.005)
        (await r.acquire("m", ctx=ctx())).release()  # computed it; its slot holds it, free now
        first = await r.acquire("m", ctx=ctx())
        sent = time.monotonic()
        second = await r.acquire("m", ctx=ctx())
        assert second.prefix.leader is not None and second.burst_wait_s > second.estimate.queue_s > 0
        # A third finds the copy free when the second is predicted to end (its estimate waits for the first).
        ready = r.states["a"].prefixes.match(blocks.keys, time.monotonic())[1]
        assert abs(ready - (sent + second.estimate.e2e_s)) < 0.05, (ready - sent, second.estimate, second.burst_wait_s)
        for lease in (first, second):
            lease.release()

    asyncio.run(main())


def test_the_deadline_check_and_hedging_hold_the_pick_to_its_predicted_end_with_its_stall():
    # Answers here stand still for neighbours' prefills (half the time a token takes). Routing ranks by
    # the end without that stall (the arrivals that cause it are charged for it where they are placed),
    # but the answer still ends later: the deadline check, the hedge's delay and /admin/route/explain
    # (RouteChoice.predicted_s) hold the pick to the end predicted for it, as the explained estimate says.
    from app.routing.predict import failure_penalty

    r = router({"a": 10}, "predicted_latency")
    state = r.states["a"]
    for _ in range(8):
        state.model.observe_decode(50, 49 * 0.03, load=1, stalled_s=49 * 0.01, batch=1)
    choice = r.decide("m", RouteContext(max_tokens=50))
    est = choice.estimate()
    assert est is not None and est.stall_s == pytest.approx(49 * 0.01, rel=0.01)
    assert choice.predicted_s == pytest.approx(est.e2e_s * failure_penalty(state, choice.ctx.now))
    # A stream ranked by its first token is held to that.
    first = r.decide("m", RouteContext(stream=True, max_tokens=50, stream_objective="ttft"))
    assert first.predicted_s == pytest.approx(first.estimate().ttft_s * failure_penalty(state, first.ctx.now))


def test_an_alias_may_set_its_strategys_exploration():
    from app.routing.router import make_strategy

    assert make_strategy("latency_aware").exploration == 0.01
    assert make_strategy("latency_aware", 0.0).exploration == 0.0
    assert make_strategy("predicted_latency", 0.1).exploration == 0.1
    assert make_strategy("least_inflight", 0.5).name == "least_inflight"  # explores nothing: ignored
    with pytest.raises(ValueError, match="exploration"):
        ModelAlias(backends=("a",), exploration=1.5)


def test_a_json_call_llama_cpp_serves_from_an_upstream_stream_is_booked_as_one_that_reports_its_first_token():
    # Scripted, no server. llama.cpp serves a JSON client's chat completion from an upstream stream
    # (app/dispatch/loop.py streams_upstream), so its first token is seen, as a stream's is: a sibling
    # waits for its copy of the prefix past its limit while it is being prefilled, and a first token
    # late against its prediction reads as overdue. A JSON call of a protocol that is not assembled from
    # a stream (the Responses API) says nothing before its end: the limit alone bounds a sibling's wait.
    _, ctx, r = _one_llama_backend_and_a_long_prompt()
    state = r.states["a"]

    def json(assembles: bool) -> RouteContext:
        c = ctx()
        return RouteContext(stream=False, prompt_tokens=c.prompt_tokens, max_tokens=20, prefix=c.prefix, cached={},
                            assembles=assembles)

    async def main():
        leader = await r.acquire("m", ctx=json(assembles=True))
        assert state.book.overdue(time.monotonic() + 3600, 1.0) > 1.0  # its first token is awaited
        sibling = await r.acquire("m", ctx=ctx())
        waiting = asyncio.ensure_future(sibling.wait_for_prefix(0.05))
        await asyncio.sleep(0.15)
        assert not waiting.done()  # past its limit, the copy still being computed
        leader.prefilled()
        leader.first_token()
        leader.release()
        assert (await waiting).outcome == "ready"
        sibling.release()

        unseen = await r.acquire("m", ctx=json(assembles=False))
        assert state.book.overdue(time.monotonic() + 3600, 1.0) == 1.0  # nothing to wait for
        sibling = await r.acquire("m", ctx=ctx())
        assert 0.04 < (await sibling.wait_for_prefix(0.05)).waited_s < 0.1
        for lease in (unseen, sibling):
            lease.release()

    asyncio.run(main())


def _one_slow_llama_backend() -> Router:
    """A router over one llama.cpp backend of one slot, timed at 50 prompt tokens a second (a 1000-token
    prompt prefills in ~20 s), ejected after two failures in a row."""
    backends = {"slow": LlamaBackend("slow", BackendConfig(base_url="http://127.0.0.1:1/v1", model="m", flavor="llamacpp",
                                                           max_concurrency=4))}
    r = Router(backends, {"m": ModelAlias(backends=("slow",), strategy="latency_aware")}, 1.0,
               BreakerConfig(consecutive_failures=2))
    r.learner.server_load("slow", ServerLoad(slots=1))
    for _ in range(6):
        r.states["slow"].model.observe_prefill(500, 10.0)
        r.states["slow"].model.observe_prefill(1000, 20.0)
    return r


def _long() -> RouteContext:
    return RouteContext(stream=True, prompt_tokens=1000, max_tokens=20)


def test_a_first_token_timeout_behind_a_queue_routing_booked_is_not_the_backend_failing():
    # Two long prompts on one slot: the second is predicted to wait ~40 s for its first token (the first's
    # prefill, then its own). It reaches a 60 s first-token timeout: slower than predicted, but the wait
    # it was priced at. Its backend's failure share and breaker stay as they were; counted as a failure,
    # the share would have scaled every score there again for the same queue.
    r = _one_slow_llama_backend()
    state = r.states["slow"]

    async def main():
        for _ in range(3):
            first, second = await r.acquire("m", ctx=_long()), await r.acquire("m", ctx=_long())
            assert second.estimate.queue_s > 15.0 and second.predicted_wait_s > 0.5 * 60.0
            first.release()
            r.report(first, None)
            second.release()
            assert r.report(second, FirstTokenTimeout("slow", 60.0)) is None

    asyncio.run(main())
    assert state.breaker.state is BreakerState.CLOSED
    share = state.model.failure_rate
    assert (share.samples, share.get(time.monotonic())) == (3, 0.0)  # the three answers; no failure


def test_a_first_token_timeout_far_beyond_its_prediction_still_ejects_a_hung_backend():
    # A short prompt on an idle backend is predicted ~0.4 s; nothing in 60 s is the backend hanging.
    r = _one_slow_llama_backend()
    state = r.states["slow"]

    async def main():
        changes = []
        for _ in range(2):
            lease = await r.acquire("m", ctx=RouteContext(stream=True, prompt_tokens=20, max_tokens=20))
            assert lease.predicted_wait_s < 1.0
            lease.release()
            changes.append(r.report(lease, FirstTokenTimeout("slow", 60.0)))
        return changes

    assert asyncio.run(main()) == [None, BreakerState.OPEN]
    assert state.model.failure_rate.get(time.monotonic()) == pytest.approx(1.0, abs=1e-3)


def test_priced_waits_between_failures_do_not_shield_a_backend_from_ejection():
    # A backend failing with 5xx between timeouts behind its queue: the priced waits count for nothing,
    # neither as failures nor as answers that would reset the run of failures.
    r = _one_slow_llama_backend()
    state = r.states["slow"]

    async def main():
        changes = []
        for _ in range(2):
            first, second = await r.acquire("m", ctx=_long()), await r.acquire("m", ctx=_long())
            first.release()
            second.release()
            changes.append(r.report(second, FirstTokenTimeout("slow", 60.0)))
            changes.append(r.report(first, UpstreamStatus("broken", status=500)))
        return changes

    assert asyncio.run(main()) == [None, None, None, BreakerState.OPEN]
    share = state.model.failure_rate
    assert (share.samples, share.get(time.monotonic())) == (2, pytest.approx(1.0, abs=1e-3))  # the two 5xx alone


def test_a_request_held_for_a_siblings_copy_is_predicted_to_wait_that_much_less_from_its_send():
    # The estimate runs from the placement; a first-token timeout runs from the send. A request held at
    # the gateway for a sibling's copy of its prefix spent part of its predicted wait there.
    _, ctx, r = _one_llama_backend_and_a_long_prompt()

    async def main():
        (await r.acquire("m", ctx=ctx())).release()
        first = await r.acquire("m", ctx=ctx())
        second = await r.acquire("m", ctx=ctx())
        assert second.burst_wait_s > 0 and second.held_s == 0.0
        second.estimate.ttft_s = 5.0  # as if the copy were predicted a few seconds away
        await asyncio.sleep(0.2)
        first.release()  # the copy is free: the second is sent
        await second.wait_for_prefix(10.0)
        assert 0.2 <= second.held_s < 1.0
        assert second.predicted_wait_s == pytest.approx(5.0 - second.held_s)
        second.release()
        assert first.held_s == 0.0 and first.predicted_wait_s == first.estimate.ttft_s  # never held

    asyncio.run(main())


def test_a_prefix_blind_strategys_prediction_counts_what_the_backend_holds_settled():
    # Scripted, no server: least_inflight ranks by requests in flight, but its pick's prediction (the
    # response headers, the span, the backend's error on /admin/backends, the deadline check) prices what
    # the chosen llama.cpp server holds of the prompt, as it is sent at once: a copy settled in a free slot
    # is reused, one still in a running request's slot is not (the request prefills it again elsewhere).
    blocks = prompt_blocks("system: You are the billing assistant; cite the policy. " * 30 + "user: hi")
    backends = {"a": LlamaBackend("a", BackendConfig(base_url="http://127.0.0.1:1/v1", model="m", flavor="llamacpp"))}
    r = Router(backends, {"m": ModelAlias(backends=("a",), strategy="least_inflight")}, 1.0)

    def ctx() -> RouteContext:  # as with_policy leaves a prefix-blind alias's context: no cached map
        return RouteContext(stream=True, prompt_tokens=round(blocks.tokens), max_tokens=20, prefix=blocks)

    async def main():
        m = r.states["a"].model
        for tokens in (300, 600):  # timed: a CPU server's 5 ms a token
            m.observe_prefill(tokens, tokens * 0.005)
        cold = await r.acquire("m", ctx=ctx())
        assert cold.prefix.tokens == 0 and cold.estimate.ttft_s > 0.9 * blocks.tokens * 0.005
        cold.release()
        warm = await r.acquire("m", ctx=ctx())
        assert warm.prefix.tokens > 0.5 * blocks.tokens
        assert warm.estimate.ttft_s < (blocks.tokens - 0.9 * warm.prefix.tokens) * 0.005 + 0.05
        busy = await r.acquire("m", ctx=ctx())  # the copy is in the warm request's slot
        assert busy.prefix.leader is not None and busy.estimate.ttft_s > 0.9 * blocks.tokens * 0.005
        assert not busy.burst_wait_s  # least_inflight never holds a request back for a copy
        for lease in (warm, busy):
            lease.release()

    asyncio.run(main())


def test_a_router_built_from_anothers_memory_goes_on_from_what_that_one_learned():
    # A config reload builds a new router (app/reload.py). Of a backend named again with the same URL it
    # takes the latency model and the prefix index (with the new file's cache settings), its prediction
    # errors and last counters; of every alias its traffic's reuse and arrival rate, and the answer
    # lengths; of every served model the token ratio, which a backend the reload added prices with at once.
    config = lambda url="http://127.0.0.1:1/v1", **kw: BackendConfig(base_url=url, model="m", flavor="llamacpp", **kw)
    old = Router({"a": FakeBackend("a", config()), "b": FakeBackend("b", config())},
                 {"m": ModelAlias(backends=("a", "b"), strategy="latency_aware")}, 1.0)
    a = old.states["a"]
    a.model.observe_decode(10, 0.2, 1.0)
    old.learner.accuracy["a"].add(0.1, 0.2, 0.5, 0.4)
    old.learner.token_ratios.setdefault("m", TokenRatio()).observe(600, 370)
    for _ in range(8):
        old.outputs.observe("m", shape_of("chat", 64, None), 40, time.monotonic())
    strategy = old._aliases["m"].strategy
    memory = old.memory({"a"})  # b's URL changes in the new file: another server
    new = Router({"a": FakeBackend("a", config(prefix_ttl_s=30.0)), "b": FakeBackend("b", config("http://127.0.0.1:2/v1")),
                  "c": FakeBackend("c", config("http://127.0.0.1:3/v1"))},
                 {"m": ModelAlias(backends=("a", "b", "c"), strategy="latency_aware")}, 1.0, memory=memory)
    assert new.states["a"].model is a.model and new.states["a"].prefixes is a.prefixes
    assert a.prefixes.ttl_s == 30.0
    assert new.states["b"].model is not old.states["b"].model and new.learner.accuracy["b"].e2e == deque()
    assert list(new.learner.accuracy["a"].e2e) == [pytest.approx(0.25)]
    assert new.outputs.predict("m", shape_of("chat", 64, None), time.monotonic()) == pytest.approx(40)
    fresh = new._aliases["m"].strategy
    assert fresh is not strategy and fresh.reuse is strategy.reuse and fresh.arrivals is strategy.arrivals
    # c is new to routing; it serves the model whose ratio the old router learned.
    assert new.states["c"].model.snapshot()["prompt_tokens_per_server_token"] == pytest.approx(600 / 370)
    # Refused (its cache could not start): the running router's index keeps the settings it had.
    memory.give_back()
    assert a.prefixes.ttl_s == old.states["b"].prefixes.ttl_s != 30.0
