"""The request pipeline, top to bottom, one folder per stage: protocols/ (the client's API) -> admission/
(auth, limits) -> cache/ (exact, then semantic) -> dispatch/ (routing/ picks, upstream/ attempts, retry,
hedge, fall back) -> relay/ (the answer to the client) -> telemetry/ (the record)."""

from __future__ import annotations

import asyncio
import time

import orjson
from starlette.responses import Response

from app.admission.service import Admitted
from app.cache.entry import Hit
from app.cache.replay import answer_headers, hit_body, kept, served_by
from app.cache.service import CATEGORY_HEADER, CachePlan
from app.conversations.service import Turn
from app.deadline import DEADLINE_HEADER, Deadline
from app.dispatch.log import DispatchLog
from app.dispatch.loop import Dispatched, dispatch
from app.errors import GatewayError, Interrupted, ModelNotFound, UpstreamProtocolError
from app.gateway import Gateway
from app.protocols import ClientProtocol, ParsedRequest
from app.protocols.openai import MODEL_FIELD
from app.record import Outcome, RequestIds, RequestRecord
from app.relay.answer import JsonResponse
from app.relay.filters import (
    BackendReports,
    CacheFill,
    CaptureAnswer,
    EndEvent,
    Filter,
    FinishReasons,
    ModelName,
    Progress,
    StreamUsage,
    UsageFilter,
)
from app.relay.loop import ClientGone, Relay, SSEResponse, replay
from app.relay.result import RelayResult
from app.routing.slo import from_headers as latency_target
from app.telemetry.server_timing import server_timing, timing_summary
from app.telemetry.stages import Stage, first_byte_stages
from app.telemetry.tracing import attempt_stages
from app.upstream.attempt import JsonReply

_REQUEST_IDS = RequestIds()  # one per process: the pipeline names every request it serves
_TRACED_PARAMS = ("max_tokens", "temperature", "top_p", "seed")


class _Flow:
    """One request on its way through the stages: its record (written here, and closed by telemetry) and
    the values the stages returned, which the record takes over when the request ends."""

    __slots__ = ("admitted", "log", "record")

    def __init__(self, record: RequestRecord) -> None:
        self.record = record
        self.log = DispatchLog(record.endpoint, record.span)  # dispatch's own; admission's events join it
        self.admitted: Admitted | None = None


async def handle(gw: Gateway, protocol: ClientProtocol, raw_body: bytes, headers: dict[str, str],
                 path: str, gone: ClientGone | None = None) -> Response:
    """Serve one proxied call; raises GatewayError for anything the client must see as an error. `gone` is the
    front's word that the client left: a cancelled call whose client is still there was stopped by the server."""
    record = RequestRecord(_REQUEST_IDS.next(), protocol.value, time.perf_counter())
    record.span = gw.telemetry.start_request(record, path, headers.get("traceparent"))
    flow = _Flow(record)
    try:
        response = await _serve(gw, protocol, raw_body, headers, flow)
    except GatewayError as err:
        if flow.admitted is not None:
            for name, value in flow.admitted.headers.items():
                err.headers.setdefault(name, value)
        record.status, record.error_type = err.status, err.code or err.type
        record.outcome = Outcome.CLIENT_ERROR if err.status < 500 else Outcome.UPSTREAM_ERROR
        record.finished = time.perf_counter()
        _finish(gw, flow)
        err.headers.setdefault("x-request-id", record.request_id)
        if protocol.id_header is not None:
            err.headers.setdefault(protocol.id_header, record.request_id)
        raise
    except asyncio.CancelledError:
        if gone is None or gone.lost:
            # The client left before its answer began (app.http.fastpath cancels the call): nothing to send.
            record.status, record.outcome, record.error_type = 499, Outcome.CLIENT_GONE, "client_disconnected"
        else:
            # The server stopped it (shutdown past its grace period) with the client still waiting: the front
            # answers a retryable 503 (app.http.fastpath), as a stream stopped so ends with stream_interrupted.
            record.status, record.outcome, record.error_type = 503, Outcome.UPSTREAM_ERROR, Interrupted.code
        record.finished = time.perf_counter()
        _finish(gw, flow)
        raise
    if flow.admitted is not None and flow.admitted.headers:
        response.headers.update(flow.admitted.headers)  # every answer carries them, errors included
    if protocol.id_header is not None:
        response.headers[protocol.id_header] = record.request_id
    return response


def _finish(gw: Gateway, flow: _Flow) -> None:
    """The request is over (on every path, once): its record takes the stages' events, admission settles
    its reservation, and telemetry closes the record. A JSON answer's runs once its body is sent."""
    record = flow.record
    record.events = flow.log.events
    if flow.admitted is not None:
        flow.admitted.settle(record.usage, bool(record.backend) and bool(record.first_token or record.status < 400))
    gw.telemetry.finish(record)


def _take_dispatch_log(record: RequestRecord, log: DispatchLog) -> None:
    """What dispatch did, into the record (once dispatch returned or failed)."""
    record.attempts, record.attempt_log, record.routes, record.retries = log.attempts, log.attempt_log, log.routes, log.retries
    record.fallback, record.target_result = log.fallback, log.target_result
    record.prompt_tokens_hint, record.prefix = log.prompt_tokens_hint, log.prefix


async def _serve(gw: Gateway, protocol: ClientProtocol, raw_body: bytes, headers: dict[str, str],
                 flow: _Flow) -> Response:
    record = flow.record
    # auth
    tenant = gw.auth.authenticate(protocol.credentials(headers))
    record.tenant = tenant.name
    # parse
    req = protocol.parse(raw_body)
    req.headers = protocol.pass_headers(headers)
    record.stream = req.stream
    if req.alias not in gw.config.models:
        # Not recorded: metric labels come only from configured aliases.
        raise ModelNotFound(f"The model '{req.alias}' does not exist", param="model")
    record.alias = req.alias
    tenant.check_model(req.alias)
    # conversation: a stateful API's chain (Responses' previous_response_id) expanded into the request, and the
    # turn that keeps its answer; after the key's model check, so no stored turn is read for a model it may not use
    turn = await gw.conversations.begin(tenant.name, req) if req.protocol.stateful else None
    deadline = Deadline.from_header(headers.get(DEADLINE_HEADER))
    target = latency_target(headers)
    if gw.telemetry.tracing.enabled:
        record.params = {k: req.body[k] for k in _TRACED_PARAMS if k in req.body}
    if gw.telemetry.tracing.capture_content:  # for spans and the console's request view
        record.body = dict(req.body)
    # cache, exact: a stored answer takes no backend, slot or tokens, so it is served before admission
    # and never refused for the tenant's limits (README "Cache hits and limits")
    plan = gw.cache.plan(tenant.name, req, gw.config.models[req.alias].cache, headers)
    record.cache_category = plan.category
    exact_s = 0.0
    if plan.status != "bypass":
        t0 = time.perf_counter()
        hit = await gw.cache.lookup_exact(plan)
        exact_s = time.perf_counter() - t0
        if hit is not None:
            record.cache_start, record.cache_end, record.cache = t0, t0 + exact_s, plan.status
            return await _kept(turn, _serve_hit(gw, hit, req, plan, flow))
    # admission: limits, priority (429s here; the reservation is settled when the request ends)
    flow.admitted = await gw.admission.admit(tenant, req, headers, deadline, record.request_id, flow.log.events)
    # cache, semantic: after admission, since its embedding costs CPU the limits protect
    if plan.status != "bypass":
        record.cache_start = time.perf_counter() - exact_s  # the stage's time: both lookups, not admission
        hit = await _lookup(gw, plan, deadline)
        record.cache_end, record.embed_s, record.similarity = time.perf_counter(), plan.embed_s, plan.similarity
        record.cache = plan.status
        if hit is not None:
            return await _kept(turn, _serve_hit(gw, hit, req, plan, flow))
    # route -> attempt -> retry -> fallback
    try:
        dispatched = await dispatch(gw, req, deadline, flow.log, tenant.models, target, flow.admitted.queue)
    except GatewayError as err:
        _take_dispatch_log(record, flow.log)
        stale = gw.cache.serve_stale(plan) if err.status >= 500 else None
        if stale is None:
            if deadline.expired:
                err.headers["x-should-retry"] = "false"  # a retry has no time left either
            raise
        record.cache = plan.status
        return await _kept(turn, _serve_hit(gw, stale, req, plan, flow))
    except BaseException:
        _take_dispatch_log(record, flow.log)
        raise
    _take_dispatch_log(record, flow.log)
    record.backend, record.cache = dispatched.result.backend.name, plan.status
    record.answered_by = dispatched.attempt
    # relay -> record (and the cache write, for complete answers only)
    try:
        if isinstance(dispatched.result, JsonReply):
            return await _kept(turn, _json_response(gw, req, dispatched, plan, flow))
        return await _kept(turn, _stream_response(gw, req, dispatched, plan, flow,
                                                  headers.get("x-slipstream-server-timing") == "usage"))
    except BaseException as exc:
        dispatched.owner.end(exc)  # the response never came to own the attempt (a no-op once it did)
        raise


async def _kept(turn: Turn | None, response: Response) -> Response:
    """The answer, its turn kept in the response store where the API keeps turns (app.conversations)."""
    return response if turn is None else await turn.keep(response)


async def _lookup(gw: Gateway, plan: CachePlan, deadline: Deadline) -> Hit | None:
    """The semantic cache lookup (after an exact miss), bounded by the request's deadline: a lookup that would
    outlast it is a miss, and the dispatch after it then fails fast on the spent deadline."""
    if deadline.at is None:
        return await gw.cache.lookup_semantic(plan, deadline)
    try:
        async with asyncio.timeout(deadline.remaining()):
            return await gw.cache.lookup_semantic(plan, deadline)
    except TimeoutError:
        plan.status = "miss"
        return None


def _base_headers(record: RequestRecord, dispatched: Dispatched, plan: CachePlan) -> dict[str, str]:
    backend = dispatched.result.backend
    out = {
        "x-request-id": record.request_id,
        "x-slipstream-backend": backend.name,
        "x-slipstream-model": backend.config.model,  # the backend's model; the body names the alias
        "x-slipstream-cache": plan.status,
        **dispatched.result.headers,
    }
    if plan.category is not None:
        out[CATEGORY_HEADER] = plan.category  # whose TTL its entry gets (README, "Question categories")
    if dispatched.fallback:
        out["x-slipstream-fallback"] = f"{dispatched.alias}; reason={dispatched.fallback}"
    if record.attempts > 1:
        out["x-slipstream-attempts"] = str(record.attempts)
    predicted = dispatched.attempt.predicted if dispatched.attempt else None
    if predicted is not None:
        # Estimates, and named so: what the latency model predicted for this request on this backend.
        out["x-slipstream-predicted-ttft-ms"] = f"{predicted.ttft_s * 1000:.1f}"
        out["x-slipstream-predicted-e2e-ms"] = f"{predicted.e2e_s * 1000:.1f}"
    return out


def _json_response(gw: Gateway, req: ParsedRequest, dispatched: Dispatched, plan: CachePlan,
                   flow: _Flow) -> Response:
    record = flow.record
    reply = dispatched.result
    assert isinstance(reply, JsonReply)  # the dispatcher reads a streamed answer whole for a JSON client
    owner, attempt = dispatched.owner, dispatched.attempt
    record.status = reply.status
    body = reply.data
    payload = reply.body
    if body is not None:
        _note_answer(record, body, reply.backend, req.protocol, reply.usage_reported)
        if record.body is not None:  # content capture is on
            record.output_text = req.protocol.answer_text(body)
        # The body's report (llama.cpp timings, cached tokens) completed by the headers' (TGI, OpenAI).
        owner.add_report(reply.backend.adapter.report_from_body(body))
        payload = _name_alias(payload, body, record.alias)
        if not dispatched.fallback:
            gw.cache.save_later(plan, kept(body, reply.backend.config.model, reply.headers))
    # The body is read whole: the slot is free for the next request now.
    owner.end(complete=body is not None, output_tokens=record.usage.completion_tokens if record.usage else 0)
    headers = _base_headers(record, dispatched, plan)
    if gw.config.telemetry.server_timing and body is not None:
        stages = attempt_stages(record, attempt, gw.models[attempt.backend])
        headers["server-timing"] = _server_timing(record, stages, time.perf_counter())
    record.finished = time.perf_counter()
    return JsonResponse(payload, reply.status, headers, lambda: _finish(gw, flow))


def _stream_response(gw: Gateway, req: ParsedRequest, dispatched: Dispatched, plan: CachePlan, flow: _Flow,
                     summary_wanted: bool) -> Response:
    record = flow.record
    stream, owner, attempt = dispatched.result, dispatched.owner, dispatched.attempt
    assert not isinstance(stream, JsonReply)  # a streaming client is always served from an upstream stream
    model = gw.models[attempt.backend]

    def usage_extension() -> dict:
        now = time.perf_counter()  # the attempt is not over yet: its stages so far
        stages = attempt_stages(record, attempt, model, end=now)
        waits = _waits(record)
        return timing_summary(stages, _cache_s(record), _gateway_s(record, now, now - attempt.start + sum(waits.values())),
                              waits)

    # The relay's filter chain, in order (app.relay.filters): built once, only with the filters that have
    # work to do for this request.
    # The client protocol says how its stream frames and classifies (app.relay.format.StreamFormat).
    protocol = req.protocol
    fmt = protocol.sse
    result = RelayResult()
    filters: list[Filter] = [ModelName(result, req.alias, fmt), BackendReports(owner.add_report, stream.backend.adapter),
                             Progress(owner.progress)]
    capture = CaptureAnswer(protocol.assembler()) if record.body is not None else None  # content capture is on
    if capture is not None:
        filters.append(capture)
    if plan.store and not dispatched.fallback:
        served, said = stream.backend.config.model, stream.headers
        filters.append(CacheFill(protocol.assembler(), lambda body: gw.cache.save_later(plan, kept(body, served, said))))
    n = req.body.get("n")
    filters.append(FinishReasons(result, fmt, n if isinstance(n, int) and n > 1 else 1))
    if protocol.relay == "openai":
        filters.append(UsageFilter(result, fmt, req.client_wants_usage,
                                   usage_extension if summary_wanted and req.client_wants_usage else None))
    else:  # named events: usage told in parts, nothing hidden; the end event is the format's to send
        filters += [StreamUsage(result, protocol), EndEvent(protocol)]
    relay = Relay(stream, tuple(filters), result, fmt)

    def close() -> None:
        # Runs once, from the response, on every path (app.relay.loop.SSEResponse): the relay's result
        # becomes the record's, then the attempt ends.
        if result.finished:
            record.first_token, record.finished = result.first_token, result.finished
            record.response_model, record.usage, record.finish_reasons = result.response_model, result.usage, result.finish_reasons
            if not stream.usage_reported:
                record.usage = None  # a translation's placeholder zeros, not counts: the admission estimate stands
            if response.interrupted:
                # The gateway cut it (shutdown past its grace period) and the client got the error event:
                # a broken stream in the record, as the client saw it, not a client that left.
                result.outcome, result.error_type, result.status = Outcome.STREAM_BROKEN, "stream_interrupted", 503
            if result.outcome is not Outcome.OK:
                record.outcome, record.error_type = result.outcome, result.error_type
                if result.outcome is Outcome.STREAM_BROKEN:
                    record.status = result.status
        else:  # the relay never ran: the client was gone before the first byte
            record.outcome, record.finished = Outcome.CLIENT_GONE, time.perf_counter()
        if capture is not None:
            record.output_text = protocol.answer_text(capture.answer) if capture.answer is not None else None
        broken = record.outcome is Outcome.STREAM_BROKEN and not response.interrupted  # never the backend's fault
        owner.end(UpstreamProtocolError("stream broke") if broken else None, complete=result.complete,
                  output_tokens=record.usage.completion_tokens if record.usage else 0, at=record.finished)
        _finish(gw, flow)

    headers = _base_headers(record, dispatched, plan)
    if gw.config.telemetry.server_timing:
        # At the first byte only the wait before the first token is known, not yet how it splits.
        known = first_byte_stages(attempt.start, attempt.headers, attempt.first_event,
                                  stream.backend.adapter.headers_at_slot, model)
        headers["server-timing"] = _server_timing(record, known, time.perf_counter())
    response = SSEResponse(relay.events(), headers, close, protocol)
    return response


def _serve_hit(gw: Gateway, hit: Hit, req: ParsedRequest, plan: CachePlan, flow: _Flow) -> Response:
    record = flow.record
    body = hit_body(hit, req.protocol, req.body)
    headers = {**answer_headers(hit), "x-request-id": record.request_id, "x-slipstream-cache": plan.status}
    if plan.category is not None:
        headers[CATEGORY_HEADER] = plan.category  # whose rules this lookup followed
    if hit.similarity is not None:
        headers["x-slipstream-cache-similarity"] = f"{hit.similarity:.4f}"
    if hit.verifier is not None:
        headers["x-slipstream-cache-verifier"] = hit.verifier  # which verifiers confirmed this semantic hit
    model = served_by(hit)
    if model is not None:
        headers["x-slipstream-model"] = model
    if gw.config.telemetry.server_timing:
        headers["server-timing"] = _server_timing(record, [], time.perf_counter())
    record.finished = time.perf_counter()
    if req.stream:
        return SSEResponse(replay(req.protocol.replay(body, req.client_wants_usage)), headers, lambda: _finish(gw, flow),
                           req.protocol)
    return JsonResponse(orjson.dumps(body), 200, headers, lambda: _finish(gw, flow))


def _server_timing(record: RequestRecord, stages: list[Stage], now: float) -> str:
    upstream = sum(s.duration for s in stages)
    waits = _waits(record)
    return server_timing(stages, _cache_s(record), _gateway_s(record, now, upstream + sum(waits.values())), waits)


def _waits(record: RequestRecord) -> dict[str, float]:
    """The measured time before the answering attempt was sent that was neither a backend's nor the gateway's
    own work: each said apart, so that `gateway` stays the gateway's overhead."""
    waits: dict[str, float] = {}
    answered = record.answered_by
    if answered is None:
        return waits
    if answered.slot_wait_s > 0:
        # Every backend of the alias was at its max_concurrency: the request waited in the gateway's queue.
        waits["slot_wait"] = answered.slot_wait_s
    if answered.burst_wait_s > 0:
        # Held back by the router for a sibling prefilling the same prefix on the chosen backend: a
        # deliberate wait for cache reuse, measured, and not the gateway's own overhead.
        waits["prefix_wait"] = answered.burst_wait_s
    if record.attempts > 1:
        # Failed attempts and the backoff between them, before the attempt that answered (a hedge's
        # first attempt may be the one that answered: then nothing came before it), less its own waits.
        waits["retries"] = max(0.0, answered.routed - min(a.routed for a in record.attempt_log))
    return waits


def _cache_s(record: RequestRecord) -> float | None:
    return record.cache_end - record.cache_start if record.cache_end else None


def _gateway_s(record: RequestRecord, now: float, upstream_s: float) -> float:
    """The gateway's own time so far: everything that was neither the cache nor a backend."""
    return max(0.0, now - record.received - (_cache_s(record) or 0.0) - upstream_s)


def _note_answer(record: RequestRecord, body: dict, backend, protocol: ClientProtocol, usage_reported: bool) -> None:
    # A translation's placeholder zeros are no count: the admission estimate stands (JsonReply.usage_reported).
    usage = protocol.usage(body) if usage_reported else None
    if usage is not None:
        record.usage = usage
    record.response_model = backend.adapter.reported_model(body.get("model"), backend.config.model)
    record.finish_reasons.extend(protocol.finish_reasons(body))


def _name_alias(payload: bytes, body: dict, alias: str) -> bytes:
    """The answer with `model` naming the alias the client asked for (as a cache hit does), not whatever
    the backend calls it (llama.cpp: its GGUF path without --alias)."""
    model = body.get("model")
    if not isinstance(model, str) or model == alias:
        return payload
    body["model"] = alias
    m = MODEL_FIELD.search(payload)
    # Quotes inside JSON strings are escaped, so the first unescaped "model": "..." before the content (whose
    # tool inputs are JSON objects in some APIs) is the field itself, unless an object sorted before it holds
    # a "model" key of its own (llama.cpp sorts keys: a Responses answer's metadata comes first): then its
    # value is not the answer's model.
    content = payload.find(b'"content"')
    if m is None or (content != -1 and m.start() > content) or m.group(1) != orjson.dumps(model)[1:-1]:
        return orjson.dumps(body)
    return payload.replace(m.group(0), b'"model":' + orjson.dumps(alias), 1)
