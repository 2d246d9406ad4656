"""The route context is a value: a decision reads it and works on a copy of its own, never patching and
restoring the caller's (issue 22: explain, the deadline check and the placement share one context)."""

from __future__ import annotations

from dataclasses import astuple

from app.dispatch.loop import route_context, with_policy
from app.protocols import CHAT
from app.routing.slo import LatencyTarget
from app.upstream.scripted import ScriptedTransport
from tests.scripted import config, run

BODY = b'{"model": "chat", "max_tokens": 8, "messages": [{"role": "system", "content": "' + b"x" * 400 + b'"}, ' \
       b'{"role": "user", "content": "hi"}]}'


def test_deciding_and_placing_leave_the_context_as_it_was():
    cfg = config({"chat": {"backends": ["a", "b"], "strategy": "prefix_aware"}})

    async def scenario(gw):
        ctx = with_policy(route_context(CHAT.parse(BODY), LatencyTarget(ttft_s=5.0)), gw.config.models["chat"])
        before = astuple(ctx)
        choice = gw.router.decide("chat", ctx)
        lease = await gw.router.acquire("chat", frozenset(), ctx)
        lease.release()
        return before, astuple(ctx), ctx.cached, choice.ctx is not ctx, choice.ctx.now > 0

    before, after, cached, own_copy, stamped = run(cfg, ScriptedTransport([]), scenario)
    assert after == before and cached == {}  # nothing written into the caller's value, its map untouched
    assert own_copy and stamped  # the decision's instant and candidates went into its own copy


def test_an_alias_policy_is_a_new_value():
    cfg = config({"chat": {"backends": ["a", "b"], "strategy": "prefix_aware"}})
    base = route_context(CHAT.parse(BODY))
    ranked = with_policy(base, cfg.models["chat"])
    assert ranked is not base and base.cached is None and ranked.cached == {}
