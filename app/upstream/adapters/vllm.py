"""vLLM: nothing per request over HTTP beyond usage; its /metrics has running and waiting requests,
KV-cache use and prefix-cache counters."""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp
from yarl import URL

from app.upstream.adapters.base import Adapter, get
from app.upstream.adapters.prometheus import gauges
from app.upstream.adapters.report import ServerLoad


class VllmAdapter(Adapter):
    kind = "vllm"
    publishes_load = True
    stream_upstream = True
    provider = "vllm"

    async def discover(self, session: aiohttp.ClientSession, root: URL, headers: Mapping[str, str]) -> ServerLoad | None:
        data = await get(session, root / "metrics", headers)
        return None if data is None else parse_vllm_metrics(data.decode(errors="replace"))


def parse_vllm_metrics(text: str) -> ServerLoad:
    """vLLM's /metrics: requests running and waiting, and KV-cache use (both names vLLM has used).
    vLLM does not publish its batch size (max_num_seqs), so slots stay unknown."""
    values = gauges(text)
    kv = values.get("vllm:kv_cache_usage_perc", values.get("vllm:gpu_cache_usage_perc"))
    # Prefix-cache counters (tokens), with or without the exposition's _total suffix.
    queries = values.get("vllm:prefix_cache_queries_total", values.get("vllm:prefix_cache_queries"))
    hits = values.get("vllm:prefix_cache_hits_total", values.get("vllm:prefix_cache_hits"))
    return ServerLoad(None, values.get("vllm:num_requests_running"), values.get("vllm:num_requests_waiting"), kv,
                      "vllm /metrics", prefix_cache_queries=queries, prefix_cache_hits=hits)
