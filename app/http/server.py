"""The HTTP layer: the proxied routes (app.http.fastpath) in front of FastAPI for everything else. No logic here."""

from __future__ import annotations

import gc
import logging
import os
from contextlib import asynccontextmanager

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from app.admission.auth import authorization_of
from app.config import GatewayConfig, load_config
from app.errors import GatewayError, InvalidRequest, ModelNotFound, NotFound
from app.gateway import Gateway
from app.http import admin, anthropic_models, intake, responses
from app.http.admin import require_ops_key
from app.http.console import routes as console
from app.http.fastpath import FastPath, api_of, error_response
from app.reload import Reloader
from app.telemetry.metrics import Metrics

log = logging.getLogger("slipstream.server")
_JSON = "application/json"


def app_from_environment() -> FastPath:
    """The app for a uvicorn worker process: config from $SLIPSTREAM_CONFIG (set by `serve --workers`)."""
    path = os.environ["SLIPSTREAM_CONFIG"]
    config = load_config(path)
    intake.configure(config.server)  # this worker's connection limits
    logging.getLogger().setLevel(config.server.log_level.upper())
    return create_app(config, config_path=path)


def create_app(config: GatewayConfig, span_exporter=None, config_path: str | None = None) -> FastPath:
    """The gateway's ASGI app; clients and state are built when the app starts.

    With `config_path`, the config reloads on SIGHUP, on a change of the file, or POST /admin/reload.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # One set of metrics for the process: a reload swaps the gateway, never the counters.
        metrics = Metrics() if config.telemetry.metrics else None
        app.state.gateway = Gateway.start(config, span_exporter, metrics=metrics)
        if metrics is not None:
            metrics.register_live(lambda: app.state.gateway)
        await app.state.gateway.cache.start()
        app.state.reloader = None
        if config_path is not None:
            app.state.reloader = Reloader(app.state, config_path, span_exporter, metrics)
            app.state.reloader.install()
        # Everything built so far lives for the whole process: freeze it out of the collector's view,
        # so full collections stay short (they showed as ~20 ms p99 spikes under load).
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            if app.state.reloader is not None:
                await app.state.reloader.aclose()
            if getattr(app.state, "console", None) is not None:
                await app.state.console.aclose()
            await app.state.gateway.aclose()

    app = FastAPI(title="Slipstream", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/v1/models")
    async def list_models(request: Request) -> Response:
        gateway = request.app.state.gateway
        # Errors take the Anthropic shape for an Anthropic client here through the app's handler (fastpath.api_of).
        if anthropic_models.asks(request):
            allowed = gateway.auth.authenticate(anthropic_models.credentials(request)).models
            listed = [anthropic_models.model_object(m) for m in gateway.model_objects
                      if allowed is None or m["id"] in allowed]
            return Response(anthropic_models.page(listed, request.query_params), media_type=_JSON)
        tenant = gateway.auth.authenticate(authorization_of(request))
        return Response(gateway.models_body_for(tenant.models), media_type=_JSON)

    @app.get("/v1/models/{model_id:path}")
    async def retrieve_model(model_id: str, request: Request) -> Response:
        # `client.models.retrieve`: one alias, shaped as in the list; ids may contain slashes.
        gateway = request.app.state.gateway
        anthropic = anthropic_models.asks(request)
        tenant = gateway.auth.authenticate(anthropic_models.credentials(request) if anthropic
                                           else authorization_of(request))
        body = gateway.model_bodies.get(model_id)
        # An alias this key may not use is not in its list either: the same 404 as an unknown one.
        if body is None or (tenant.models is not None and model_id not in tenant.models):
            raise ModelNotFound(f"The model '{model_id}' does not exist", param="model")
        if anthropic:
            body = orjson.dumps(anthropic_models.model_object(next(m for m in gateway.model_objects
                                                                   if m["id"] == model_id)))
        return Response(body, media_type=_JSON)

    app.include_router(admin.router)
    app.include_router(responses.router)
    app.include_router(console.router)

    if config.telemetry.metrics:

        @app.get("/metrics")
        async def metrics(request: Request) -> Response:
            require_ops_key(request)
            body = request.app.state.gateway.telemetry.metrics.render()
            return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response(b'{"status":"ok"}', media_type=_JSON)

    @app.get("/readyz")
    async def readyz(request: Request) -> Response:
        require_ops_key(request)
        gateway = request.app.state.gateway
        reachable = await gateway.reachable_backends()
        ejected = gateway.ejected_backends()
        ready = any(ok and name not in ejected for name, ok in reachable.items())
        body = {"status": "ready" if ready else "unavailable", "backends": reachable, "ejected": ejected}
        return Response(orjson.dumps(body), 200 if ready else 503, media_type=_JSON)

    _install_error_handlers(app)
    return FastPath(app, config.server.max_body_bytes)


def _error(request: Request, err: GatewayError) -> Response:
    """An error in the shape of the API the route belongs to (an Anthropic client reads errors only in its own:
    fastpath.api_of, the one rule for every route). The console's errors carry the headers its pages do
    (nosniff, no-store, no framing), as its answers do."""
    response = error_response(err, api_of(request.scope))
    if request.url.path.startswith("/console"):
        response.headers.update(console.SAFE_HEADERS)
    return response


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(GatewayError)
    async def gateway_error(request: Request, err: GatewayError) -> Response:
        return _error(request, err)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        path = request.url.path
        if exc.status_code == 404:
            return _error(request, NotFound(f"no route for {request.method} {path}"))
        if exc.status_code == 405:
            return _error(request, InvalidRequest(f"method {request.method} not allowed on {path}",
                                                  code="method_not_allowed", status=405))
        return _error(request, GatewayError(str(exc.detail), status=exc.status_code))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        return _error(request, InvalidRequest(f"invalid request: {exc.errors()[0].get('msg', 'bad input')}"))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        # The traceback goes to the log, never to the client.
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return _error(request, GatewayError("internal gateway error", code="internal_error"))
