"""The request pipeline, top to bottom: auth -> parse -> route -> attempt -> relay -> record."""

from __future__ import annotations

import logging
import time
import uuid

from starlette.responses import Response

from app.errors import GatewayError, ModelNotFound
from app.gateway import Gateway
from app.record import Outcome, RequestRecord
from app.relay import SSEResponse, relay_events
from app.request import Endpoint, parse_request
from app.upstream.attempt import call_json, open_stream

log = logging.getLogger("slipstream.request")


async def handle(gw: Gateway, endpoint: Endpoint, raw_body: bytes, authorization: str | None) -> Response:
    """Serve one proxied call; raises GatewayError for anything the client must see as an error."""
    record = RequestRecord(uuid.uuid4().hex, endpoint.value, time.perf_counter())
    try:
        return await _serve(gw, endpoint, raw_body, authorization, record)
    except GatewayError as err:
        record.status, record.error_type = err.status, err.code or err.type
        record.outcome = Outcome.CLIENT_ERROR if err.status < 500 else Outcome.UPSTREAM_ERROR
        record.finished = time.perf_counter()
        _record(record)
        raise


async def _serve(gw: Gateway, endpoint: Endpoint, raw_body: bytes, authorization: str | None, record: RequestRecord) -> Response:
    tenant = gw.auth.authenticate(authorization)
    record.tenant = tenant.name
    req = parse_request(endpoint, raw_body)
    record.alias, record.stream = req.alias, req.stream
    if req.alias not in gw.config.models:
        raise ModelNotFound(f"The model '{req.alias}' does not exist", param="model")
    tenant.check_model(req.alias)

    lease = await gw.router.acquire(req.alias)
    backend = lease.backend
    record.backend = backend.name
    body = req.upstream_body(backend.config.model, backend.config.stream_usage)
    headers = {"x-request-id": record.request_id, "x-slipstream-backend": backend.name, "x-slipstream-model": backend.config.model}

    if not req.stream:
        try:
            reply = await call_json(backend, endpoint.value, body)
        finally:
            lease.release()
        record.status, record.finished = reply.status, time.perf_counter()
        _record(record)
        return Response(reply.body, reply.status, {**reply.headers, **headers}, media_type="application/json")

    try:
        stream = await open_stream(backend, endpoint.value, body)
    except BaseException:
        lease.release()
        raise

    def finish() -> None:
        lease.release()
        _record(record)

    return SSEResponse(relay_events(stream, req.client_wants_usage, record, finish), {**stream.headers, **headers})


def _record(record: RequestRecord) -> None:
    # The record stage: telemetry hooks in here. Never log bodies or keys.
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "request %s tenant=%s alias=%s backend=%s stream=%s status=%s outcome=%s ms=%.1f",
            record.request_id, record.tenant, record.alias, record.backend, record.stream,
            record.status, record.outcome.value, record.duration_s * 1000,
        )
