"""The ops interface: live backend figures and routing explanations, behind an admin key."""

from __future__ import annotations

import hmac
import time
from typing import TYPE_CHECKING

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from app.admission.auth import DEMO_ADMIN_KEY_SHA256, admin_keys_for, authorization_of, hash_key, peer_of
from app.deadline import DEADLINE_HEADER, Deadline
from app.dispatch.loop import route_context, time_budget, with_policy
from app.errors import InvalidRequest, ModelNotFound, PermissionDenied, Unauthorized
from app.protocols import CHAT, COMPLETIONS
from app.routing.predict import estimate
from app.routing.prefix_routing import PrefixMatch
from app.routing.prefix_routing import match as prefix_match
from app.routing.slo import from_headers as latency_target

if TYPE_CHECKING:
    from app.gateway import Gateway

router = APIRouter(prefix="/admin")


def _require_admin(request: Request) -> None:
    auth = request.app.state.gateway.config.auth
    if not auth.admin_keys:
        raise PermissionDenied("the admin API is off: set auth.admin_keys", code="admin_disabled")
    keys = admin_keys_for(auth, peer_of(request))
    scheme, _, key = (authorization_of(request) or "").partition(" ")
    digest = hash_key(key.strip()) if scheme.lower() == "bearer" and key.strip() else ""
    if not any(hmac.compare_digest(digest, k) for k in keys):
        if digest == DEMO_ADMIN_KEY_SHA256 and DEMO_ADMIN_KEY_SHA256 in auth.admin_keys:
            raise Unauthorized(DEMO_KEY_LOCAL_ONLY)
        raise Unauthorized("an admin key is required")


DEMO_KEY_LOCAL_ONLY = ("the demo admin key is accepted only from this machine: set your own key's sha256 in "
                       "auth.admin_keys")


def require_ops_key(request: Request) -> None:
    """/metrics and /readyz: open unless auth.ops_keys is set; then a bearer ops key (or an admin key)."""
    auth = request.app.state.gateway.config.auth
    if not auth.ops_keys:
        return
    scheme, _, key = (authorization_of(request) or "").partition(" ")
    digest = hash_key(key.strip()) if scheme.lower() == "bearer" and key.strip() else ""
    if not any(hmac.compare_digest(digest, k) for k in (*auth.ops_keys, *admin_keys_for(auth, peer_of(request)))):
        raise Unauthorized("an ops key is required for this endpoint")


def _json(data: object, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status, media_type="application/json")


@router.get("/backends")
async def backends(request: Request) -> Response:
    """Every backend's live state: load, health, and its latency model's current figures."""
    _require_admin(request)
    gw = request.app.state.gateway
    now = time.monotonic()
    out = []
    for name, s in gw.router.states.items():
        load = gw.backend_load.get(name)
        out.append({
            "name": name,
            "model": s.backend.config.model,
            "flavor": s.backend.config.flavor,
            "inflight": s.inflight,
            "max_concurrency": s.capacity,
            "breaker": {"state": s.breaker.state.value, "trips": s.breaker.trips,
                        "seconds_until_probe": round(s.breaker.seconds_until_available(now), 3)},
            "rate_limited_for_s": round(max(0.0, s.limited_until - now), 3),
            "latency_model": s.model.snapshot(now),
            # The latency model's recent predictions against what was measured (relative errors).
            "prediction_error": gw.router.learner.accuracy[name].snapshot() if name in gw.router.learner.accuracy else None,
            "prefill_backlog": {"requests": s.prefilling, "uncached_prompt_tokens": round(s.uncached_inflight)},
            # What the prefix index believes this backend holds, how far its reports bore that out, and (a
            # cache kept per slot) whether the server keeps a prompt pushed out of its slot, once learned.
            "prefix_index": s.prefixes.snapshot(),
            "reported_load": None if load is None else {"running": load.running, "waiting": load.waiting,
                                                        "kv_cache_usage": load.kv_cache_usage,
                                                        "prefix_cache_hit_share": gw.router.learner.server_prefix_hits.get(name)},
        })
    feed = gw.router.placements
    return _json({"backends": out, "queued": gw.router.queued, "output_lengths": gw.router.outputs.snapshot(now),
                  # routing.share_prefixes: placements told to and heard from the other replicas (null: off).
                  "prefix_sharing": feed.snapshot() if feed is not None else None})


@router.post("/route/explain")
async def explain(request: Request) -> Response:
    """What would be chosen for this request body, and why; nothing is sent to any backend."""
    _require_admin(request)
    return _json(explain_body(request.app.state.gateway, await request.body(), request.headers))


def explain_body(gw: Gateway, raw: bytes, headers) -> dict:
    """The explanation /admin/route/explain answers with (the console's route explain shows the same)."""
    protocol = COMPLETIONS if b'"prompt"' in raw and b'"messages"' not in raw else CHAT
    req = protocol.parse(raw)
    if req.alias not in gw.config.models:
        raise ModelNotFound(f"The model '{req.alias}' does not exist", param="model")
    deadline = Deadline.from_header(headers.get(DEADLINE_HEADER))
    chain = [req.alias, *gw.config.models[req.alias].fallbacks]
    aliases = []
    for alias in chain:
        ctx = with_policy(route_context(req, latency_target(headers)), gw.config.models[alias])
        # The router's own decision (Router.decide), the one dispatch and its deadline check take.
        choice = gw.router.decide(alias, ctx)
        candidates = []
        for s in gw.router.states.values():
            if s.name not in gw.config.models[alias].backends:
                continue
            est = choice.estimate(s)
            assert est is not None  # asked for a named backend: always an estimate
            candidates.append({
                "backend": s.name, "usable": s.name in choice.scores, "score": choice.scores.get(s.name),
                "predicted_queue_s": round(est.queue_s, 6), "predicted_ttft_s": round(est.ttft_s, 6),
                "predicted_e2e_s": round(est.e2e_s, 6), "source": "estimated",
                "inflight": s.inflight, "breaker": s.breaker.state.value,
                "slots": s.model.slots, "slots_source": s.model.slots_source,
                "prefix": _prefix_effect(s, choice.ctx),
            })
        budget = time_budget(gw, alias, deadline)
        predicted = choice.predicted_s
        strategy = gw.router.strategy_name(alias)
        aliases.append({
            "alias": alias, "strategy": strategy, "choice": choice.state.name if choice.state else None,
            "why": (f"lowest score among usable backends ({strategy})" + (", after waiting for a slot" if choice.waits else ""))
            if choice.state else "no usable backend",
            "candidates": candidates,
            "deadline_s": budget, "best_predicted_s": predicted, "waits_for_slot": choice.waits,
            "latency_target": None if not ctx.target else {"ttft_s": ctx.target.ttft_s, "tpot_s": ctx.target.tpot_s,
                                                           "source": ctx.target.source, "met": choice.meets_target},
            "meets_deadline": None if budget is None or predicted is None else predicted <= budget,
        })
    taken = next((a["alias"] for a in aliases if a["meets_deadline"] is not False and a["choice"]), aliases[-1]["alias"])
    return {"request": {"alias": req.alias, "stream": req.stream, "prompt_tokens_estimated": req.size.prompt_tokens},
            "would_use": taken, "chain": aliases}


@router.get("/tenants")
async def tenants(request: Request) -> Response:
    """Each tenant's limits, current usage (from the shared limiter), priority, and admission counts."""
    _require_admin(request)
    return _json(await tenants_view(request.app.state.gateway))


async def tenants_view(gw: Gateway) -> dict:
    """What /admin/tenants answers (and the console's tenants table shows)."""
    adm = gw.admission
    usage = await adm.usage()
    queued = gw.router.queue.by_tenant()
    counts: dict[str, dict[str, int]] = {}
    for (tenant, klass, result), n in adm.counters.requests.items():
        counts.setdefault(tenant, {}).setdefault(result, 0)
        counts[tenant][result] += n
    names = sorted(adm.counters.tenants | set(adm.config.tenants))
    out = []
    for name in names:
        policy = adm.config.tenants.get(name)
        out.append({
            "tenant": name,
            "priority": adm.priorities.resolve(name, None).klass,
            "weight": policy.weight if policy else 1.0,
            "limits": policy.limits.model_dump(exclude_none=True) if policy else {},
            "usage": usage.get(name, {}),
            "queued_now": queued.get(name, 0),
            "counts": counts.get(name, {}),
        })
    store = {"store": adm.config.store, "on_redis_error": adm.config.on_redis_error, "errors": dict(adm.counters.errors)}
    if "error" in usage:
        store["error"] = usage["error"]
    return {"limiter": store, "window_s": adm.config.window_s, "tenants": out}


def _prefix_effect(s, ctx) -> dict | None:
    """The candidate's matched prefix and what it takes off the predicted TTFT (all estimates)."""
    if ctx.prefix is None:
        return None
    m = prefix_match(s, ctx)
    out = {"matched_blocks": m.blocks, "prompt_blocks": len(ctx.prefix.keys),
           "matched_tokens_estimated": round(m.matched_tokens, 1), "believed_cached_tokens": round(m.tokens, 1),
           "index_accuracy": round(s.prefixes.accuracy, 4), "index_verified_requests": s.prefixes.verified,
           "sibling_prefilling": m.leader is not None, "in_host_memory_only": m.hosted,
           "uncached_tokens_in_flight": round(s.uncached_inflight, 1),
           "used_by_strategy": ctx.cached is not None}
    if ctx.cached is not None:
        # Two probes of the decision's context, with and without the match: the context itself is not patched.
        probe = ctx.copy()
        probe.cached = {**ctx.cached, s.name: m}
        warm = estimate(s, probe).ttft_s
        probe.cached = {**ctx.cached, s.name: PrefixMatch(0, 0.0, 0.0)}
        cold = estimate(s, probe).ttft_s
        out["predicted_ttft_without_prefix_s"] = round(cold, 6)
        out["ttft_saved_s"] = round(cold - warm, 6)
    return out


@router.post("/cache/flush")
async def cache_flush(request: Request) -> Response:
    """Wait (at most 5 s) until every answer this process handed to the cache is written to its store:
    before a snapshot or a shutdown, and for tests that read what they just stored."""
    _require_admin(request)
    cache = request.app.state.gateway.cache
    await cache.flush()
    return _json({"flushed": True, "stores": cache.stats.stores, "lost": cache.writer_stats.lost})


@router.post("/reload")
async def reload(request: Request) -> Response:
    """Re-read the config file now (as SIGHUP does); in-flight requests finish on the old config."""
    _require_admin(request)
    reloader = getattr(request.app.state, "reloader", None)
    if reloader is None:
        raise InvalidRequest("this gateway was not started from a config file", code="reload_unavailable")
    ok, message = await reloader.reload()
    return _json({"reloaded": ok, "message": message}, 200 if ok else 422)
