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
    """TGI's timing headers: its queue and its own total. Prefill and decode are not reported: TGI's
    x-time-per-token is x-inference-time divided by the tokens generated (prefill included, spread over
    them), so nothing in its headers splits the two (stages estimate them within the measured total)."""
    queue = ms(headers.get("x-queue-time"))
    inference = ms(headers.get("x-inference-time"))
    if queue is None and inference is None:
        return NO_REPORT
    prompt = integer(headers.get("x-prompt-tokens"))
    generated = integer(headers.get("x-generated-tokens"))
    return BackendReport(queue, None, None, prompt, generated, server_s=ms(headers.get("x-total-time")),
                         source="tgi")
