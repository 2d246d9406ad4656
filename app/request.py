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

    def upstream_stream_body(self, backend_model: str) -> bytes:
        """The body of a JSON client's call streamed upstream (with usage), to be assembled back."""
        return orjson.dumps({**self.body, "model": backend_model, "stream": True,
                             "stream_options": {"include_usage": True}})

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
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:  # cheap bound first: deep bodies are rare
        _check_depth(body)
    return ParsedRequest(endpoint, alias, body, stream, wants_usage)


# orjson serialises at most 254 levels; a deeper body parses but could never be sent upstream (nor
# keyed for the cache), so it is refused here, before any slot is taken.
MAX_DEPTH = 128


def _check_depth(body: dict) -> None:
    stack: list[tuple[dict | list, int]] = [(body, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InvalidRequest(f"request body is nested more than {MAX_DEPTH} levels deep", code="invalid_json")
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))


def _check_shape(endpoint: Endpoint, body: dict) -> None:
    if endpoint is Endpoint.CHAT:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise InvalidRequest("'messages' must be a non-empty array", param="messages")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise InvalidRequest(f"messages[{i}] must be an object with a string 'role'", param=f"messages[{i}]")
            _check_content(m.get("content"), f"messages[{i}].content")
    elif endpoint is Endpoint.COMPLETIONS:
        if "prompt" not in body:
            raise InvalidRequest("'prompt' is required", param="prompt")
        if not _is_prompt(body["prompt"]):
            raise InvalidRequest("'prompt' must be a string, an array of strings, or an array (of arrays) of token ids",
                                 param="prompt")
        if "messages" in body:
            raise InvalidRequest("'messages' is not a parameter of /v1/completions (use 'prompt')", param="messages")
    elif "input" not in body:
        raise InvalidRequest("'input' is required", param="input")
    elif not _is_prompt(body["input"]) or body["input"] in ("", []):
        raise InvalidRequest("'input' must be a non-empty string, an array of strings, or an array (of arrays) of "
                             "token ids", param="input")
    n = body.get("n")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        raise InvalidRequest("'n' must be a positive integer", param="n")
    # Only the type is checked: the range is the backend's to judge (llama.cpp takes -1 for "no limit").
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool)):
        raise InvalidRequest("'max_tokens' must be an integer", param="max_tokens")


def _check_content(content: object, param: str) -> None:
    """A message's content: a string, null (an assistant turn with tool calls), or an array of parts,
    each an object with a string `type`, and a string `text` for text parts."""
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise InvalidRequest(f"'{param}' must be a string or an array of content parts", param=param)
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise InvalidRequest(f"'{where}' must be an object with a string 'type'", param=where)
        if part["type"] == "text" and not isinstance(part.get("text"), str):
            raise InvalidRequest(f"'{where}.text' must be a string", param=f"{where}.text")


def _is_prompt(value: object) -> bool:
    if isinstance(value, str):
        return True
    if not isinstance(value, list):
        return False
    if all(isinstance(v, str) for v in value):
        return True
    if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return True
    return all(isinstance(v, list) and v and all(isinstance(t, int) and not isinstance(t, bool) for t in v) for v in value)
