"""The one interface every server kind implements; the core pipeline never branches on a kind.

An adapter owns what a kind of server does its own way: what its response headers' timing means,
where it reports timings and prompt-cache use, how its slots and queue are discovered, how its errors
map to OpenAI codes (and which of its 5xx the request caused), and which model name it reports.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping

import aiohttp
import orjson
from yarl import URL

from app.errors import UpstreamStatus
from app.upstream.adapters.report import NO_REPORT, BackendReport, ServerLoad, integer, ms

# How vLLM, TGI, llama.cpp, Ollama and OpenAI word a prompt that does not fit the model's context.
CONTEXT_LENGTH = re.compile(
    r"context length|context_length|context size|context window|maximum context|exceed_context|"
    r"must be <= \d+|too many tokens|prompt is too long|input validation error: `inputs` tokens",
    re.IGNORECASE,
)
_DISCOVERY_TIMEOUT_S = 2.0
# OpenAI's codes for statuses a backend sent without a usable code of its own.
_STATUS_CODES = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}


class Adapter:
    """The behaviour of a plain OpenAI-compatible server; each kind overrides what it does differently."""

    kind = "openai"
    provider = "openai"  # gen_ai.provider.name
    # Whether a stream's response headers wait for a slot (llama.cpp) rather than leave on arrival
    # (vLLM, TGI, OpenAI): then the time to headers is network plus the server's queue.
    headers_at_slot = False
    # Whether a prompt's KV cache stays with the slot that computed it (llama.cpp), rather than in a
    # block cache every running request shares (vLLM, SGLang, TGI): a sibling request reuses it only
    # once that slot is free again.
    prompt_cache_per_slot = False
    # Whether a request taking a slot stalls the decodes running beside it for its whole prefill
    # (llama.cpp runs a new prompt in the same steps as the running decodes, up to a batch of 2,048
    # tokens): a placement then costs each of them that prefill (app/routing/lookahead.py, `imposed`).
    prefill_stalls_decodes = False
    # Whether the server publishes its load (slots, running, waiting) for `discover` to read.
    publishes_load = False
    # Whether JSON clients are served from an upstream stream by default (a streamed call is the only
    # one llama.cpp cancels when its client goes; TGI's timing headers exist only on non-streamed ones).
    stream_upstream = False
    # Whether a connection may be reused after a finished stream. llama-server closes it after a
    # stream while advertising keep-alive; reusing it loses the next request.
    reuses_stream_connections = True

    # --- per-request timing -------------------------------------------------------------------
    def report_from_headers(self, headers: Mapping[str, str]) -> BackendReport:
        """Timing the server sent in response headers (non-streamed calls)."""
        return NO_REPORT

    def report_from_body(self, obj: Mapping) -> BackendReport:
        """Timing and prompt-cache use in a response body or a stream chunk (its usage or timings)."""
        return usage_report(obj)

    # --- load discovery -----------------------------------------------------------------------
    async def discover(self, session: aiohttp.ClientSession, root: URL, headers: Mapping[str, str]) -> ServerLoad | None:
        """The server's published slots and queue; None when it publishes nothing (or did not answer)."""
        return None

    # --- errors -------------------------------------------------------------------------------
    def classify_error(self, status: int, body: bytes, backend: str) -> UpstreamStatus:
        """The backend's error as the client should see it: OpenAI's type and code, and whether the
        request (not the backend) caused it."""
        err = UpstreamStatus.from_response(status, body, backend)
        if is_context_overflow(status, err.message):
            err.code, err.type, err.param = "context_length_exceeded", "invalid_request_error", err.param or "messages"
            err.status = 400
        elif err.code is None or err.code.isdigit():
            # Servers that put the HTTP status in `code` (llama.cpp, some proxies) say nothing more by it.
            err.code = _STATUS_CODES.get(status)
        err.request_caused = self.request_caused(status, err.message)
        return err

    def request_caused(self, status: int, message: str) -> bool | None:
        """Whether this failure is the request's fault: a 4xx other than 408/429 is; a 5xx only where
        the kind is known to answer one for what the request asked (None: unknown)."""
        if 400 <= status < 500:
            return status not in (408, 429)
        return None

    # --- naming -------------------------------------------------------------------------------
    def reported_model(self, model: object, configured: str) -> str | None:
        """The model name the server reported, as spans should show it."""
        return model if isinstance(model, str) else None


def is_context_overflow(status: int, message: str) -> bool:
    return status in (400, 413, 422) and bool(CONTEXT_LENGTH.search(message))


def usage_report(obj: Mapping) -> BackendReport:
    """Prompt-cache use from OpenAI-style usage: `usage.prompt_tokens_details.cached_tokens`."""
    usage = obj.get("usage")
    if not isinstance(usage, Mapping):
        return NO_REPORT
    details = usage.get("prompt_tokens_details")
    cached = integer(details.get("cached_tokens")) if isinstance(details, Mapping) else None
    prompt = integer(usage.get("prompt_tokens"))
    if cached is None:
        return NO_REPORT
    return BackendReport(prompt_tokens=prompt, output_tokens=integer(usage.get("completion_tokens")),
                         prompt_cached=cached,
                         prompt_processed=None if prompt is None else max(0, prompt - cached), source="usage")


def processing_header(headers: Mapping[str, str], name: str, source: str) -> BackendReport:
    server = ms(headers.get(name))
    return BackendReport(server_s=server, source=source) if server is not None else NO_REPORT


def server_root(base: URL) -> URL:
    """The server's root (where /metrics, /props, /info live) from an OpenAI base URL ending in /v1."""
    path = base.path.rstrip("/")
    return base.with_path(path.removesuffix("/v1"))


async def get(session: aiohttp.ClientSession, url: URL, headers: Mapping[str, str]) -> bytes | None:
    """A discovery GET's body, or None on any failure (discovery is best effort, never an error)."""
    try:
        async with asyncio.timeout(_DISCOVERY_TIMEOUT_S):
            async with session.get(url, headers=dict(headers)) as r:
                if r.status != 200:
                    await r.read()
                    return None
                return await r.read()
    except (aiohttp.ClientError, OSError, TimeoutError):
        return None


def json_or_none(data: bytes | None) -> object:
    if data is None:
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
