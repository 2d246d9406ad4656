"""llama.cpp's llama-server: headers at slot assignment, `timings` with prompt-cache use, /props /slots /metrics.

Checked against a real llama-server (shared/NOTES.md): a stream's response headers leave when a slot
takes the request, so the time to headers is network plus queue; `timings.prompt_n` counts only the
prompt tokens processed and `cache_n` those reused from the KV cache; a request-caused failure can be a
500 (an image sent to a text-only model) or a 501 (an endpoint started without its flag).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import aiohttp
from yarl import URL

from app.errors import UpstreamStatus
from app.upstream.adapters.base import Adapter, get, json_or_none
from app.upstream.adapters.prometheus import gauges
from app.upstream.adapters.report import NO_REPORT, BackendReport, ServerLoad, integer, ms

# 500s llama-server answers for what the request asked, not for being unwell.
_REQUEST_CAUSED_500 = ("image input is not supported", "multimodal", "mmproj", "not supported",
                       "failed to parse", "invalid", "grammar", "tool", "template")
# Of those, the ones that say the request holds media its model cannot read (a model started without --mmproj):
# a 400 invalid_request_error for the client, as OpenAI and Anthropic answer an image sent to a text-only model.
_UNREADABLE_MEDIA = ("image input is not supported", "audio input is not supported")


class LlamaCppAdapter(Adapter):
    kind = "llamacpp"
    publishes_load = True
    stream_upstream = True
    provider = "llama_cpp"
    headers_at_slot = True
    reuses_stream_connections = False
    prompt_cache_per_slot = True
    prefill_stalls_decodes = True

    def report_from_body(self, obj: Mapping) -> BackendReport:
        return from_llamacpp(obj)

    def classify_error(self, status: int, body: bytes, backend: str) -> UpstreamStatus:
        err = super().classify_error(status, body, backend)
        if status == 500 and any(s in err.message.lower() for s in _UNREADABLE_MEDIA):
            err.status, err.type, err.code = 400, "invalid_request_error", None
        return err

    def request_caused(self, status: int, message: str) -> bool | None:
        if status == 501:
            return True  # a feature the server was not started with: the same on every try
        if status == 500 and any(s in message.lower() for s in _REQUEST_CAUSED_500):
            return True
        return super().request_caused(status, message)

    async def discover(self, session: aiohttp.ClientSession, root: URL, headers: Mapping[str, str]) -> ServerLoad | None:
        # /health is answered by the HTTP thread at once, busy or not: its round trip is the network (the
        # better of two, so one scheduling hiccup here is not taken for the network).
        rtt = None
        for _ in range(2):
            started = time.perf_counter()
            if await get(session, root / "health", headers) is not None:
                took = time.perf_counter() - started
                rtt = took if rtt is None else min(rtt, took)
        props = json_or_none(await get(session, root / "props", headers))
        slots = integer(props.get("total_slots")) if isinstance(props, Mapping) else None
        load = ServerLoad()
        metrics = await get(session, root / "metrics", headers)  # served with --metrics
        if metrics is not None:
            load = parse_llamacpp_metrics(metrics.decode(errors="replace"))
        running = load.running
        if running is None:
            per_slot = json_or_none(await get(session, root / "slots", headers))  # served with --slots
            if isinstance(per_slot, list):
                running = float(sum(1 for s in per_slot if isinstance(s, Mapping) and _busy(s)))
                slots = slots or len(per_slot)
        if slots is None and running is None:
            return None
        return ServerLoad(slots, running, load.waiting, None, "llamacpp /props + /metrics", rtt,
                          load.prefix_cache_queries, load.prefix_cache_hits, load.prefill_tokens_per_s)

    def reported_model(self, model: object, configured: str) -> str | None:
        # Without --alias, llama-server reports the GGUF file's path: the configured name says more.
        if isinstance(model, str) and (model.endswith(".gguf") or "/" in model):
            return configured
        return super().reported_model(model, configured)


# A server's published prefill rate counts once it has processed this many prompt tokens: a prompt or two's worth.
PUBLISHED_RATE_MIN_TOKENS = 256


def parse_llamacpp_metrics(text: str) -> ServerLoad:
    """llama-server's /metrics: requests running and deferred, and its prompt-token counters. The prompt
    tokens it processed and those it reused from its slots or its host-memory prompt cache
    (`prompt_tokens_cached_total`, newer builds) sum to the prompt tokens it looked up: the counters
    vLLM's prefix cache has, so the share it reused between scrapes covers every client of the server,
    not only this gateway."""
    values = gauges(text)
    processed, cached = values.get("llamacpp:prompt_tokens_total"), values.get("llamacpp:prompt_tokens_cached_total")
    queries = processed + cached if processed is not None and cached is not None else None
    seconds = values.get("llamacpp:prompt_seconds_total")
    # Its prefill rate over what it has processed (a server fresh from its start has none to say).
    rate = processed / seconds if processed and seconds and processed >= PUBLISHED_RATE_MIN_TOKENS else None
    return ServerLoad(None, values.get("llamacpp:requests_processing"), values.get("llamacpp:requests_deferred"),
                      prefix_cache_queries=queries, prefix_cache_hits=cached if queries is not None else None,
                      prefill_tokens_per_s=rate)


def _busy(slot: Mapping) -> bool:
    if "is_processing" in slot:
        return bool(slot["is_processing"])
    return slot.get("state") not in (None, 0)  # older servers: 0 idle, 1 processing


def from_llamacpp(obj: Mapping) -> BackendReport:
    """llama.cpp's `timings` object, from a response body or a stream's final chunk."""
    t = obj.get("timings")
    if not isinstance(t, Mapping):
        return NO_REPORT
    processed, cached = integer(t.get("prompt_n")), integer(t.get("cache_n"))
    usage = obj.get("usage")
    prompt = integer(usage.get("prompt_tokens")) if isinstance(usage, Mapping) else None
    if prompt is None and processed is not None:
        prompt = processed + (cached or 0)
    return BackendReport(
        prefill_s=ms(t.get("prompt_ms")),
        decode_s=ms(t.get("predicted_ms")),
        prompt_tokens=prompt,
        output_tokens=integer(t.get("predicted_n")),
        prompt_processed=processed,
        prompt_cached=cached,
        source="llamacpp",
    )
