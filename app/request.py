"""Parse a client's OpenAI body just enough to route it; everything else passes through verbatim."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import orjson

from app.errors import InvalidRequest


class Endpoint(Enum):
    """The proxied endpoints, with the path appended to a backend's base_url."""

    CHAT = "chat/completions"
    COMPLETIONS = "completions"
    EMBEDDINGS = "embeddings"

    @property
    def streams(self) -> bool:
        return self is not Endpoint.EMBEDDINGS


@dataclass(slots=True)
class ParsedRequest:
    endpoint: Endpoint
    alias: str
    body: dict
    stream: bool
    # Whether the client asked for the final usage chunk (stream_options.include_usage).
    client_wants_usage: bool

    def upstream_body(self, backend_model: str, request_usage: bool) -> bytes:
        """The body for a backend: the alias mapped to its model name, stream usage asked for if wanted."""
        body = self.body
        body["model"] = backend_model
        if self.stream and request_usage and not self.client_wants_usage:
            opts = body.get("stream_options")
            body["stream_options"] = {**opts, "include_usage": True} if isinstance(opts, dict) else {"include_usage": True}
        return orjson.dumps(body)


def parse_request(endpoint: Endpoint, raw: bytes) -> ParsedRequest:
    """Validate the fields the gateway acts on; raise InvalidRequest naming the bad one."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise InvalidRequest("request body must be a JSON object", code="invalid_json")
    alias = body.get("model")
    if not isinstance(alias, str) or not alias:
        raise InvalidRequest("'model' is required and must be a non-empty string", param="model")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise InvalidRequest("'stream' must be a boolean", param="stream")
    if stream and not endpoint.streams:
        raise InvalidRequest(f"'stream' is not supported on /v1/{endpoint.value}", param="stream")
    wants_usage = False
    opts = body.get("stream_options")
    if opts is not None:
        if not isinstance(opts, dict):
            raise InvalidRequest("'stream_options' must be an object", param="stream_options")
        if not stream:
            raise InvalidRequest("'stream_options' is only allowed when 'stream' is true", param="stream_options")
        wants_usage = opts.get("include_usage") is True
    _check_shape(endpoint, body)
    return ParsedRequest(endpoint, alias, body, stream, wants_usage)


def _check_shape(endpoint: Endpoint, body: dict) -> None:
    if endpoint is Endpoint.CHAT:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise InvalidRequest("'messages' must be a non-empty array", param="messages")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise InvalidRequest(f"messages[{i}] must be an object with a string 'role'", param=f"messages[{i}]")
    elif endpoint is Endpoint.COMPLETIONS:
        if "prompt" not in body:
            raise InvalidRequest("'prompt' is required", param="prompt")
    elif "input" not in body:
        raise InvalidRequest("'input' is required", param="input")
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise InvalidRequest("'max_tokens' must be a positive integer", param="max_tokens")
