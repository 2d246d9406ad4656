"""Backend adapters, on payloads shaped exactly like the real servers' (values from real runs)."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest
from aiohttp import web
from yarl import URL

from app.upstream.adapters import ADAPTERS, adapter_for
from app.upstream.adapters.llamacpp import from_llamacpp, parse_llamacpp_metrics
from app.upstream.adapters.ollama import from_ollama
from app.upstream.adapters.tgi import from_tgi_headers
from app.upstream.adapters.vllm import parse_vllm_metrics

LLAMA = adapter_for("llamacpp")

# llama.cpp server, /v1/chat/completions, last chunk of a stream (b4000-era field set).
LLAMACPP_FINAL_CHUNK = {
    "choices": [{"finish_reason": "stop", "index": 0, "delta": {}}],
    "created": 1733000000, "id": "chatcmpl-x", "model": "smollm2", "system_fingerprint": "b4000-abc",
    "object": "chat.completion.chunk",
    "timings": {"cache_n": 20, "prompt_n": 13, "prompt_ms": 61.304, "prompt_per_token_ms": 4.7157, "prompt_per_second": 212.06,
                "predicted_n": 42, "predicted_ms": 352.907, "predicted_per_token_ms": 8.4025,
                "predicted_per_second": 119.01},
}

# TGI 2.x non-streamed response headers.
TGI_HEADERS = {
    "x-compute-type": "gpu+optimized", "x-compute-time": "0.503419218", "x-compute-characters": "140",
    "x-total-time": "503", "x-validation-time": "0", "x-queue-time": "12", "x-inference-time": "491",
    "x-time-per-token": "24", "x-prompt-tokens": "31", "x-generated-tokens": "20",
}

# Ollama native /api/chat final object.
OLLAMA = {
    "model": "llama3.2", "created_at": "2024-11-30T10:00:00Z", "message": {"role": "assistant", "content": "Hi"},
    "done_reason": "stop", "done": True, "total_duration": 5191566416, "load_duration": 2154458,
    "prompt_eval_count": 26, "prompt_eval_duration": 383809000, "eval_count": 298, "eval_duration": 4799921000,
}

VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.4125
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="m"} 0.0
"""


def test_llamacpp_timings():
    r = from_llamacpp(LLAMACPP_FINAL_CHUNK)
    assert r.prefill_s == pytest.approx(0.061304) and r.decode_s == pytest.approx(0.352907)
    assert r.queue_s is None  # llama.cpp does not report queueing
    assert (r.prompt_tokens, r.output_tokens, r.source) == (33, 42, "llamacpp")
    # Only 13 of the 33 prompt tokens were processed: 20 came from the server's KV cache.
    assert (r.prompt_processed, r.prompt_cached) == (13, 20)
    assert r.processed_share() == pytest.approx(13 / 33)


def test_tgi_headers():
    r = from_tgi_headers(TGI_HEADERS)
    assert r.queue_s == pytest.approx(0.012) and r.server_s == pytest.approx(0.503)
    assert (r.prompt_tokens, r.output_tokens) == (31, 20)


def test_tgi_reports_no_prefill_or_decode_of_its_own():
    # TGI's x-time-per-token is x-inference-time / x-generated-tokens (491 / 20 -> 24 above): the inference
    # time, prefill included, spread evenly. Nothing in its headers splits prefill from decode, so neither
    # is reported; a split made up from them was 1,000x off for a long prompt and a short answer.
    long_prompt = {**TGI_HEADERS, "x-inference-time": "2000", "x-time-per-token": "1000", "x-generated-tokens": "2"}
    for headers in (TGI_HEADERS, long_prompt):
        r = from_tgi_headers(headers)
        assert r.prefill_s is None and r.decode_s is None and r.queue_s == pytest.approx(0.012)


def test_ollama_durations():
    r = from_ollama(OLLAMA)
    assert r.prefill_s == pytest.approx(0.383809) and r.decode_s == pytest.approx(4.799921)
    assert r.queue_s == pytest.approx(0.002154458)
    assert adapter_for("ollama").report_from_body(OLLAMA).source == "ollama"


def test_nothing_reported():
    for adapter in ADAPTERS.values():
        assert not adapter.report_from_body({"choices": [], "usage": {"prompt_tokens": 1}})
    assert not from_tgi_headers({"content-type": "application/json"})


def test_vllm_metrics():
    load = parse_vllm_metrics(VLLM_METRICS)
    assert (load.running, load.waiting, load.kv_cache_usage) == (3.0, 7.0, 0.4125)


def test_vllm_prefix_cache_counters():
    load = parse_vllm_metrics('vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1200.0\n'
                              'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 900.0\n')
    assert (load.prefix_cache_queries, load.prefix_cache_hits) == (1200.0, 900.0)


# llama-server b1-0c1e570 /metrics (--metrics) after 7 requests on 3 system prompts, 4 of them reused.
LLAMACPP_METRICS = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 980
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache.
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 1253
llamacpp:prompt_seconds_total 5.49819
llamacpp:requests_processing 1
llamacpp:requests_deferred 2
"""


def test_llamacpp_metrics_give_load_and_prefix_cache_counters():
    load = parse_llamacpp_metrics(LLAMACPP_METRICS)
    assert (load.running, load.waiting) == (1.0, 2.0)
    # Looked up = processed + reused, as vLLM's prefix_cache_queries counts them.
    assert (load.prefix_cache_queries, load.prefix_cache_hits) == (2233.0, 1253.0)


def test_llamacpp_metrics_give_the_servers_own_prefill_rate_once_it_has_processed_a_prompt_or_two():
    load = parse_llamacpp_metrics(LLAMACPP_METRICS)
    assert load.prefill_tokens_per_s == pytest.approx(980 / 5.49819)
    fresh = "llamacpp:prompt_tokens_total 0\nllamacpp:prompt_seconds_total 0\n"
    assert parse_llamacpp_metrics(fresh).prefill_tokens_per_s is None
    assert parse_llamacpp_metrics("llamacpp:prompt_tokens_total 40\nllamacpp:prompt_seconds_total 0.2\n").prefill_tokens_per_s is None


def test_llamacpp_metrics_without_the_cached_counter_claim_no_cache_figures():
    load = parse_llamacpp_metrics("llamacpp:prompt_tokens_total 980\nllamacpp:requests_processing 0\n")
    assert load.running == 0.0 and load.prefix_cache_queries is None and load.prefix_cache_hits is None


def test_vllm_metrics_older_kv_name():
    load = parse_vllm_metrics('vllm:gpu_cache_usage_perc{model_name="m"} 0.5\n')
    assert load.kv_cache_usage == 0.5 and load.running is None


def test_cached_tokens_from_openai_style_usage():
    usage = {"usage": {"prompt_tokens": 1000, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 768}}}
    for kind in ("openai", "vllm"):
        r = adapter_for(kind).report_from_body(usage)
        assert (r.prompt_processed, r.prompt_cached, r.prompt_tokens) == (232, 768, 1000)


def test_openai_processing_ms_is_the_servers_total():
    r = adapter_for("openai").report_from_headers({"openai-processing-ms": "412"})
    assert r.server_s == pytest.approx(0.412) and r.prefill_s is None


def test_only_llamacpp_sends_headers_at_slot_assignment():
    assert [k for k, a in ADAPTERS.items() if a.headers_at_slot] == ["llamacpp"]


# llama.cpp's own error bodies (b4000-era and later), with the HTTP status in `code`.
LLAMA_CONTEXT = {"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it",
                           "type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": 4096}}
LLAMA_IMAGE = {"error": {"code": 500, "message": "image input is not supported - hint: if this is unexpected, "
                         "you may need to provide the mmproj", "type": "server_error"}}
LLAMA_EMBED = {"error": {"code": 501, "message": "This server does not support embeddings. Start it with `--embeddings`",
                         "type": "not_supported_error"}}


def classify(kind: str, status: int, body: dict):
    return adapter_for(kind).classify_error(status, orjson.dumps(body), "b")


def test_context_overflow_is_context_length_exceeded_not_a_status_number():
    err = classify("llamacpp", 400, LLAMA_CONTEXT)
    assert (err.status, err.code, err.type) == (400, "context_length_exceeded", "invalid_request_error")
    vllm = {"object": "error", "message": "This model's maximum context length is 2048 tokens. However, you requested "
            "3000 tokens.", "type": "BadRequestError", "param": None, "code": 400}
    assert classify("vllm", 400, vllm).code == "context_length_exceeded"
    tgi = {"error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 5000",
           "error_type": "validation"}
    assert classify("tgi", 422, tgi).code == "context_length_exceeded"


def test_a_status_number_in_code_never_reaches_the_client():
    err = classify("llamacpp", 400, {"error": {"code": 400, "message": "bad temperature", "type": "invalid_request_error"}})
    assert err.code is None and err.status == 400
    assert classify("openai", 429, {"error": {"message": "slow down", "code": 429}}).code == "rate_limit_exceeded"


def test_an_image_a_text_only_llamacpp_model_cannot_read_is_the_clients_400_not_a_500():
    # llama-server answers 500 (no --mmproj); OpenAI and Anthropic answer an image to a text-only model with a 400.
    err = classify("llamacpp", 500, LLAMA_IMAGE)
    assert (err.status, err.type, err.code, err.request_caused) == (400, "invalid_request_error", None, True)
    assert err.message.startswith("image input is not supported")
    other = classify("llamacpp", 500, {"error": {"code": 500, "message": "failed to parse tool call", "type": "server_error"}})
    assert other.status == 500 and other.request_caused


def test_llamacpp_request_caused_5xx():
    assert classify("llamacpp", 500, LLAMA_IMAGE).request_caused
    assert classify("llamacpp", 501, LLAMA_EMBED).request_caused
    assert classify("llamacpp", 500, {"error": {"code": 500, "message": "kv cache full", "type": "server_error"}}).request_caused is None
    # Another kind's 500 is not known to be the request's (None: the same-status-everywhere rule decides).
    assert classify("vllm", 500, LLAMA_IMAGE).request_caused is None
    assert classify("vllm", 400, {"error": {"message": "bad"}}).request_caused is True
    assert classify("vllm", 429, {"error": {"message": "busy"}}).request_caused is False


def test_llamacpp_model_path_is_not_a_model_name():
    assert LLAMA.reported_model("/models/smollm2/model.gguf", "smollm2") == "smollm2"
    assert LLAMA.reported_model("smol", "smollm2") == "smol"


LLAMA_METRICS = """\
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 3
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
"""


async def _serve_llamacpp_discovery() -> tuple[web.AppRunner, int]:
    async def health(request):
        return web.json_response({"status": "ok"})

    async def props(request):
        return web.json_response({"total_slots": 4, "model_path": "m.gguf"})

    async def metrics(request):
        return web.Response(text=LLAMA_METRICS)

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/props", props)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]


def test_llamacpp_discovers_slots_queue_and_network():
    async def main():
        runner, port = await _serve_llamacpp_discovery()
        try:
            async with aiohttp.ClientSession() as session:
                return await LLAMA.discover(session, URL(f"http://127.0.0.1:{port}"), {})
        finally:
            await runner.cleanup()

    load = asyncio.run(main())
    assert (load.slots, load.running, load.waiting) == (4, 3.0, 2.0)
    assert load.rtt_s is not None and 0 < load.rtt_s < 1.0
