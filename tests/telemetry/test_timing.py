"""Backend timing parsers, on payloads shaped exactly like the real servers' (values from real runs)."""

from __future__ import annotations

import pytest

from app.telemetry.timing import (
    from_body,
    from_llamacpp,
    from_ollama,
    from_tgi_headers,
    parse_vllm_metrics,
)

# llama.cpp server, /v1/chat/completions, last chunk of a stream (b4000-era field set).
LLAMACPP_FINAL_CHUNK = {
    "choices": [{"finish_reason": "stop", "index": 0, "delta": {}}],
    "created": 1733000000, "id": "chatcmpl-x", "model": "smollm2", "system_fingerprint": "b4000-abc",
    "object": "chat.completion.chunk",
    "timings": {"prompt_n": 13, "prompt_ms": 61.304, "prompt_per_token_ms": 4.7157, "prompt_per_second": 212.06,
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
    assert (r.prompt_tokens, r.output_tokens, r.source) == (13, 42, "llamacpp")


def test_tgi_headers():
    r = from_tgi_headers(TGI_HEADERS)
    assert r.queue_s == pytest.approx(0.012)
    assert r.decode_s == pytest.approx(0.024 * 19)
    assert r.prefill_s + r.decode_s == pytest.approx(0.491)
    assert (r.prompt_tokens, r.output_tokens) == (31, 20)


def test_ollama_durations():
    r = from_ollama(OLLAMA)
    assert r.prefill_s == pytest.approx(0.383809) and r.decode_s == pytest.approx(4.799921)
    assert r.queue_s == pytest.approx(0.002154458)
    assert from_body(OLLAMA).source == "ollama"


def test_nothing_reported():
    assert not from_body({"choices": [], "usage": {"prompt_tokens": 1}})
    assert not from_tgi_headers({"content-type": "application/json"})


def test_vllm_metrics():
    load = parse_vllm_metrics(VLLM_METRICS)
    assert (load.running, load.waiting, load.kv_cache_usage) == (3.0, 7.0, 0.4125)


def test_vllm_metrics_older_kv_name():
    load = parse_vllm_metrics('vllm:gpu_cache_usage_perc{model_name="m"} 0.5\n')
    assert load.kv_cache_usage == 0.5 and load.running is None
