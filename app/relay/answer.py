"""A whole JSON answer as the client's response: its head and body in two ASGI messages, nothing else.

Starlette's Response builds its headers through MutableHeaders and runs its after-work as a BackgroundTask;
on the gateway's hottest path (every JSON answer) that cost more than the answer's own bookkeeping. This
one takes its headers as they are and calls `on_sent` once the body is handed to the server.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.relay.loop import header_value

_JSON_TYPE = (b"content-type", b"application/json")


class JsonResponse(Response):
    """`body` as application/json with `headers`; `on_sent()` runs after the body was sent (or its
    sending failed), once."""

    media_type = "application/json"

    def __init__(self, body: bytes, status: int, headers: dict[str, str],
                 on_sent: Callable[[], None] | None = None) -> None:
        self.body, self.status_code, self.background, self._on_sent = body, status, None, on_sent
        raw = [(b"content-length", str(len(body)).encode()), _JSON_TYPE]
        raw += [(k.encode("latin-1"), header_value(v)) for k, v in headers.items()]
        self.raw_headers = raw

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            await send({"type": "http.response.body", "body": self.body})
        finally:
            if self._on_sent is not None:
                on_sent, self._on_sent = self._on_sent, None
                on_sent()
        if self.background is not None:
            await self.background()
