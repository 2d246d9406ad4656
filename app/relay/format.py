"""How a client API's stream events classify and frame: the seam a client protocol adapter plugs into.

The relay (app.relay.loop) and its filters (app.relay.filters) never look inside an event themselves:
they ask a `StreamFormat` whether a data event is an error, carries usage, finishes choices or names
the model, and how to frame an event, the end of the stream and an error for the client. Each client
protocol (app/protocols) owns its format as `protocol.sse`, beside the rest of what its API decides:
OpenAI's chat and text completions (`data: {...}` events ending with `data: [DONE]`) in
app.protocols.openai, Anthropic's Messages and OpenAI's Responses (named events) in theirs.
Every method is called per event on the hot path: a quick byte test first, parsing only on a hit.
"""

from __future__ import annotations

import re
from typing import Protocol

from app.errors import GatewayError


class StreamFormat(Protocol):
    done: bytes  # the event that ends a complete stream (b"" where the API has none)
    # Whether the first event names the model when any does (else each event is asked until one does:
    # llama.cpp's Responses stream names it only in response.completed).
    model_first: bool

    def frame(self, data: bytes) -> bytes:
        """One data event as the client's stream carries it."""

    def error_event(self, err: GatewayError, after: bytes = b"") -> bytes:
        """The event that ends a broken stream, in the client API's error shape; `after` is the last bytes with
        events the client got (Responses numbers its events: the error continues their count)."""

    def is_error(self, data: bytes) -> bool:
        """An upstream data event that reports an error mid-stream."""

    def has_usage(self, data: bytes) -> bool:
        """Whether the event may carry a usage report (then it is parsed)."""

    def finish_reasons(self, data: bytes) -> list[bytes]:
        """The finish reasons of the choices this event finishes (usually none)."""

    def model(self, data: bytes) -> re.Match[bytes] | None:
        """The event's model field (group 1: the name), for the alias rename."""

    def is_content(self, data: bytes) -> bool:
        """Whether the event is the protocol's first content (its TTFT), asked only until one is."""
