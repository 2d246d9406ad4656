"""The request pipeline, top to bottom: auth -> parse -> cache -> route/attempt/retry/fallback -> relay -> record."""

from __future__ import annotations

import logging
import time
import uuid

import orjson
from starlette.responses import Response

from app.cache.assemble import StreamAssembler
from app.cache.entry import Hit
from app.cache.replay import hit_body, replay_events
from app.cache.service import CachePlan
from app.deadline import DEADLINE_HEADER, Deadline
from app.dispatch import dispatch
from app.errors import GatewayError, ModelNotFound, UpstreamProtocolError
from app.gateway import Gateway
from app.record import Outcome, RequestRecord
from app.relay import SSEResponse, relay_events, replay
from app.request import Endpoint, ParsedRequest, parse_request
from app.upstream.attempt import JsonReply

log = logging.getLogger("slipstream.request")


async def handle(gw: Gateway, endpoint: Endpoint, raw_body: bytes, headers: dict[str, str]) -> Response:
    """Serve one proxied call; raises GatewayError for anything the client must see as an error."""
    record = RequestRecord(uuid.uuid4().hex, endpoint.value, time.perf_counter())
    try:
        return await _serve(gw, endpoint, raw_body, headers, record)
    except GatewayError as err:
        record.status, record.error_type = err.status, err.code or err.type
        record.outcome = Outcome.CLIENT_ERROR if err.status < 500 else Outcome.UPSTREAM_ERROR
        record.finished = time.perf_counter()
        _record(record)
        err.headers.setdefault("x-request-id", record.request_id)
        raise


async def _serve(gw: Gateway, endpoint: Endpoint, raw_body: bytes, headers: dict[str, str], record: RequestRecord) -> Response:
    # auth
    tenant = gw.auth.authenticate(headers.get("authorization"))
    record.tenant = tenant.name
    # parse
    req = parse_request(endpoint, raw_body)
    record.alias, record.stream = req.alias, req.stream
    if req.alias not in gw.config.models:
        raise ModelNotFound(f"The model '{req.alias}' does not exist", param="model")
    tenant.check_model(req.alias)
    deadline = Deadline.from_header(headers.get(DEADLINE_HEADER))
    # cache
    plan = gw.cache.plan(tenant.name, req, gw.config.models[req.alias].cache, headers)
    hit = await gw.cache.lookup(plan) if plan.status != "bypass" else None
    if hit is not None:
        return _serve_hit(hit, req, plan, record)
    # route -> attempt -> retry -> fallback
    try:
        dispatched = await dispatch(gw, req, deadline, record)
    except GatewayError as err:
        stale = gw.cache.serve_stale(plan) if err.status >= 500 else None
        if stale is None:
            raise
        return _serve_hit(stale, req, plan, record)
    result, lease = dispatched.result, dispatched.lease
    backend = result.backend
    record.backend, record.cache = backend.name, plan.status
    out_headers = {
        "x-request-id": record.request_id,
        "x-slipstream-backend": backend.name,
        "x-slipstream-model": backend.config.model,
        "x-slipstream-cache": plan.status,
        **result.headers,
    }
    if dispatched.fallback:
        out_headers["x-slipstream-fallback"] = f"{dispatched.alias}; reason={dispatched.fallback}"
    # relay -> record (and the cache write, for complete answers only)
    if isinstance(result, JsonReply):
        record.status, record.finished = result.status, time.perf_counter()
        if result.status == 200 and not dispatched.fallback:
            gw.cache.save_later(plan, result.body)
        _record(record)
        return Response(result.body, result.status, out_headers, media_type="application/json")

    collect = StreamAssembler(req.endpoint is Endpoint.CHAT) if plan.store and not dispatched.fallback else None

    def finish() -> None:
        lease.release()
        broken = record.outcome is Outcome.STREAM_BROKEN
        gw.router.report(lease.state, UpstreamProtocolError("stream broke") if broken else None)
        if collect is not None and record.outcome is Outcome.OK and not collect.broken:
            gw.cache.save_later(plan, collect.result())
        _record(record)

    return SSEResponse(relay_events(result, req.client_wants_usage, record, finish, collect), out_headers)


def _serve_hit(hit: Hit, req: ParsedRequest, plan: CachePlan, record: RequestRecord) -> Response:
    record.cache, record.finished = plan.status, time.perf_counter()
    body = hit_body(hit)
    headers = {"x-request-id": record.request_id, "x-slipstream-cache": plan.status}
    if hit.similarity is not None:
        headers["x-slipstream-cache-similarity"] = f"{hit.similarity:.4f}"
    if "model" in body:
        headers["x-slipstream-model"] = str(body["model"])
    _record(record)
    if req.stream:
        return SSEResponse(replay(replay_events(body, req.client_wants_usage)), headers)
    return Response(orjson.dumps(body), 200, headers, media_type="application/json")


def _record(record: RequestRecord) -> None:
    # The record stage: telemetry hooks in here. Never log bodies or keys.
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "request %s tenant=%s alias=%s backend=%s stream=%s status=%s outcome=%s attempts=%d fallback=%s ms=%.1f",
            record.request_id, record.tenant, record.alias, record.backend, record.stream,
            record.status, record.outcome.value, record.attempts, record.fallback, record.duration_s * 1000,
        )
