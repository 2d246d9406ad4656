"""The console's routes: the page and its assets, and the JSON it reads, all behind an admin key.

One page polls one JSON view every few seconds (app/http/console/static/console.js); each view is built
at most once a second whatever the number of open pages, from state the gateway already keeps.
"""

from __future__ import annotations

import asyncio
import html
import time
import typing
from importlib import resources
from urllib.parse import parse_qs

import orjson
from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response

from app.admission.auth import admin_keys_for, peer_of
from app.config import ModelAlias
from app.errors import GatewayError, InvalidRequest, NotFound, PermissionDenied, Unauthorized
from app.http.admin import explain_body, tenants_view
from app.http.console import views
from app.http.console.changes import ChangeRefused, ConfigChanges, NotWritable, deep_merge
from app.http.console.session import (
    COOKIE,
    SESSION_S,
    Operator,
    check_key,
    operator,
    operator_for_change,
    same_origin,
    session_cookie,
    signing_secret,
)
from app.http.console.whatif_live import WhatIfRunner, learned_fleet, parse_workload, policy, workload_from_ring

router = APIRouter(prefix="/console")

_CACHE_S = 1.0
_STATIC = {"console.js": "text/javascript; charset=utf-8", "console.css": "text/css; charset=utf-8"}
_PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
             "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
_LOGIN_CSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
# same-origin, not no-referrer: under no-referrer a browser sends `Origin: null` on a form post, which
# the cross-site check (app.http.console.session.same_origin) must refuse.
SAFE_HEADERS = {"x-content-type-options": "nosniff", "x-frame-options": "DENY", "referrer-policy": "same-origin",
         "cache-control": "no-store"}


class ConsoleState:
    """What the console keeps for itself: the last answer of each view, and the what-if runner."""

    def __init__(self) -> None:
        self.views: dict[str, tuple[float, bytes]] = {}
        self.whatif = WhatIfRunner()

    async def aclose(self) -> None:
        await self.whatif.aclose()


def _state(request: Request) -> ConsoleState:
    st = getattr(request.app.state, "console", None)
    if st is None:
        st = request.app.state.console = ConsoleState()
    return st


def _asset(name: str) -> bytes:
    return resources.files("app.http.console").joinpath("static", name).read_bytes()


def _json(data: object, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status, headers=SAFE_HEADERS, media_type="application/json")


async def _cached(request: Request, name: str, build) -> Response:
    """The view's answer, built at most once a second. Server-Timing says what building it cost: `build`
    in wall time, `cpu` in the event loop thread's CPU time (what the console takes from serving; a
    view built in steps counts what others ran between its steps in both, so on a busy gateway these
    are upper bounds). Both 0 when the answer was the cached one."""
    st, now = _state(request), time.monotonic()
    hit = st.views.get(name)
    cost = cpu = 0.0
    if hit is None or now - hit[0] > _CACHE_S:
        t0, c0 = time.perf_counter(), time.thread_time()
        data = build()
        if asyncio.iscoroutine(data):
            data = await data
        hit = st.views[name] = (now, orjson.dumps(data))
        cost, cpu = time.perf_counter() - t0, time.thread_time() - c0
    return Response(hit[1], headers={**SAFE_HEADERS, "server-timing": f"build;dur={cost * 1000:.3f}, cpu;dur={cpu * 1000:.3f}"},
                    media_type="application/json")


def _login_page(message: str = "", status: int = 401) -> Response:
    body = _asset("login.html").replace(b"{{message}}", html.escape(message).encode())
    return Response(body, status, headers={**SAFE_HEADERS, "content-security-policy": _LOGIN_CSP}, media_type="text/html; charset=utf-8")


# --- the page -----------------------------------------------------------------------------------
@router.get("")
async def page(request: Request) -> Response:
    try:
        operator(request)
    except Unauthorized:
        return _login_page()
    return Response(_asset("index.html"), headers={**SAFE_HEADERS, "content-security-policy": _PAGE_CSP},
                    media_type="text/html; charset=utf-8")


@router.post("/login")
async def login(request: Request) -> Response:
    if not same_origin(request):
        raise PermissionDenied("cross-origin request refused", code="csrf_refused")
    # The sign-in form's urlencoded body, read here (python-multipart is not a dependency for one field).
    raw = await request.body()
    key = parse_qs(raw.decode("latin-1")[:4096]).get("key", [""])[0] if len(raw) <= 4096 else ""
    digest = check_key(admin_keys_for(request.app.state.gateway.config.auth, peer_of(request)), key) if key else None
    if digest is None:
        if key and check_key(request.app.state.gateway.config.auth.admin_keys, key) is not None:
            return _login_page("The demo admin key works only from this machine: set your own in auth.admin_keys.")
        return _login_page("That is not an admin key of this gateway.")
    response = RedirectResponse("/console", 303, headers=SAFE_HEADERS)
    response.set_cookie(COOKIE, session_cookie(digest, signing_secret(request.app.state.gateway.config.auth)), max_age=SESSION_S, path="/console", httponly=True,
                        samesite="strict", secure=request.url.scheme == "https")
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    operator_for_change(request)
    response = _json({"signed_out": True})
    response.delete_cookie(COOKIE, path="/console")
    return response


@router.get("/static/{name}")
async def static(name: str, request: Request) -> Response:
    operator(request)
    if name not in _STATIC:
        raise NotFound(f"no console asset {name!r}")
    return Response(_asset(name), headers={**SAFE_HEADERS, "cache-control": "private, max-age=60"}, media_type=_STATIC[name])


# --- what the pages read ------------------------------------------------------------------------
@router.get("/api/session")
async def session(request: Request) -> Response:
    who = operator(request)
    gw = request.app.state.gateway
    return _json({"who": who.key_id, "csrf": who.csrf, "capture_content": gw.telemetry.tracing.capture_content,
                  "trace_url": gw.config.telemetry.tracing.trace_url, "can_apply": _changes(request) is not None, "ring_size": gw.telemetry.recent.size,
                  "aliases": list(gw.config.models), "strategies": _STRATEGIES, "refresh_s": 3})


# The choices the config accepts, read from it: a strategy added there shows up here.
_STRATEGIES = list(typing.get_args(ModelAlias.model_fields["strategy"].annotation))


@router.get("/api/fleet")
async def fleet(request: Request) -> Response:
    operator(request)
    return await _cached(request, "fleet", lambda: views.fleet(request.app.state.gateway))


@router.get("/api/requests")
async def recent(request: Request) -> Response:
    operator(request)
    return await _cached(request, "requests", lambda: views.requests(request.app.state.gateway))


@router.get("/api/requests/{request_id}")
async def one_request(request_id: str, request: Request) -> Response:
    operator(request)
    detail = views.request_detail(request.app.state.gateway, request_id)
    if detail is None:
        raise NotFound("that request is no longer in the ring of recent requests")
    return _json(detail)


@router.get("/api/cache")
async def cache_and_tenants(request: Request) -> Response:
    operator(request)
    gw = request.app.state.gateway

    async def build() -> dict:
        return {"cache": views.cache(gw), "tenants": await tenants_view(gw)}

    return await _cached(request, "cache", build)


@router.post("/api/explain")
async def explain(request: Request) -> Response:
    """Route explain for a recent request (by id) or a pasted body, through the router's own decision."""
    operator_for_change(request)  # a POST from the page: same CSRF rules, though nothing changes
    gw = request.app.state.gateway
    ask = _object(await request.body())
    note = None
    pasted = False
    if ask.get("request_id"):
        r = gw.telemetry.recent.find(str(ask["request_id"]))
        if r is None:
            raise NotFound("that request is no longer in the ring of recent requests")
        if r.body is not None and "preview" not in r.body and r.endpoint in _EXPLAINABLE:
            raw = orjson.dumps(r.body)
            note = "explained with the request's own body (content capture is on)"
        elif r.endpoint in _EXPLAINABLE:
            raw = _stand_in(r)
            note = (f"content capture is off: explained with a stand-in prompt of the same estimated length "
                    f"({r.prompt_tokens_hint} tokens); prefix matches need the real text")
        else:
            # Another API's body (Messages, Responses) is not a chat body; the router decides on the
            # alias, the size and the load, which a chat stand-in of the same size carries.
            raw = _stand_in(r)
            note = (f"a /v1/{r.endpoint} request: explained as a chat request of the same estimated length "
                    f"({r.prompt_tokens_hint} tokens); prefix matches need its text")
    elif ask.get("body") is not None:
        raw, pasted = _pasted(ask["body"]), True
    else:
        raise InvalidRequest("send request_id or body")
    try:
        out = explain_body(gw, raw, request.headers)
    except GatewayError as exc:
        if pasted and exc.param:  # a fault inside the pasted request, named where it sits in this call
            exc.param = f"body.{exc.param}"
        raise
    out["note"] = note
    out["at"] = round(time.time(), 3)
    return _json(out)


_EXPLAINABLE = ("chat/completions", "completions")  # bodies /admin/route/explain reads as they are


_JSON_TYPES = {bool: "a boolean", int: "a number", float: "a number", list: "an array", str: "a string", type(None): "null"}


def _pasted(body: object) -> bytes:
    """The pasted request to explain: a JSON object, or its text (the page's text box sends text, a script
    the object). Anything else is refused naming the field: the request's own parser would call a bad
    pasted text "request body is not valid JSON", as if the explain call itself were malformed."""
    if isinstance(body, dict):
        return orjson.dumps(body)
    if not isinstance(body, str):
        raise InvalidRequest(f"'body' must be a JSON object or its text, not {_JSON_TYPES.get(type(body), 'that')}",
                             param="body")
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"'body' is not valid JSON text: {exc}", param="body") from None
    if not isinstance(parsed, dict):
        raise InvalidRequest(f"'body' must be a JSON object or its text; this text is {_JSON_TYPES[type(parsed)]}",
                             param="body")
    return body.encode()


def _stand_in(r) -> bytes:
    """A chat body of the request's alias and estimated length, without its text: load and model
    figures are the real ones now; prefix matches cannot be (they need the text)."""
    body: dict = {"model": r.alias, "stream": r.stream, "messages": [{"role": "user", "content": "x" * (4 * max(1, r.prompt_tokens_hint))}]}
    if r.params and isinstance(r.params.get("max_tokens"), int):
        body["max_tokens"] = r.params["max_tokens"]
    return orjson.dumps(body)


def _object(raw: bytes) -> dict:
    try:
        data = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError:
        raise InvalidRequest("the body is not JSON") from None
    if not isinstance(data, dict):
        raise InvalidRequest("the body must be a JSON object")
    return data


# --- what-if, apply, roll back ------------------------------------------------------------------
def _changes(request: Request) -> ConfigChanges | None:
    reloader = getattr(request.app.state, "reloader", None)
    return None if reloader is None else ConfigChanges(reloader.path)


def _patch_of(ask: dict) -> dict:
    patch = ask.get("patch")
    if not isinstance(patch, dict) or not patch:
        raise InvalidRequest("choose a change first (patch: a mapping merged over the config file)")
    return patch


@router.get("/api/policy")
async def current_policy(request: Request) -> Response:
    """The routing part of the running config (models: strategies, hedging, targets): no keys in it."""
    operator(request)
    gw = request.app.state.gateway
    changes = _changes(request)
    why_not = None if changes is None else changes.why_not_writable()
    return _json({"models": {a: {**m.model_dump(mode="json", include={"strategy", "hedge", "slo_ms", "ttft_slo_ms", "tpot_slo_ms",
                                                                      "ttft_tolerance_ms", "backends", "fallbacks"}),
                                 "stream_objective": m.ranks_streams_by()}
                             for a, m in gw.config.models.items()},
                  "config_file": None if changes is None else changes.path.name,
                  # Whether Apply and Roll back can write the file, and if not why: the page offers neither then.
                  "writable": changes is not None and why_not is None,
                  "why_not_writable": "this gateway was not started from a config file" if changes is None else why_not,
                  "audit": [] if changes is None else changes.audit(20)})


@router.post("/api/whatif")
async def whatif(request: Request) -> Response:
    operator_for_change(request)
    gw = request.app.state.gateway
    st = _state(request)
    if st.whatif.busy():
        raise GatewayError("a what-if is already running; wait for it", code="whatif_busy", status=409)
    ask = _object(await request.body())
    patch = _patch_of(ask)
    changes = _changes(request)
    raw = changes.current() if changes is not None else gw.config.model_dump(mode="json", exclude_none=True)
    if isinstance(ask.get("workload"), str) and ask["workload"].strip():
        try:
            workload = parse_workload(ask["workload"])
        except ValueError as exc:
            raise InvalidRequest(f"workload: {exc}") from None
        source = "uploaded workload"
    else:
        workload = workload_from_ring(list(gw.telemetry.recent), set(gw.config.models))
        source = "recent requests"
    if not workload:
        raise InvalidRequest("no requests to replay: send some traffic first, or upload a workload")
    sim = raw.get("simulator")
    fleet: dict = sim if isinstance(sim, dict) and sim.get("backends") else learned_fleet(gw)
    candidate = deep_merge(raw, patch)
    if changes is not None:
        try:
            changes.candidate(patch)
        except ChangeRefused as exc:
            raise InvalidRequest(f"the change does not validate: {exc}") from None
    job = st.whatif.start({"current": policy(raw, fleet), "candidate": policy(candidate, fleet)}, workload, patch)
    return _json({"job": job.id, "requests": job.requests, "source": source,
                  "fleet": "the config's simulator section" if fleet is raw.get("simulator") else "learned from the live latency models"},
                 202)


@router.get("/api/whatif")
async def whatif_status(request: Request) -> Response:
    operator(request)
    job = _state(request).whatif.job
    if job is None:
        return _json({"job": None})
    return _json({"job": job.id, "status": job.status, "error": job.error, "result": job.result, "patch": job.patch,
                  "requests": job.requests, "started": job.started})


@router.post("/api/apply")
async def apply(request: Request) -> Response:
    who = operator_for_change(request)
    changes = _need_changes(request)
    ask = _object(await request.body())
    patch = _patch_of(ask)
    try:
        applied = changes.apply(patch, _who(who), str(ask.get("note") or ""))
    except NotWritable as exc:
        raise _not_writable("not applied", exc) from None
    except ChangeRefused as exc:
        raise InvalidRequest(f"not applied: {exc}", code="change_refused") from None
    except OSError as exc:
        raise InvalidRequest(f"not applied: cannot write the config file ({exc.strerror or exc})", code="change_refused") from None
    return await _reload(request, changes, applied, who)


@router.post("/api/rollback")
async def rollback(request: Request) -> Response:
    who = operator_for_change(request)
    changes = _need_changes(request)
    try:
        applied = changes.rollback(_who(who))
    except NotWritable as exc:
        raise _not_writable("not rolled back", exc) from None
    except ChangeRefused as exc:
        raise InvalidRequest(f"not rolled back: {exc}", code="change_refused") from None
    return await _reload(request, changes, applied, who)


def _not_writable(what: str, exc: NotWritable) -> GatewayError:
    # 409: the request is fine; the config file's state refuses it (the policy view says so up front).
    return InvalidRequest(f"{what}: {exc}", code="config_read_only", status=409)


def _who(who: Operator) -> str:
    return f"admin key {who.key_id}"


def _need_changes(request: Request) -> ConfigChanges:
    changes = _changes(request)
    if changes is None:
        raise InvalidRequest("this gateway was not started from a config file", code="reload_unavailable")
    return changes


async def _reload(request: Request, changes: ConfigChanges, applied, who: Operator) -> Response:
    ok, message = await request.app.state.reloader.reload()
    if not ok:
        changes.undo_last(applied, _who(who), message)
        await request.app.state.reloader.reload()
        raise InvalidRequest(f"the new config did not load, the previous one is back: {message}", code="change_refused")
    _state(request).views.clear()
    return _json({"applied": True, "version": applied.version, "previous": applied.previous, "audit": changes.audit(20)})

