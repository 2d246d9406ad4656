"""Hugging Face TGI: timing headers on non-streamed answers, /info for its limits, /metrics for its queue."""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp
from yarl import URL

from app.upstream.adapters.base import Adapter, get, json_or_none
from app.upstream.adapters.prometheus import gauges
from app.upstream.adapters.report import NO_REPORT, BackendReport, ServerLoad, integer, ms


class TgiAdapter(Adapter):
    kind = "tgi"
    publishes_load = True
    provider = "tgi"

    def report_from_headers(self, headers: Mapping[str, str]) -> BackendReport:
        return from_tgi_headers(headers)

    async def discover(self, session: aiohttp.ClientSession, root: URL, headers: Mapping[str, str]) -> ServerLoad | None:
        info = json_or_none(await get(session, root / "info", headers))
        if not isinstance(info, Mapping):
            return None
        metrics = await get(session, root / "metrics", headers)
        values = gauges(metrics.decode(errors="replace")) if metrics is not None else {}
        # TGI batches dynamically up to max_batch_size when set; max_concurrent_requests only bounds
        # admission (beyond it TGI answers 429), so it is not a slot count.
        return ServerLoad(integer(info.get("max_batch_size")), values.get("tgi_batch_current_size"),
                          values.get("tgi_queue_size"), None, "tgi /info + /metrics")


def from_tgi_headers(headers: Mapping[str, str]) -> BackendReport:
    """TGI's timing headers; prefill is inference time less the per-token decode time."""
    queue = ms(headers.get("x-queue-time"))
    inference = ms(headers.get("x-inference-time"))
    per_token = ms(headers.get("x-time-per-token"))
    generated = integer(headers.get("x-generated-tokens"))
    if queue is None and inference is None:
        return NO_REPORT
    decode = prefill = None
    if inference is not None and per_token is not None and generated:
        decode = min(inference, per_token * max(0, generated - 1))
        prefill = inference - decode
    prompt = integer(headers.get("x-prompt-tokens"))
    return BackendReport(queue, prefill, decode, prompt, generated, server_s=ms(headers.get("x-total-time")),
                         source="tgi")
