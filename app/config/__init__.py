"""Typed gateway configuration, loaded and validated once at start-up."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

Flavor = Literal["openai", "vllm", "tgi", "llamacpp", "ollama"]
# The client APIs a backend may speak natively (app.protocols: chat, completions, embeddings, and the
# Responses and Anthropic Messages APIs).
ApiName = Literal["chat", "completions", "embeddings", "responses", "messages"]
# What each kind of server speaks unless a backend says otherwise: vLLM and Ollama serve all of them; TGI
# serves OpenAI's chat and text completions; the hosted OpenAI API adds Responses to its own. llama.cpp serves
# a /v1/responses that clients break on (its stream events carry no output_index, content_index or
# sequence_number: the openai SDK's responses.stream() raises TypeError; an answer cut by max_output_tokens says
# `completed`; usage has no output_tokens_details; ggml-org/llama.cpp#20607): Responses reach it translated to
# its chat completions, as its own endpoint does inside the server, unless a backend lists `responses` itself.
DEFAULT_APIS: dict[str, tuple[ApiName, ...]] = {
    "llamacpp": ("chat", "completions", "embeddings", "messages"),
    "vllm": ("chat", "completions", "embeddings", "responses", "messages"),
    "ollama": ("chat", "completions", "embeddings", "responses", "messages"),
    "tgi": ("chat", "completions"),
    "openai": ("chat", "completions", "embeddings", "responses"),
}
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$", max_length=128)]

from app.config.limits import LimitsConfig, ScopeLimits
from app.config.urls import (
    ca_bundle_problem,
    checked_redis_url,
    one_redis_source,
    port_problem,
    proxy_url_problem,
    redis_url_problem,
)

_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerConfig(Strict):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    max_body_bytes: int = Field(4 * 1024 * 1024, gt=0)
    # How long a request may wait for a free slot when every backend of its alias is at max_concurrency.
    queue_timeout_s: float = Field(30.0, gt=0)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    access_log: bool = False
    # On SIGTERM: stop accepting, let in-flight calls (streams too) finish for up to this long, then close.
    shutdown_grace_s: float = Field(30.0, ge=0)
    # Intake limits (app/http/intake.py): a client may take this long to send its headers, then its body.
    header_timeout_s: float = Field(10.0, gt=0)
    body_timeout_s: float = Field(30.0, gt=0)
    max_header_bytes: int = Field(64 * 1024, ge=1024)
    # Idle keep-alive connections kept open (the oldest is closed beyond this) and how long each may idle.
    # Longer than clients and proxies keep an idle connection (httpx, so the OpenAI SDK: 5 s; Node's agent 5 s,
    # undici 4 s; aiohttp 15 s; an AWS load balancer 60 s), so they drop it first: one closed here as a client
    # reuses it fails that client's request (at 5 s, as long as httpx's, a real bench run lost one so). Held
    # idle, a connection costs ~12 kB and a descriptor, and max_idle_connections bounds them.
    max_idle_connections: int = Field(256, ge=0)
    keep_alive_s: float = Field(75.0, gt=0)
    # All client connections; unset: half the process's file-descriptor limit.
    max_connections: int | None = Field(None, ge=1)


class ClientKey(Strict):
    tenant: Name
    # Keys are stored as the SHA-256 hex digest of the bearer token: `slipstream hash-key` prints it.
    key_sha256: str
    # Aliases this key may use; empty means all.
    models: tuple[str, ...] = ()
    # This key's own limits, on top of its tenant's (see the `limits` section).
    limits: ScopeLimits = ScopeLimits()

    @model_validator(mode="after")
    def _digest_shape(self) -> ClientKey:
        if not _SHA256_HEX.match(self.key_sha256):
            raise ValueError("key_sha256 must be 64 lowercase hex characters (sha256 of the key)")
        return self


class AuthConfig(Strict):
    # "open" serves every caller as tenant `open_tenant`: for local use only.
    mode: Literal["keys", "open"] = "keys"
    open_tenant: Name = "local"
    clients: tuple[ClientKey, ...] = ()
    # SHA-256 digests of the keys that may call /admin/*; none configured means the admin API is off.
    admin_keys: tuple[str, ...] = ()
    # SHA-256 digests of keys for /metrics and /readyz; none configured leaves them open (for a
    # private scrape network). Admin keys are accepted there too.
    ops_keys: tuple[str, ...] = ()
    # The environment variable holding the secret console sessions are signed with, shared by every replica
    # (and worker) so a sign-in on one is valid on all; unset, each process signs with its own.
    console_secret_env: str | None = Field(None, min_length=1)
    # Resolved from console_secret_env at load time, never serialised.
    console_secret: SecretStr | None = Field(None, exclude=True, repr=False)

    @model_validator(mode="after")
    def _keys_needed(self) -> AuthConfig:
        if self.mode == "keys" and not self.clients:
            raise ValueError("mode 'keys' needs at least one entry in clients (or set mode: open)")
        digests = [c.key_sha256 for c in self.clients]
        if len(set(digests)) != len(digests):
            raise ValueError("the same key_sha256 appears twice in clients")
        for d in self.admin_keys:
            if not _SHA256_HEX.match(d):
                raise ValueError("admin_keys entries must be 64 lowercase hex characters (sha256 of the key)")
        for d in self.ops_keys:
            if not _SHA256_HEX.match(d):
                raise ValueError("ops_keys entries must be 64 lowercase hex characters (sha256 of the key)")
        return self


class Timeouts(Strict):
    connect_s: float = Field(5.0, gt=0)
    # Streams: from sending the request to the first event. Non-streamed calls only have `total_s`,
    # since backends send nothing until the whole answer is ready.
    first_token_s: float = Field(60.0, gt=0)
    # Streams: the longest silence allowed between two events.
    idle_s: float = Field(30.0, gt=0)
    # One attempt, start to end.
    total_s: float = Field(600.0, gt=0)


class TimeoutOverrides(Strict):
    """Per-alias overrides of the backends' timeouts; unset keys keep the backend's value."""

    connect_s: float | None = Field(None, gt=0)
    first_token_s: float | None = Field(None, gt=0)
    idle_s: float | None = Field(None, gt=0)
    total_s: float | None = Field(None, gt=0)

    def apply(self, base: Timeouts) -> Timeouts:
        return base.model_copy(update={k: v for k, v in self.model_dump().items() if v is not None})


class RetryPolicy(Strict):
    # Attempts in all, the first included, within one alias; then the fallback chain takes over.
    max_attempts: int = Field(3, ge=1, le=10)
    # Exponential backoff with full jitter: sleep uniform(0, min(max, base * 2**retry)).
    backoff_base_s: float = Field(0.05, ge=0)
    backoff_max_s: float = Field(2.0, ge=0)
    # Backend statuses worth another attempt (connect errors and first-token timeouts always are).
    retry_on_status: tuple[int, ...] = (429, 500, 502, 503, 504)


class BackendConfig(Strict):
    base_url: str = Field(pattern=r"^https?://[^\s/]+(/[^\s]*)?$")
    flavor: Flavor = "openai"
    model: str = Field(min_length=1, description="the model name the backend knows")
    api_key_env: str | None = None
    max_concurrency: int = Field(256, gt=0)
    # Share of traffic under the `weighted` strategy, relative to the alias's other backends.
    weight: float = Field(1.0, gt=0)
    # Ask the backend for a usage chunk on streams even when the client did not (it is then hidden
    # from the client); turn off for servers that reject stream_options.
    stream_usage: bool = True
    # Stream from the backend for JSON clients too, and assemble the JSON answer: a client that leaves
    # (or a deadline) frees the backend's slot at once, and TTFT is learned from JSON traffic. Unset: the
    # server kind's default (on for llamacpp and vllm; needs stream_usage for the answer's usage).
    stream_upstream: bool | None = None
    timeouts: Timeouts = Timeouts()
    # A `slipstream bench` report (JSON) whose fitted figures seed this backend's latency model, so
    # routing is good from the first request. Relative paths are relative to the config file.
    latency_prior: str | None = None
    # The backend's prompt (KV) cache in tokens, which bounds the gateway's index of what it holds
    # (prefix-aware routing); unset, it is learned from the cached tokens the backend reports.
    prefix_cache_tokens: int | None = Field(None, gt=0)
    # Entries of that index older than this are assumed evicted (Dynamo's default).
    prefix_ttl_s: float = Field(120.0, gt=0)
    # Relative cost of serving here: a request with a latency target goes to the cheapest backend
    # predicted to meet it (best fit), not always to the fastest.
    cost: float = Field(1.0, ge=0)
    # The client APIs this backend serves natively: a request in one of them passes through unchanged
    # (apart from `model`); a Responses or Messages request to a backend without it is translated to chat
    # completions. Unset: the flavour's default (DEFAULT_APIS).
    apis: tuple[ApiName, ...] | None = None
    # A PEM file of the certificate authorities this https backend's certificate is checked against, instead of
    # the system's (a private CA, a self-signed vLLM). Relative paths are relative to the config file.
    ca_bundle: str | None = None
    # The HTTP proxy this backend is reached through, http://[user:password@]host:port: an https backend is
    # tunnelled (CONNECT; TLS runs end to end with the backend), an http one forwarded. HTTPS_PROXY and the like
    # are never read: each backend names its own. proxy_env: the environment variable holding that URL instead
    # (a proxy password stays out of the file). Never echoed: the URL may carry a password.
    proxy: SecretStr | None = None
    proxy_env: str | None = Field(None, min_length=1)
    # Resolved from api_key_env at load time, never serialised.
    api_key: SecretStr | None = Field(None, exclude=True, repr=False)

    @field_validator("base_url")
    @classmethod
    def _url_parses(cls, url: str) -> str:
        # The pattern lets through what the HTTP client refuses when the gateway starts (or a reload
        # builds it): a port out of range or not a number (`host:80800`, `host:8000:1`), no host.
        # The URL is not echoed: it may carry credentials (http://user:key@host).
        problem = port_problem(url) or (None if urlsplit(url).hostname else "the URL names no host")
        if problem:
            raise ValueError(problem)
        return url

    @field_validator("proxy")
    @classmethod
    def _proxy_url(cls, url: SecretStr | None) -> SecretStr | None:
        problem = proxy_url_problem(url.get_secret_value()) if url is not None else None
        if problem:
            raise ValueError(problem)
        return url

    @model_validator(mode="after")
    def _proxy_and_tls(self) -> BackendConfig:
        if self.proxy is not None and self.proxy_env is not None:
            raise ValueError("give proxy or proxy_env, not both")
        if self.ca_bundle is not None and not self.base_url.startswith("https://"):
            raise ValueError("ca_bundle is for https:// backends: this base_url is not one")
        return self

    @model_validator(mode="after")
    def _apis(self) -> BackendConfig:
        if self.apis is None:
            object.__setattr__(self, "apis", DEFAULT_APIS[self.flavor])
        elif not self.apis:
            raise ValueError("apis must name at least one client API (or be left out for the flavour's default)")
        elif len(set(self.apis)) != len(self.apis):
            raise ValueError("apis names the same client API twice")
        return self

    def speaks(self, api: str) -> bool:
        """Whether this backend serves the client API natively."""
        return api in (self.apis or ())


class ExactCachePolicy(Strict):
    enabled: bool = True
    # Cache TTLs are finite (allow_inf_nan=False here and below): an entry's expiry is stored as JSON,
    # where infinity is written null, and an entry that never reads back is a cache silently off.
    ttl_s: float = Field(3600.0, gt=0, allow_inf_nan=False)
    # Cache only answers that are meant to repeat: temperature 0 or a seed, and n = 1.
    deterministic_only: bool = True


class JudgeConfig(Strict):
    # A model alias of this gateway that answers "yes" or "no" (temperature 0, max_tokens 1).
    alias: str
    # The judge's own bound; the request's deadline shortens it. No verdict in time is a miss.
    timeout_ms: float = Field(500.0, gt=0)
    # The judge is asked only where similarity alone is unsure: the candidate is at least this similar
    # and the guard found words it could not align (never a number, negation or direction). What the
    # guard confirms is served without asking; what it rejects outright is never asked.
    min_similarity: float = Field(0.80, gt=0, le=1)
    # Read the judge as a probability rather than by its greedy word: ask for the first token's top
    # log-probabilities and confirm when P(yes) / (P(yes) + P(no)) reaches this. A small model's word
    # says "yes" to look-alike traps that its ratio still ranks below true rewordings (README, "Semantic
    # cache quality": Qwen2.5-Coder-1.5B-Instruct Q4_K_M at 0.73). The right value depends on the model,
    # its quantisation and the prompt: tune it on your own pairs (bench/semantic_cache.py
    # --judge-min-yes-probability). Needs a backend that returns logprobs (llama.cpp, vLLM, OpenAI).
    min_yes_probability: float | None = Field(None, gt=0, lt=1)
    verdict_ttl_s: float = Field(3600.0, gt=0)
    max_verdicts: int = Field(10_000, ge=1)


class SemanticCachePolicy(Strict):
    enabled: bool = False
    ttl_s: float = Field(3600.0, gt=0, allow_inf_nan=False)
    # Cosine similarity that makes a cached question a candidate; verifiers then confirm it. Chosen on
    # the tune split of bench/data/semantic_set.jsonl; README gives the test split's figures.
    threshold: float = Field(0.75, gt=0, le=1)
    # Content-word alignment (app/cache/guard.py): every changed word must be a synonym, an
    # inflection or a typo. Off only for experiments: without it, one-word opposites are served.
    guard: bool = True
    # Where the guard is unsure and the questions differ the way a rewording does (in structure, not in
    # one slot), align the differing words by their meaning in context (app/cache/context.py): more
    # paraphrases served at no more traps on any labelled set (README, "Semantic cache quality"); one
    # more encoder pass per question it reads. Needs the guard.
    context: bool = True
    # An LLM judge (an alias of this gateway) that must also confirm a candidate; off by default.
    judge: JudgeConfig | None = None


class CategoryPolicy(Strict):
    """How one category of question (app/cache/category.py) is cached, in both stores."""

    # Its entries' TTL and the longest a client may ask for (x-slipstream-cache-ttl); 0: never stored
    # or served, exactly or semantically. None: the store's own (`exact.ttl_s`, `semantic.ttl_s`).
    # Also the oldest entry a question of this category is served, exactly or semantically, whatever the entry's
    # own category.
    ttl_s: float | None = Field(None, ge=0, allow_inf_nan=False)
    # The semantic threshold for a lookup or an entry of this category (the stricter of the two
    # applies); None: the alias's `semantic.threshold`. A caller's x-slipstream-cache-threshold wins.
    threshold: float | None = Field(None, gt=0, le=1)


class VolatilePolicy(CategoryPolicy):
    # Prices, scores, weather, news, "today" / "right now" / "latest": stale within minutes. Five
    # minutes bounds how old a served answer can be while a burst of the same question (the traffic a
    # cache is for) is still served; 0 turns caching off for them (README, "Question categories").
    # The field's own default, not the section's: `volatile: {threshold: 0.9}` keeps the five minutes.
    ttl_s: float | None = Field(300.0, ge=0, allow_inf_nan=False)


class CategoryPolicies(Strict):
    volatile: VolatilePolicy = VolatilePolicy()
    code: CategoryPolicy = CategoryPolicy()
    general: CategoryPolicy = CategoryPolicy()

    def of(self, category: str) -> CategoryPolicy:
        """The policy of a category by its name ("volatile", "code", "general")."""
        return getattr(self, category)


class CachePolicy(Strict):
    exact: ExactCachePolicy = ExactCachePolicy()
    semantic: SemanticCachePolicy = SemanticCachePolicy()
    # Per question category (app/cache/category.py): TTLs for both stores, thresholds for the semantic one.
    categories: CategoryPolicies = CategoryPolicies()
    # Only answers that ended for one of these reasons are stored.
    finish_reasons: tuple[str, ...] = ("stop",)
    # When every backend fails, an exact entry up to this long past its TTL may be served, marked stale.
    stale_s: float = Field(0.0, ge=0, allow_inf_nan=False)
    # The longest TTL a client may ask for with x-slipstream-cache-ttl.
    max_client_ttl_s: float = Field(86400.0, gt=0, allow_inf_nan=False)


class HedgePolicy(Strict):
    # When the first token (streams) or the answer is later than after_factor x the prediction, the
    # same request goes to the next best backend too; the first to answer wins, the other is cancelled.
    enabled: bool = False
    after_factor: float = Field(2.0, ge=1)
    min_delay_ms: float = Field(50.0, ge=0)
    # Hedges may add at most this fraction of the recent request rate.
    budget_ratio: float = Field(0.1, ge=0, le=1)


class PrefixPolicy(Strict):
    # Under `prefix_aware`: stay on the backend holding the longest cached prefix unless its predicted
    # latency (queue included) exceeds the best alternative's by more than this share ...
    sticky_ratio: float = Field(0.25, ge=0)
    # ... plus this many milliseconds (sticky until saturated).
    sticky_ms: float = Field(50.0, ge=0)
    # A request whose prefix another request is still prefilling on the chosen backend waits for it (at
    # most this long past its predicted end), so a burst of siblings computes the prefix once.
    burst_wait_ms: float = Field(2000.0, ge=0)
    # A prefix goes to the backend it hashes to, so every replica sends it to the same one: under
    # latency_aware, while the alias's prompts repeat prefixes, unless another backend is known to hold
    # more of it, that one is past 1.25x its fair share of the load in flight (consistent hashing with
    # bounded loads) or is clearly the slower or failing server; under prefix_aware, a prefix no
    # backend holds, among those within the sticky margin of the best. Off: the best predicted.
    consistent_hashing: bool = True


class ModelAlias(Strict):
    backends: tuple[str, ...] = Field(min_length=1)
    strategy: Literal["latency_aware", "predicted_latency", "prefix_aware", "least_inflight", "lowest_latency", "round_robin",
                      "weighted"] = "latency_aware"
    prefix: PrefixPolicy = PrefixPolicy()
    # Share of placements that try the idle backend heard from least recently, so one that recovered
    # is measured again (latency_aware and predicted_latency only). Unset: the strategy's own (1 % and
    # 2 %); 0 makes every placement the predicted best (tests that pin a placement, replays).
    exploration: float | None = Field(None, ge=0, le=1)
    timeouts: TimeoutOverrides = TimeoutOverrides()
    retry: RetryPolicy = RetryPolicy()
    # Aliases tried in order when this one cannot answer (retries exhausted, timeouts, 5xx).
    fallbacks: tuple[str, ...] = ()
    # The alias to use when a backend rejects the prompt as too long for its context.
    context_fallback: str | None = None
    cache: CachePolicy = CachePolicy()
    # What a stream is ranked by: `ttft` (its predicted first token) or `e2e` (its last). Unset, the
    # strategy's own: `e2e` for latency_aware, `ttft` for predicted_latency and prefix_aware. On two real
    # llama.cpp servers with mixed prompt lengths (issue 24), ranking streams by their first token sent a
    # short prompt to the slow server whenever a long prefill held the quick one: its first token came
    # sooner, its answer ~3x later, and the slow server stayed busy for the arrivals after it. Ranked by
    # the end, latency_aware's median TTFT was 0.76x and median E2E 0.67x of the first-token ranking's,
    # its p99s level (bench/real_backends.py --workload mixed, 2 repeats in one run).
    stream_objective: Literal["ttft", "e2e"] | None = None
    # Under `ttft`, backends whose predicted first token is within this of the earliest count as tied,
    # and the one predicted to finish first wins: a long stream is not sent to the slowest decoder to
    # save a few milliseconds of prefill. 0 ranks by TTFT alone.
    ttft_tolerance_ms: float = Field(100.0, ge=0)
    # ... or within this share of the stream's predicted duration, if more: a long answer may start a
    # little later to end much sooner.
    ttft_tolerance_ratio: float = Field(0.0, ge=0, le=1)
    # The latency this alias should meet when the request sets no deadline: when no backend can by
    # prediction, the fallback chain is taken before any time is spent.
    slo_ms: float | None = Field(None, gt=0)
    # Default per-request latency targets (x-slipstream-ttft-slo-ms / x-slipstream-tpot-slo-ms override
    # them): best-fit routing, fallback when unmeetable, early 503 for sheddable requests.
    ttft_slo_ms: float | None = Field(None, gt=0)
    tpot_slo_ms: float | None = Field(None, gt=0)
    hedge: HedgePolicy = HedgePolicy()

    def ranks_streams_by(self) -> Literal["ttft", "e2e"]:
        """The stream objective: as set, else the strategy's own (latency_aware ranks by the end)."""
        if self.stream_objective is not None:
            return self.stream_objective
        return "e2e" if self.strategy == "latency_aware" else "ttft"


class RetryBudget(Strict):
    # Retries may add at most this fraction of the recent request rate ...
    ratio: float = Field(0.2, ge=0, le=1)
    # ... plus this many per second, so a quiet gateway can still retry.
    min_per_s: float = Field(2.0, ge=0)
    window_s: float = Field(10.0, gt=0)


class BreakerConfig(Strict):
    consecutive_failures: int = Field(5, ge=1)
    # Or trip when, over the window, at least min_requests ended and this fraction failed.
    error_rate: float = Field(0.5, gt=0, le=1)
    min_requests: int = Field(10, ge=1)
    window_s: float = Field(30.0, gt=0)
    # Ejection time; it doubles with every trip that follows a failed probe, up to the maximum.
    cooldown_s: float = Field(5.0, gt=0)
    max_cooldown_s: float = Field(120.0, gt=0)


class HealthCheckConfig(Strict):
    # Active checks probe ejected backends with GET {base_url}/{path} (never a billed call).
    enabled: bool = False
    interval_s: float = Field(5.0, gt=0)
    path: str = "models"
    timeout_s: float = Field(2.0, gt=0)


class EmbeddingConfig(Strict):
    # ONNX Runtime threads for the embedding model: 1 leaves the other core to the event loop on small boxes.
    threads: int = Field(1, ge=1)
    # int8 (dynamic quantisation, ~3x faster) or fp32. Each has its own vector index: never mixed.
    quantization: Literal["int8", "fp32"] = "int8"
    # How long a lookup waits for the model beyond the model's own recent time for the texts it needs
    # (measured on the model's thread, so a loaded box that takes 20 ms a text still gets its hits);
    # later is a miss (fail open). The request's own deadline shortens it (README, "Embedding wait").
    timeout_ms: float = Field(50.0, gt=0)
    # ... and never longer than this in all: a model that is swamped or stuck costs a miss at most this.
    max_wait_ms: float = Field(250.0, gt=0)
    batch_max: int = Field(32, ge=1)
    # Extra wait to fill a batch; 0 batches only what queued while the previous batch ran.
    batch_wait_ms: float = Field(0.0, ge=0)


class CacheConfig(Strict):
    # memory: in-process (the embedded default, one replica); redis: shared by every replica.
    store: Literal["memory", "redis"] = "memory"
    # redis://, rediss://, redis+cluster://host:port, redis+sentinel://host:port[,host:port]/service[/db]
    redis_url: str | None = Field(None, repr=False)
    # Or the environment variable that holds that URL (with its password: a Secret's, never the file's);
    # resolved into redis_url when the file is loaded.
    redis_url_env: str | None = Field(None, min_length=1)
    # A cache lookup slower than this is skipped (fail open): the request goes on as a miss.
    timeout_ms: float = Field(50.0, gt=0)
    # Writes run in the background, batched and pipelined; a batch slower than this is retried (3
    # tries), then counted as lost (slipstream_cache_writes_lost).
    write_timeout_ms: float = Field(1000.0, gt=0)
    write_queue_max: int = Field(10_000, ge=1)
    # The store is skipped for skip_for_s only after this many outage errors in a row, not after one.
    skip_after_failures: int = Field(3, ge=1)
    skip_for_s: float = Field(1.0, ge=0)
    key_prefix: str = "slipstream:"
    # Redis's semantic vectors: float16 takes half the bytes of float32 per vector (needs RediSearch 2.10+,
    # as in Redis Stack 7.4 and Redis 8). Each has its own index and keys: switching starts an empty index.
    redis_vector_type: Literal["float16", "float32"] = "float16"
    memory_max_entries: int = Field(100_000, ge=1)
    embedding: EmbeddingConfig = EmbeddingConfig()

    @model_validator(mode="after")
    def _redis_needs_url(self) -> CacheConfig:
        one_redis_source(self.redis_url, self.redis_url_env)
        if self.store == "redis" and not (self.redis_url or self.redis_url_env):
            raise ValueError("store 'redis' needs redis_url (or redis_url_env)")
        return self

    _redis_url = field_validator("redis_url")(checked_redis_url)


class ResponsesConfig(Strict):
    """The Responses API's stored turns (`store`, `previous_response_id`): app/conversations."""

    # memory: in-process (one replica); redis: shared by every replica. Unset: where the cache is (cache.store).
    store: Literal["memory", "redis"] | None = None
    redis_url: str | None = Field(None, repr=False)  # unset: cache.redis_url
    redis_url_env: str | None = Field(None, min_length=1)  # or the environment variable that holds it
    _redis_url = field_validator("redis_url")(checked_redis_url)

    @model_validator(mode="after")
    def _one_source(self) -> ResponsesConfig:
        one_redis_source(self.redis_url, self.redis_url_env)
        return self
    # How long a stored turn can be read or chained from (OpenAI keeps responses 30 days).
    ttl_s: float = Field(30 * 86400, gt=0)
    # One stored turn holds its whole chain: a chain past this is refused (context_length_exceeded), never cut.
    max_entry_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    # The in-process store's bound in all; the least recently written turns go first past it.
    memory_max_bytes: int = Field(256 * 1024 * 1024, ge=1024)
    # A store read or write slower than this fails the request (503) rather than answer without its chain.
    timeout_ms: float = Field(1000.0, gt=0)


class RoutingConfig(Strict):
    """Gateway-wide routing (each alias picks its strategy under models.<alias>)."""

    # Gateway replicas tell each other which backend computed which prompt prefix, over Redis pub/sub
    # (app/routing/placement_feed.py), so each one's prefix index knows the others' placements too.
    # Off, each replica knows its own, and consistent hashing agrees on where a new prefix goes.
    share_prefixes: bool = False
    redis_url: str | None = Field(None, repr=False)  # unset: cache.redis_url
    redis_url_env: str | None = Field(None, min_length=1)  # or the environment variable that holds it
    # Every replica of one fleet uses the same channel; another fleet on the same Redis uses its own.
    channel: str = Field("slipstream:prefixes", min_length=1)
    # A publish slower than this is given up (its placements dropped, counted on /admin/backends).
    publish_timeout_ms: float = Field(1000.0, gt=0)
    _redis_url = field_validator("redis_url")(checked_redis_url)

    @model_validator(mode="after")
    def _one_source(self) -> RoutingConfig:
        one_redis_source(self.redis_url, self.redis_url_env)
        return self


class TracingConfig(Strict):
    # Spans are exported only when enabled and an exporter is set; OTEL_* variables override these.
    enabled: bool = False
    exporter: Literal["otlp", "console", "none"] = "otlp"  # OTEL_TRACES_EXPORTER
    protocol: Literal["http/protobuf", "grpc"] = "http/protobuf"  # OTEL_EXPORTER_OTLP_PROTOCOL
    sample_ratio: float = Field(1.0, ge=0, le=1)  # OTEL_TRACES_SAMPLER(_ARG) win when set
    # Whether an incoming traceparent's sampled flag forces sampling (else sample_ratio decides).
    trust_parent_sampling: bool = False
    service_name: str = "slipstream"  # OTEL_SERVICE_NAME
    # Prompt and completion text in spans: off unless switched on (or
    # OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true).
    capture_content: bool = False
    max_queue_size: int = Field(4096, ge=1)
    export_batch_size: int = Field(64, ge=1)
    # Where the operator console links a request's trace id: a URL with `{trace_id}` in it, e.g.
    # Jaeger's http://127.0.0.1:16686/trace/{trace_id}. None shows the id as text.
    trace_url: str | None = None

    @model_validator(mode="after")
    def _trace_url_shape(self) -> TracingConfig:
        if self.trace_url is not None and (not self.trace_url.startswith(("http://", "https://")) or "{trace_id}" not in self.trace_url):
            raise ValueError("trace_url must be an http(s) URL containing {trace_id}")
        return self


class TelemetryConfig(Strict):
    tracing: TracingConfig = TracingConfig()
    metrics: bool = True  # GET /metrics, Prometheus text format
    server_timing: bool = True  # a W3C Server-Timing header on every proxied response
    # Backends that publish their load (llama.cpp /props + /metrics, vLLM /metrics, TGI /info): ask for
    # slots, running and waiting requests this often; 0 = never.
    scrape_interval_s: float = Field(5.0, ge=0)
    # The last this many finished requests, kept in memory for the operator console (/console); 0 = none.
    recent_requests: int = Field(1000, ge=0, le=100_000)


class ReliabilityConfig(Strict):
    retry_budget: RetryBudget = RetryBudget()
    breaker: BreakerConfig = BreakerConfig()
    health_check: HealthCheckConfig = HealthCheckConfig()


class FaultConfig(Strict):
    error_rate: float = Field(0.0, ge=0, le=1)
    rate_limit_rate: float = Field(0.0, ge=0, le=1)
    retry_after_s: float = Field(1.0, ge=0)
    hang_rate: float = Field(0.0, ge=0, le=1)
    stall_rate: float = Field(0.0, ge=0, le=1)
    stall_s: float = Field(30.0, ge=0)
    disconnect_rate: float = Field(0.0, ge=0, le=1)


class OutputLength(Strict):
    # Used when the request gives no max_tokens: a log-normal around `median`, capped.
    median: int = Field(64, gt=0)
    sigma: float = Field(0.6, ge=0)
    max: int = Field(1024, gt=0)


class SimBackendConfig(Strict):
    port: int = Field(ge=0, le=65535)
    model: str = "sim-model"
    slots: int = Field(16, gt=0)
    network_ms: float = Field(0.0, ge=0)
    prefill_tokens_per_s: float = Field(8000.0, gt=0)
    tpot_ms: float = Field(20.0, ge=0)
    # Each extra running request makes a decode step this fraction slower (batching cost).
    tpot_growth: float = Field(0.04, ge=0)
    output: OutputLength = OutputLength()
    report: Literal["none", "llamacpp", "tgi"] = "none"
    faults: FaultConfig = FaultConfig()
    embedding_dim: int = Field(384, gt=0)
    # Prompt plus max_tokens beyond this is rejected with vLLM's context-length error.
    context_tokens: int | None = Field(None, gt=0)
    # Prompt (KV) cache in tokens, as vLLM's prefix caching and llama.cpp's prompt cache keep one: a
    # cached prefix skips prefill and is reported (timings.cache_n, usage.prompt_tokens_details).
    # 0 (the default, so figures of older setups stay as they were): no cache.
    prefix_cache_tokens: int = Field(0, ge=0)
    # Prefills share the backend's compute, one at a time in arrival order (a compute-bound server: a
    # CPU llama.cpp, a GPU at its prefill token budget); off, each slot prefills as if alone.
    prefill_shared: bool = False
    # The client APIs it serves natively; without "responses" (or "messages"), /v1/responses (/v1/messages) is
    # a 404 (a chat-only server, which the gateway must translate for).
    apis: tuple[ApiName, ...] = ("chat", "completions", "embeddings")


class SimulatorConfig(Strict):
    host: str = "127.0.0.1"
    seed: int = 0
    backends: dict[Name, SimBackendConfig] = {}

    @model_validator(mode="after")
    def _one_port_each(self) -> SimulatorConfig:
        # Two simulated backends on one port failed the start with the fleet's bind traceback, naming neither.
        seen: dict[int, str] = {}
        for name, backend in self.backends.items():
            if backend.port and backend.port in seen:
                raise ValueError(f"backends {seen[backend.port]} and {name} both use port {backend.port}")
            seen[backend.port] = name
        return self


class GatewayConfig(Strict):
    server: ServerConfig = ServerConfig()
    auth: AuthConfig  # required: open mode must be chosen explicitly
    backends: dict[Name, BackendConfig] = Field(min_length=1)
    models: dict[Name, ModelAlias] = Field(min_length=1)
    reliability: ReliabilityConfig = ReliabilityConfig()
    cache: CacheConfig = CacheConfig()
    responses: ResponsesConfig = ResponsesConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    # Tenant quotas, rate limits and priorities (app/admission).
    limits: LimitsConfig = LimitsConfig()
    routing: RoutingConfig = RoutingConfig()
    # The built-in backend fleet `serve` starts beside the gateway (the embedded default).
    simulator: SimulatorConfig | None = None

    @model_validator(mode="after")
    def _references(self) -> GatewayConfig:
        for alias, spec in self.models.items():
            for i, name in enumerate(spec.backends):
                if name not in self.backends:
                    raise ValueError(f"models.{alias}.backends[{i}]: unknown backend {name!r}")
            for i, name in enumerate(spec.fallbacks):
                if name not in self.models or name == alias:
                    raise ValueError(f"models.{alias}.fallbacks[{i}]: {name!r} is not another model alias")
            if spec.context_fallback is not None and (spec.context_fallback not in self.models or spec.context_fallback == alias):
                raise ValueError(f"models.{alias}.context_fallback: {spec.context_fallback!r} is not another model alias")
            judge = spec.cache.semantic.judge
            if judge is not None and (judge.alias not in self.models or judge.alias == alias):
                raise ValueError(f"models.{alias}.cache.semantic.judge.alias: {judge.alias!r} is not another model alias")
        for i, client in enumerate(self.auth.clients):
            for name in client.models:
                if name not in self.models:
                    raise ValueError(f"auth.clients[{i}].models: unknown model alias {name!r}")
            for name in client.limits.models:
                if name not in self.models:
                    raise ValueError(f"auth.clients[{i}].limits.models: unknown model alias {name!r}")
        if self.responses.store == "redis" and not (self.responses.redis_url or self.responses.redis_url_env
                                                    or self.cache.redis_url or self.cache.redis_url_env):
            raise ValueError("responses.store 'redis' needs responses.redis_url (or cache.redis_url), or the _env form of either")
        if self.routing.share_prefixes and not (self.routing.redis_url or self.routing.redis_url_env
                                                or self.cache.redis_url or self.cache.redis_url_env):
            raise ValueError("routing.share_prefixes needs routing.redis_url (or cache.redis_url), or the _env form of either")
        for name in self.limits.expected_output_tokens:
            if name != "default" and name not in self.models:
                # A typo here would reserve the default for that alias's requests, without a word.
                raise ValueError(f"limits.expected_output_tokens.{name}: unknown model alias {name!r} (or 'default')")
        if self.simulator is not None and self.server.port:
            for name, sim in self.simulator.backends.items():
                if sim.port == self.server.port:
                    raise ValueError(f"simulator.backends.{name}.port: {sim.port} is the gateway's own server.port")
        known = {c.tenant for c in self.auth.clients} | {self.auth.open_tenant}
        for tenant, policy in self.limits.tenants.items():
            if tenant not in known:
                raise ValueError(f"limits.tenants.{tenant}: no client key has this tenant (auth.clients[].tenant)")
            for name in policy.limits.models:
                if name not in self.models:
                    raise ValueError(f"limits.tenants.{tenant}.limits.models: unknown model alias {name!r}")
        return self


class ConfigError(Exception):
    """A config file that cannot be used; the message names the file, key and problem."""


def load_config(path: str | os.PathLike[str], environ: dict[str, str] | None = None) -> GatewayConfig:
    """Read, validate and resolve secrets of a gateway config file."""
    return parse_config(_read_text(path), path, environ)


def parse_config(text: str, path: str | os.PathLike[str], environ: dict[str, str] | None = None) -> GatewayConfig:
    """Validate and resolve secrets of a config's text as if it were the file at `path` (which names it in
    errors and anchors relative paths), writing nothing: the console checks a change so before applying it,
    also where the config's folder is read-only (a Kubernetes ConfigMap)."""
    env = os.environ if environ is None else environ
    where, raw = str(path), _parse_yaml(str(path), text)
    try:
        config = GatewayConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_describe(where, exc)) from None
    return _resolve_secrets(where, config, env)


def load_simulator_config(path: str | os.PathLike[str]) -> SimulatorConfig:
    """Read only the `simulator` section of a config file (the rest may be absent)."""
    where, raw = str(path), _read_yaml(path)
    section = raw.get("simulator")
    if not isinstance(section, dict) or not section.get("backends"):
        raise ConfigError(f"{where}: simulator.backends: no simulated backends configured")
    try:
        return SimulatorConfig.model_validate(section)
    except ValidationError as exc:
        raise ConfigError(_describe(where, exc, prefix="simulator")) from None


def _read_yaml(path: str | os.PathLike[str]) -> dict:
    return _parse_yaml(str(path), _read_text(path))


def _read_text(path: str | os.PathLike[str]) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _parse_yaml(where: str, text: str) -> dict:
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no arbitrary objects
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{where}: invalid YAML{at}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: top level must be a mapping of sections")
    return raw


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys in a mapping without a word, so a second `models.chat`
    (or a pasted backend under a name already used) would replace the first in silence. YAML itself
    says keys are unique: a repeated one is refused, naming both lines."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` then a key of its own is an override, as YAML means it
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # an unhashable key: the base constructor names that error
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping (first at line {first + 1})",
                    key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def _describe(where: str, exc: ValidationError, prefix: str = "") -> str:
    lines = []
    for err in exc.errors(include_url=False):
        key = _dotted(((prefix,) if prefix else ()) + tuple(err["loc"]))
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"{where}: {key}: {msg}" if key else f"{where}: {msg}")
    return "\n".join(lines)


def _dotted(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _prior_problem(path: Path) -> str | None:
    """Why a latency_prior file is not a `slipstream bench` report the router can read (None if it is).

    The router reads it when the gateway starts (app/routing/latency_model.py: load_prior): a file that is
    not JSON (the report's .html beside its .json) failed the start with a decoder traceback, and one
    without figures seeded nothing, in silence."""
    try:
        report = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        return f"is not a readable JSON `slipstream bench` report ({exc})"
    fitted = report.get("prior") if isinstance(report, dict) else None
    if not isinstance(fitted, dict):
        return "is not a `slipstream bench` report: it has no `prior` object"
    for key in ("net_s", "prefill_tokens_per_s", "tpot_s", "tpot_growth"):
        value = fitted.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"has no number for prior.{key} (found {value!r}): run `slipstream bench` again"
    return None


def _resolve_secrets(where: str, config: GatewayConfig, env: os._Environ[str] | dict[str, str]) -> GatewayConfig:
    backends = {}
    for name, backend in config.backends.items():
        if backend.latency_prior:
            prior = Path(backend.latency_prior)
            if not prior.is_absolute():
                prior = Path(where).parent / prior
            if not prior.is_file():
                raise ConfigError(f"{where}: backends.{name}.latency_prior: no such file {prior}")
            problem = _prior_problem(prior)
            if problem:
                raise ConfigError(f"{where}: backends.{name}.latency_prior: {prior} {problem}")
            backend = backend.model_copy(update={"latency_prior": str(prior)})
        if backend.ca_bundle:
            bundle = Path(backend.ca_bundle)
            if not bundle.is_absolute():
                bundle = Path(where).parent / bundle
            problem = ca_bundle_problem(bundle)
            if problem:
                raise ConfigError(f"{where}: backends.{name}.ca_bundle: {bundle} {problem}")
            backend = backend.model_copy(update={"ca_bundle": str(bundle)})
        if backend.proxy_env:
            key = f"{where}: backends.{name}.proxy_env: environment variable {backend.proxy_env}"
            value = _from_environment(key, backend.proxy_env, env)
            problem = proxy_url_problem(value)
            if problem:
                raise ConfigError(f"{key} holds no proxy URL the gateway can use ({problem})")
            backend = backend.model_copy(update={"proxy": SecretStr(value)})
        if backend.api_key_env:
            # A key read from a file (a Kubernetes Secret made with --from-file, `$(cat key)` kept with its
            # newline) ends in a line break, which no header may carry: every request failed at the start
            # with a traceback that named neither backend nor variable. Surrounding whitespace is never
            # part of a key; a line break inside one is named here (never the value).
            key = f"{where}: backends.{name}.api_key_env: environment variable {backend.api_key_env}"
            value = _from_environment(key, backend.api_key_env, env)
            if "\n" in value or "\r" in value:
                raise ConfigError(f"{key} holds a line break inside the key")
            backend = backend.model_copy(update={"api_key": SecretStr(value)})
        backends[name] = backend
    update: dict[str, object] = {"backends": backends}
    if config.auth.console_secret_env:
        key = f"{where}: auth.console_secret_env: environment variable {config.auth.console_secret_env}"
        secret = _from_environment(key, config.auth.console_secret_env, env)
        if len(secret) < 32:
            # A short secret can be guessed offline from one cookie; `openssl rand -hex 32` makes a good one.
            raise ConfigError(f"{key} holds {len(secret)} characters: a signing secret needs at least 32 "
                              "(`openssl rand -hex 32` makes one)")
        update["auth"] = config.auth.model_copy(update={"console_secret": SecretStr(secret)})
    for section in ("cache", "responses", "limits", "routing"):
        part = getattr(config, section)
        if part.redis_url_env:
            update[section] = part.model_copy(update={"redis_url": _redis_url_from(where, section, part.redis_url_env, env)})
    return config.model_copy(update=update)


def _from_environment(key: str, variable: str, env: os._Environ[str] | dict[str, str]) -> str:
    """The value of the environment variable a `*_env` key names, stripped (a Secret made with --from-file ends
    in a newline), or ConfigError naming `key` (file, key and variable) if it is unset or blank."""
    value = (env.get(variable) or "").strip()
    if not value:
        raise ConfigError(f"{key} is not set")
    return value


def _redis_url_from(where: str, section: str, variable: str, env: os._Environ[str] | dict[str, str]) -> str:
    """The Redis URL a `redis_url_env` names, checked as a written redis_url is. Errors name the section, the key
    and the variable, never the value: the URL holds the password the variable is there to keep out of sight."""
    key = f"{where}: {section}.redis_url_env: environment variable {variable}"
    url = _from_environment(key, variable, env)
    problem = redis_url_problem(url)
    if problem:
        raise ConfigError(f"{key} holds no Redis URL the stores can use ({problem})")
    return url
