"""A gateway in this process over the scripted transport (app.upstream.scripted): no sockets, milliseconds.

`run(...)` starts a Gateway from a config dict, plays one scenario coroutine against it and closes it;
`call(...)` drives one request through the real pipeline and the real response objects, with a fake
ASGI client that can leave at any point.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import orjson

from app import pipeline
from app.admission.auth import hash_key
from app.config import GatewayConfig
from app.errors import GatewayError
from app.gateway import Gateway
from app.http.fastpath import _unless_client_leaves, error_response
from app.protocols import CHAT as CHAT_API
from app.protocols import ClientProtocol
from app.relay.loop import ClientGone
from app.upstream.scripted import ScriptedTransport

KEY = "sk-scripted-0123456789"
LIMITED_KEY = "sk-scripted-limited-0123"
CHAT = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}


def config(models: dict | None = None, backends: tuple[str, ...] = ("a", "b"), limited: tuple[str, ...] = ("chat",),
           **sections) -> GatewayConfig:
    """A config with backends `backends` (never contacted) and, by default, alias `chat` over all of them."""
    raw = {
        "auth": {"mode": "keys", "clients": [
            {"tenant": "acme", "key_sha256": hash_key(KEY)},
            {"tenant": "limited", "key_sha256": hash_key(LIMITED_KEY), "models": list(limited)},
        ]},
        "backends": {n: {"base_url": f"http://127.0.0.1:9/{n}/v1", "model": f"m-{n}", "max_concurrency": 2}
                     for n in backends},
        "models": models or {"chat": {"backends": list(backends)}},
        "reliability": {"breaker": {"consecutive_failures": 3, "error_rate": 1.0, "min_requests": 1000}},
        **sections,
    }
    return GatewayConfig.model_validate(raw)


def run(cfg: GatewayConfig, transport: ScriptedTransport, scenario) -> object:
    """Start a gateway on `transport`, run `await scenario(gw)`, close the gateway; returns its result."""

    async def main():
        gw = Gateway.start(cfg, transport=transport)
        try:
            return await scenario(gw)
        finally:
            await gw.aclose()

    return asyncio.run(main())


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    events: list[bytes] = field(default_factory=list)

    def json(self) -> dict:
        return orjson.loads(self.body)

    @property
    def error(self) -> dict:
        return self.json()["error"]


async def call(gw: Gateway, body: dict | bytes = CHAT, key: str = KEY, endpoint: ClientProtocol = CHAT_API,
               headers: dict[str, str] | None = None, leave_after_s: float | None = None) -> Answer | None:
    """One request through the pipeline and its response, as app.http.fastpath serves it.

    With `leave_after_s`, the client disconnects after that long; returns None if no answer began by then.
    """
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    hdrs = {"authorization": f"Bearer {key}", **(headers or {})}
    gone = asyncio.Event()
    if leave_after_s is not None:
        asyncio.get_running_loop().call_later(leave_after_s, gone.set)

    async def receive():
        await gone.wait()
        return {"type": "http.disconnect"}

    front = ClientGone()  # as the server's protocol gives one: it tells a client that left from a server that stops
    try:
        response = await _unless_client_leaves(pipeline.handle(gw, endpoint, raw, hdrs, "/v1/" + endpoint.value, front),
                                               receive, front)
    except GatewayError as err:
        response = error_response(err, endpoint)
    if response is None:
        return None
    sent: list[dict] = []

    async def send(message):
        if gone.is_set():
            raise OSError("client gone")
        sent.append(message)

    await response({"type": "http"}, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body_bytes = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    out = Answer(start["status"], {k.decode(): v.decode("latin-1") for k, v in start["headers"]}, body_bytes)
    if out.headers.get("content-type", "").startswith("text/event-stream"):
        out.events = [e[6:] for e in body_bytes.split(b"\n\n") if e.startswith(b"data: ")]
    return out


def in_flight(gw: Gateway) -> dict[str, int]:
    """Slots held per backend (what a leak would leave behind)."""
    return {name: s.inflight for name, s in gw.router.states.items()}
