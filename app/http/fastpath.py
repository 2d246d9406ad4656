"""A raw ASGI front for the proxied endpoints; every other route goes on to the FastAPI app.

FastAPI's middleware and dependency layers cost about as much CPU per call as the whole pipeline
(pyinstrument on bench/overhead.py at c=16); the three proxied routes need none of them: they read
bytes, call the pipeline and send its response.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.applications import Starlette
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from app import pipeline
from app.admission.auth import duplicate_authorization
from app.admission.priority import PRIORITY_HEADER
from app.cache.service import THRESHOLD_HEADER, TTL_HEADER
from app.deadline import DEADLINE_HEADER
from app.errors import GatewayError, Interrupted, PayloadTooLarge
from app.protocols import CHAT, MESSAGES, PROTOCOLS, RESPONSES, ClientProtocol
from app.relay.loop import ClientGone, client_gone_of, wait_for_disconnect
from app.routing.slo import TPOT_SLO_HEADER, TTFT_SLO_HEADER

log = logging.getLogger("slipstream.server")

PIPELINE_HEADERS = frozenset({
    b"authorization", b"content-length", b"cache-control", b"traceparent", b"x-slipstream-server-timing",
    DEADLINE_HEADER.encode(), TTL_HEADER.encode(), THRESHOLD_HEADER.encode(), PRIORITY_HEADER.encode(),
    TTFT_SLO_HEADER.encode(), TPOT_SLO_HEADER.encode(),
    # Anthropic's clients: the key as x-api-key, and the headers a native backend must see.
    b"x-api-key", b"anthropic-version", b"anthropic-beta",
})

ROUTES = PROTOCOLS


class FastPath:
    """Serves ROUTES itself with the gateway that `app.state.gateway` holds once started."""

    def __init__(self, app: Starlette, max_body_bytes: int) -> None:
        self.app = app
        self._limit = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        protocol = ROUTES.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if protocol is None:
            await (self.app(scope, receive, send) if scope["type"] != "http" else _other_route(self.app, scope, receive, send))
            return
        try:
            headers = _headers(scope)
            body = await _read_body(receive, self._limit, headers.get("content-length"))
            gone = client_gone_of(scope)
            watch = gone is None  # another ASGI server, a test client: a watcher task tells it
            if gone is None:
                gone = ClientGone()
            call = pipeline.handle(self.app.state.gateway, protocol, body, headers, scope["path"], gone)
            response = await (_unless_client_leaves(call, receive, gone) if watch else _unless_gone(call, gone))
            if response is None:
                return  # the client left before its answer began: the call was cancelled, nothing to send
        except GatewayError as err:
            response = error_response(err, protocol)
        except asyncio.CancelledError:
            # Only the body's read gets here (the call's own cancellation is answered in `_unless_gone`): the
            # server stopped the request while its body was still arriving, past the shutdown grace period.
            if not _stopped_by_the_server(scope):
                return  # the client is gone as well: nobody to answer
            response = error_response(Interrupted(_STOPPED), protocol)
        except Exception:
            # The traceback goes to the log, never to the client.
            log.exception("unhandled error on POST %s", scope["path"])
            response = error_response(GatewayError("internal gateway error", code="internal_error"), protocol)
        await response(scope, receive, send)


async def _unless_client_leaves(call, receive: Receive, gone: ClientGone | None = None) -> Response | None:
    """`_unless_gone` where the server gives no ClientGone (another ASGI server, a test client): a watcher
    task waits for `http.disconnect` and tells `gone` (the one the call was given, if any)."""
    gone = gone or ClientGone()

    def on_disconnect(watch: asyncio.Future) -> None:
        if not watch.cancelled() and watch.exception() is None:
            gone.fire()

    watch = asyncio.ensure_future(wait_for_disconnect(receive))
    watch.add_done_callback(on_disconnect)
    try:
        return await _unless_gone(call, gone)
    finally:
        watch.cancel()


async def _unless_gone(call, gone: ClientGone) -> Response | None:
    """Run the pipeline in this task; if the client leaves first, cancel the call (which closes the upstream
    connection and frees the backend slot) and return None. The server's protocol (app.http.intake) says
    when the client left. Cancelled by the server instead (uvicorn cancels what still runs past the shutdown
    grace period), the client still waits: it gets Interrupted, a retryable 503 in its API's shape, not a
    connection closed without a word."""
    if gone.lost:
        call.close()
        return None
    task = asyncio.current_task()
    assert task is not None  # called from the request's own task
    state = [False, False]  # [call finished, client gone]

    def on_gone() -> None:
        if not state[0]:
            state[1] = True
            task.cancel()

    gone.callback = on_gone
    try:
        return await call
    except asyncio.CancelledError:
        task.uncancel()
        if state[1]:
            return None
        raise Interrupted(_STOPPED) from None
    finally:
        state[0] = True
        gone.callback = None


_STOPPED = "the gateway stopped before this request's answer was complete; send it again"


async def _other_route(app: Starlette, scope: Scope, receive: Receive, send: Send) -> None:
    """Any route but the proxied ones (the FastAPI app: stored responses, models, /admin, /console, ...).
    Cancelled by the server before its answer began (uvicorn cancels what still runs past the shutdown grace
    period), the client still waiting, it gets Interrupted in its API's shape, as a proxied call does
    (`_unless_gone`): uvicorn itself would answer a plain-text 500 and log the cancellation as a crash.
    Nothing here cancels a route when its client leaves, so a cancellation is the server's."""
    started = False

    async def watched(message: Message) -> None:
        nonlocal started
        if message["type"] == "http.response.start":
            started = True
        await send(message)

    try:
        await app(scope, receive, watched)
    except asyncio.CancelledError:
        if started:
            raise  # an answer already begun cannot take another status: uvicorn closes the connection
        if _stopped_by_the_server(scope):
            await error_response(Interrupted(_STOPPED), api_of(scope))(scope, receive, send)


def _stopped_by_the_server(scope: Scope) -> bool:
    """In a request's task that was cancelled and has not sent its answer: take the cancellation back and
    say whether the client still waits for an answer (it is then the server's doing: nothing in the front
    cancels a request whose client is there). False with the client gone: nobody to answer."""
    task = asyncio.current_task()
    assert task is not None  # called from the request's own task
    task.uncancel()
    gone = client_gone_of(scope)
    return gone is None or not gone.lost


def api_of(scope: Scope) -> ClientProtocol:
    """Whose error shape a route that is not proxied answers in: Anthropic's on the Messages paths and for an
    Anthropic client anywhere under /v1 (the anthropic SDK sends anthropic-version on every call: its model list,
    and the APIs of Anthropic's the gateway does not serve, such as files and the legacy completions), else
    OpenAI's, which /admin and /console errors use too."""
    path = scope["path"]
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return MESSAGES
    if path.startswith("/v1/") and any(k == b"anthropic-version" for k, _ in scope["headers"]):
        return MESSAGES
    return RESPONSES if path.startswith("/v1/responses/") else CHAT


def error_response(err: GatewayError, protocol: ClientProtocol = CHAT) -> Response:
    """The error in the client API's own shape and status, with its retry hints (OpenAI's SDK reads
    `x-should-retry`, and a Retry-After whenever a retry is invited)."""
    headers = protocol.error_headers(err)
    return Response(protocol.error_body(err), protocol.error_status(err), headers=headers, media_type="application/json")


def _headers(scope: Scope) -> dict[str, str]:
    """The request headers the pipeline reads (ASGI servers give names in lower case)."""
    out = {}
    for k, v in scope["headers"]:
        if k in PIPELINE_HEADERS:
            name = k.decode("latin-1")
            if name in out and name in ("authorization", "x-api-key"):
                raise duplicate_authorization()
            out[name] = v.decode("latin-1")
    return out


async def _read_body(receive: Receive, limit: int, declared: str | None) -> bytes:
    too_large = f"request body is larger than the limit of {limit} bytes"
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(too_large)
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client left before sending its body
            raise GatewayError("client disconnected", code="client_disconnected", status=499)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(too_large)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
