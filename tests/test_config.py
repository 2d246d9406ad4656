"""Config is validated once at start; a bad file fails naming the file, the key and the problem."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.config import ConfigError, ModelAlias, load_config, load_simulator_config
from tests.support import ROOT, make_ca_and_leaf

GOOD = """
auth: {mode: open}
backends:
  a: {base_url: "http://127.0.0.1:9/v1", model: m}
models:
  chat: {backends: [a]}
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "gw.yaml"
    p.write_text(text)
    return p


def error_for(tmp_path: Path, text: str, env: dict | None = None) -> str:
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, text), environ=env or {})
    return str(exc.value)


def test_minimal_config_loads_with_defaults(tmp_path):
    config = load_config(write(tmp_path, GOOD), environ={})
    assert config.server.port == 8080
    assert config.backends["a"].flavor == "openai"
    assert config.models["chat"].backends == ("a",)


def test_shipped_configs_are_valid():
    for name in ("demo.yaml", "gateway.yaml"):
        load_config(ROOT / "config" / name, environ={"VLLM_API_KEY": "x", "OPENAI_API_KEY": "y"})


def test_unknown_key_is_named(tmp_path):
    msg = error_for(tmp_path, GOOD + "  chat2: {backends: [a], stratgy: round_robin}\n")
    assert "gw.yaml: models.chat2.stratgy: Extra inputs are not permitted" in msg


def test_wrong_type_is_named(tmp_path):
    msg = error_for(tmp_path, GOOD.replace("model: m}", "model: m, max_concurrency: lots}"))
    assert "backends.a.max_concurrency" in msg and "integer" in msg


def test_unknown_backend_reference_is_named(tmp_path):
    msg = error_for(tmp_path, GOOD.replace("backends: [a]", "backends: [a, b]"))
    assert "models.chat.backends[1]: unknown backend 'b'" in msg


@pytest.mark.parametrize("url, problem", [
    ("http://127.0.0.1:80800/v1", "the port after the host must be a number 0-65535"),
    ("http://127.0.0.1:8000:1/v1", "the port after the host must be a number 0-65535"),
    ("http://:8000/v1", "the URL names no host"),
])
def test_a_backend_url_the_http_client_would_refuse_is_named_at_check(tmp_path, url, problem):
    # These passed `slipstream check` and then failed the start (or a reload) with a traceback.
    msg = error_for(tmp_path, GOOD.replace("http://127.0.0.1:9/v1", url))
    assert f"gw.yaml: backends.a.base_url: {problem}" in msg


def test_a_backend_url_error_does_not_repeat_credentials_in_it(tmp_path):
    msg = error_for(tmp_path, GOOD.replace("http://127.0.0.1:9/v1", "http://user:sk-live-123@127.0.0.1:99999/v1"))
    assert "backends.a.base_url" in msg and "sk-live-123" not in msg


def test_bad_flavor_is_named(tmp_path):
    msg = error_for(tmp_path, GOOD.replace("model: m}", "model: m, flavor: sglang}"))
    assert "backends.a.flavor" in msg


def test_missing_api_key_env_is_named(tmp_path):
    msg = error_for(tmp_path, GOOD.replace("model: m}", "model: m, api_key_env: NOPE_KEY}"))
    assert "gw.yaml: backends.a.api_key_env: environment variable NOPE_KEY is not set" in msg


def test_api_key_is_resolved_and_hidden(tmp_path):
    config = load_config(write(tmp_path, GOOD.replace("model: m}", "model: m, api_key_env: K}")), environ={"K": "sk-secret"})
    assert config.backends["a"].api_key.get_secret_value() == "sk-secret"
    assert "sk-secret" not in repr(config)
    assert "sk-secret" not in config.model_dump_json()


def test_an_api_key_read_from_a_file_with_its_newline_is_used_without_it(tmp_path):
    # `kubectl create secret --from-file` keeps the file's last newline: the key went into the
    # Authorization header as it was, and the start failed with a traceback naming no backend.
    config = load_config(write(tmp_path, GOOD.replace("model: m}", "model: m, api_key_env: K}")), environ={"K": "sk-secret\n"})
    assert config.backends["a"].api_key.get_secret_value() == "sk-secret"


def test_an_api_key_with_a_line_break_inside_is_named_without_its_value(tmp_path):
    msg = error_for(tmp_path, GOOD.replace("model: m}", "model: m, api_key_env: K}"), env={"K": "sk-one\nsk-two"})
    assert "gw.yaml: backends.a.api_key_env: environment variable K holds a line break inside the key" in msg
    assert "sk-one" not in msg and "sk-two" not in msg


def test_keys_mode_needs_clients(tmp_path):
    msg = error_for(tmp_path, GOOD.replace("auth: {mode: open}", "auth: {mode: keys}"))
    assert "auth" in msg and "clients" in msg


def test_client_key_must_be_a_digest(tmp_path):
    msg = error_for(tmp_path, GOOD.replace("auth: {mode: open}", "auth: {clients: [{tenant: t, key_sha256: sk-plain}]}"))
    assert "auth.clients[0]" in msg and "sha256" in msg


def test_auth_section_is_required(tmp_path):
    msg = error_for(tmp_path, GOOD.replace("auth: {mode: open}", ""))
    assert "gw.yaml: auth: Field required" in msg


def test_invalid_yaml_names_the_line(tmp_path):
    msg = error_for(tmp_path, "auth: {mode: open\nbackends: [")
    assert "gw.yaml: invalid YAML at line" in msg


def test_a_key_given_twice_is_refused_naming_both_lines(tmp_path):
    # YAML keeps the last of two equal keys without a word: a second alias or backend of the same name
    # would replace the first in silence.
    msg = error_for(tmp_path, GOOD + "  chat: {backends: [a], strategy: round_robin}\n")
    assert "gw.yaml: invalid YAML at line 7, column 3: key 'chat' appears twice in one mapping (first at line 6)" in msg
    msg = error_for(tmp_path, GOOD.replace("model: m}", "model: m, model: n}"))
    assert "key 'model' appears twice" in msg


def test_a_merge_key_then_an_override_is_not_a_repeat(tmp_path):
    config = load_config(write(tmp_path, GOOD.replace(
        "backends:\n  a: {base_url: \"http://127.0.0.1:9/v1\", model: m}",
        "backends:\n  base: &base {base_url: \"http://127.0.0.1:9/v1\", model: m}\n  a:\n    <<: *base\n    model: n")),
        environ={})
    assert config.backends["a"].model == "n" and config.backends["base"].model == "m"


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml")


def test_simulator_section_alone_is_enough_for_simulate(tmp_path):
    p = write(tmp_path, "simulator:\n  backends:\n    a: {port: 9999, tpot_ms: -1}\n")
    with pytest.raises(ConfigError, match=r"simulator\.backends\.a\.tpot_ms"):
        load_simulator_config(p)


def test_serve_exits_with_the_message(tmp_path):
    p = write(tmp_path, GOOD.replace("backends: [a]", "backends: [zzz]"))
    r = subprocess.run([sys.executable, "-m", "app", "serve", "--config", str(p)], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "models.chat.backends[0]: unknown backend 'zzz'" in r.stderr
    assert "Traceback" not in r.stderr


LIMITS = GOOD.replace("auth: {mode: open}", """auth:
  mode: keys
  clients:
    - {tenant: acme, key_sha256: %s, limits: {requests_per_minute: 5, models: {chat: {tokens_per_minute: 100}}}}
""" % ("a" * 64))


def test_limits_load(tmp_path):
    text = LIMITS + "limits: {tenants: {acme: {priority: batch, weight: 2, limits: {concurrent_requests: 3, token_budget: {tokens: 1000, period: month}}}}}\n"
    config = load_config(write(tmp_path, text), environ={})
    assert config.auth.clients[0].limits.models["chat"].tokens_per_minute == 100
    assert config.limits.tenants["acme"].limits.token_budget.period == "month"


def test_limits_for_an_unknown_tenant_are_refused(tmp_path):
    msg = error_for(tmp_path, LIMITS + "limits: {tenants: {acmee: {limits: {requests_per_minute: 1}}}}\n")
    assert "limits.tenants.acmee: no client key has this tenant" in msg


def test_limit_override_for_an_unknown_alias_is_named(tmp_path):
    msg = error_for(tmp_path, LIMITS.replace("models: {chat:", "models: {chatt:"))
    assert "auth.clients[0].limits.models: unknown model alias 'chatt'" in msg


def test_expected_output_for_an_unknown_alias_is_named(tmp_path):
    # A misspelt alias here reserved the default (256 tokens) for the alias meant, in silence.
    msg = error_for(tmp_path, GOOD + "limits: {expected_output_tokens: {default: 100, chta: 2000}}\n")
    assert "gw.yaml: limits.expected_output_tokens.chta: unknown model alias 'chta' (or 'default')" in msg
    config = load_config(write(tmp_path, GOOD + "limits: {expected_output_tokens: {default: 100, chat: 2000}}\n"), environ={})
    assert config.limits.expected_output("chat") == 2000


def test_bad_priority_is_named(tmp_path):
    msg = error_for(tmp_path, LIMITS + "limits: {default_priority: urgent}\n")
    assert "limits.default_priority" in msg


def test_the_console_trace_link_is_an_http_url_with_the_trace_id_in_it(tmp_path):
    ok = load_config(write(tmp_path, GOOD + "telemetry: {tracing: {trace_url: 'http://127.0.0.1:16686/trace/{trace_id}'}}\n"), environ={})
    assert ok.telemetry.tracing.trace_url == "http://127.0.0.1:16686/trace/{trace_id}"
    for bad in ("javascript:alert(1)//{trace_id}", "http://jaeger/trace/"):
        assert "trace_url" in error_for(tmp_path, GOOD + f"telemetry: {{tracing: {{trace_url: '{bad}'}}}}\n")


@pytest.mark.parametrize(("flavor", "apis"), [
    ("llamacpp", {"chat", "completions", "embeddings", "messages"}),  # its /v1/responses: translated to chat
    ("vllm", {"chat", "completions", "embeddings", "responses", "messages"}),
    ("ollama", {"chat", "completions", "embeddings", "responses", "messages"}),
    ("tgi", {"chat", "completions"}),
    ("openai", {"chat", "completions", "embeddings", "responses"}),
])
def test_a_backend_speaks_its_flavours_apis_by_default(tmp_path, flavor, apis):
    config = load_config(write(tmp_path, GOOD.replace("model: m}", f"model: m, flavor: {flavor}}}")), environ={})
    assert set(config.backends["a"].apis) == apis
    assert config.backends["a"].speaks("messages") == ("messages" in apis)


def test_declared_apis_replace_the_flavours(tmp_path):
    config = load_config(write(tmp_path, GOOD.replace("model: m}", "model: m, flavor: llamacpp, apis: [chat]}")),
                         environ={})
    assert config.backends["a"].apis == ("chat",)
    assert not config.backends["a"].speaks("messages")


@pytest.mark.parametrize(("apis", "expected"), [
    ("[chat, anthropic]", "backends.a.apis[1]"),
    ("[]", "apis must name at least one client API"),
    ("[chat, chat]", "apis names the same client API twice"),
])
def test_bad_apis_are_named_at_start(tmp_path, apis, expected):
    msg = error_for(tmp_path, GOOD.replace("model: m}", f"model: m, apis: {apis}}}"))
    assert expected in msg


def test_latency_aware_ranks_streams_by_their_end_unless_the_alias_says_otherwise():
    assert ModelAlias(backends=("a",)).ranks_streams_by() == "e2e"  # the default strategy
    assert ModelAlias(backends=("a",), stream_objective="ttft").ranks_streams_by() == "ttft"
    assert ModelAlias(backends=("a",), strategy="predicted_latency").ranks_streams_by() == "ttft"
    assert ModelAlias(backends=("a",), strategy="prefix_aware").ranks_streams_by() == "ttft"


# What makes each section use its Redis.
ENABLED = {"cache": "store: redis", "responses": "store: redis", "limits": "store: redis", "routing": "share_prefixes: true"}


@pytest.mark.parametrize("section", ["cache", "responses", "limits", "routing"])
@pytest.mark.parametrize("url, problem", [
    ("http://:pw-xyz@127.0.0.1:6379", "must start with redis://, rediss://, unix://, redis+cluster://, redis+sentinel://"),
    ("redis://:pw-xyz@127.0.0.1:637900", "the port after the host must be a number 0-65535"),
    ("redis+sentinel://127.0.0.1:x/mymaster", "redis+sentinel:// needs host:port[,host:port]/service[/db]"),
])
def test_a_redis_url_the_client_would_refuse_is_named_at_check(tmp_path, section, url, problem):
    # These passed `slipstream check` and then failed the start (or a reload) with redis-py's traceback.
    msg = error_for(tmp_path, GOOD + f"{section}: {{{ENABLED[section]}, redis_url: '{url}'}}\n")
    assert f"gw.yaml: {section}.redis_url: {problem}" in msg
    assert "pw-xyz" not in msg  # a Redis URL may carry a password: never repeated


def test_the_redis_urls_the_stores_take_load(tmp_path):
    for url in ("redis://:pw@127.0.0.1:6379/0", "rediss://cache.internal", "unix:///run/redis.sock",
                "redis+cluster://10.0.0.1:7000", "redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/mymaster/1"):
        assert load_config(write(tmp_path, GOOD + f"cache: {{store: redis, redis_url: '{url}'}}\n"), environ={})


def test_a_redis_store_for_responses_without_a_url_is_named_at_check(tmp_path):
    # It passed check, and the start failed with a ValueError traceback from app/conversations.
    msg = error_for(tmp_path, GOOD + "responses: {store: redis}\n")
    assert "gw.yaml: responses.store 'redis' needs responses.redis_url (or cache.redis_url)" in msg


@pytest.mark.parametrize("section", ["cache", "responses", "limits", "routing"])
def test_a_redis_url_may_come_from_an_environment_variable(tmp_path, section):
    # A Redis password in the file lands in a ConfigMap (or Helm values) in the clear; a Secret fills the variable.
    path = write(tmp_path, GOOD + f"{section}: {{{ENABLED[section]}, redis_url_env: REDIS_URL}}\n")
    config = load_config(path, environ={"REDIS_URL": "redis://:pw-xyz@127.0.0.1:6379/0\n"})
    assert getattr(config, section).redis_url == "redis://:pw-xyz@127.0.0.1:6379/0"  # --from-file's newline dropped
    assert "pw-xyz" not in repr(config)


def test_prefix_sharing_without_a_redis_url_is_named_at_check(tmp_path):
    msg = error_for(tmp_path, GOOD + "routing: {share_prefixes: true}\n")
    assert "gw.yaml: routing.share_prefixes needs routing.redis_url (or cache.redis_url)" in msg


def test_prefix_sharing_uses_the_caches_redis_when_it_names_none(tmp_path):
    config = load_config(write(tmp_path, GOOD + "cache: {store: redis, redis_url: 'redis://10.0.0.5:6379'}\n"
                                          "routing: {share_prefixes: true}\n"), environ={})
    assert config.routing.share_prefixes and config.routing.redis_url is None


def test_responses_follow_the_caches_redis_url_from_the_environment(tmp_path):
    path = write(tmp_path, GOOD + "cache: {store: redis, redis_url_env: REDIS_URL}\nresponses: {store: redis}\n")
    config = load_config(path, environ={"REDIS_URL": "redis://:pw@10.0.0.5:6379/0"})
    assert config.responses.redis_url is None and config.cache.redis_url == "redis://:pw@10.0.0.5:6379/0"


UNUSABLE = "environment variable REDIS_URL holds no Redis URL the stores can use"


@pytest.mark.parametrize("section", ["cache", "responses", "limits", "routing"])
@pytest.mark.parametrize("value, problem", [
    (None, "environment variable REDIS_URL is not set"),
    ("  ", "environment variable REDIS_URL is not set"),
    ("http://:pw-xyz@127.0.0.1:6379", f"{UNUSABLE} (must start with redis://"),
    ("redis://:pw-xyz@127.0.0.1:637900", f"{UNUSABLE} (the port after the host must be a number 0-65535)"),
])
def test_a_redis_url_env_that_cannot_be_used_is_named_without_its_value(tmp_path, section, value, problem):
    env = {} if value is None else {"REDIS_URL": value}
    msg = error_for(tmp_path, GOOD + f"{section}: {{{ENABLED[section]}, redis_url_env: REDIS_URL}}\n", env=env)
    assert f"gw.yaml: {section}.redis_url_env: {problem}" in msg
    assert "pw-xyz" not in msg


@pytest.mark.parametrize("section", ["cache", "responses", "limits", "routing"])
def test_a_redis_url_given_both_ways_is_refused(tmp_path, section):
    msg = error_for(tmp_path, GOOD + f"{section}: {{redis_url: 'redis://:pw-xyz@h:6379', redis_url_env: REDIS_URL}}\n",
                    env={"REDIS_URL": "redis://h:6379"})
    assert f"gw.yaml: {section}: give redis_url or redis_url_env, not both" in msg
    assert "pw-xyz" not in msg


@pytest.mark.parametrize("content, problem", [
    ("<!doctype html><title>bench</title>", "is not a readable JSON `slipstream bench` report"),
    ('{"cells": []}', "is not a `slipstream bench` report: it has no `prior` object"),
    ('{"prior": {"net_s": 0.01, "tpot_s": null}}', "has no number for prior.tpot_s (found None)"),
])
def test_a_latency_prior_that_is_not_a_bench_report_is_named_at_check(tmp_path, content, problem):
    # `slipstream bench --out base` writes base.json and base.html: naming the page passed check and then
    # failed the start with a JSON decoder's traceback; a report without figures seeded nothing, silently.
    (tmp_path / "base.html").write_text(content)
    msg = error_for(tmp_path, GOOD.replace("model: m}", "model: m, latency_prior: base.html}"))
    assert f"gw.yaml: backends.a.latency_prior: {tmp_path / 'base.html'} {problem}" in msg


def test_a_bench_reports_prior_loads(tmp_path):
    (tmp_path / "base.json").write_text('{"prior": {"net_s": 0.002, "prefill_tokens_per_s": 4000.0, "tpot_s": 0.02,'
                                        ' "tpot_growth": 0.01, "slots": null}}')
    config = load_config(write(tmp_path, GOOD.replace("model: m}", "model: m, latency_prior: base.json}")), environ={})
    assert config.backends["a"].latency_prior == str(tmp_path / "base.json")


HTTPS = GOOD.replace("http://127.0.0.1:9/v1", "https://127.0.0.1:9/v1")


def test_a_ca_bundle_is_read_relative_to_the_config_file(tmp_path):
    make_ca_and_leaf(tmp_path)
    config = load_config(write(tmp_path, HTTPS.replace("model: m}", "model: m, ca_bundle: ca.pem}")), environ={})
    assert config.backends["a"].ca_bundle == str(tmp_path / "ca.pem")


@pytest.mark.parametrize("content, problem", [
    (None, "is not a file"),
    ("not a certificate\n", "does not hold PEM certificates"),
    ("", "does not hold PEM certificates"),
])
def test_a_ca_bundle_that_cannot_be_trusted_from_is_named_at_check(tmp_path, content, problem):
    if content is not None:
        (tmp_path / "ca.pem").write_text(content)
    msg = error_for(tmp_path, HTTPS.replace("model: m}", "model: m, ca_bundle: ca.pem}"))
    assert f"gw.yaml: backends.a.ca_bundle: {tmp_path / 'ca.pem'} {problem}" in msg


def test_a_ca_bundle_on_a_plain_http_backend_is_refused(tmp_path):
    msg = error_for(tmp_path, GOOD.replace("model: m}", "model: m, ca_bundle: ca.pem}"))
    assert "gw.yaml: backends.a: ca_bundle is for https:// backends: this base_url is not one" in msg


def test_a_proxy_url_loads_and_never_shows_in_the_configs_repr(tmp_path):
    config = load_config(write(tmp_path, GOOD.replace("model: m}", "model: m, proxy: 'http://u:pw-xyz@proxy.corp:3128'}")),
                         environ={})
    assert config.backends["a"].proxy.get_secret_value() == "http://u:pw-xyz@proxy.corp:3128"
    assert "pw-xyz" not in repr(config)


@pytest.mark.parametrize("url, problem", [
    ("https://u:pw-xyz@proxy.corp:3128", "must start with http://"),
    ("socks5://u:pw-xyz@proxy.corp:1080", "must start with http://"),
    ("http://u:pw-xyz@proxy.corp:99999", "the port after the host must be a number 0-65535"),
    ("http://u:pw-xyz@:3128", "names no host"),
    ("http://u:pw-xyz@proxy.corp:3128/path", "must be http://[user:password@]host[:port] with nothing after it"),
])
def test_a_proxy_url_the_gateway_cannot_use_is_named_without_echoing_it(tmp_path, url, problem):
    msg = error_for(tmp_path, GOOD.replace("model: m}", f"model: m, proxy: '{url}'}}"))
    assert f"gw.yaml: backends.a.proxy: {problem}" in msg and "pw-xyz" not in msg


def test_a_proxy_may_come_from_an_environment_variable(tmp_path):
    path = write(tmp_path, GOOD.replace("model: m}", "model: m, proxy_env: PROXY}"))
    assert load_config(path, environ={"PROXY": "http://u:pw@proxy.corp:3128\n"}).backends["a"].proxy.get_secret_value() \
        == "http://u:pw@proxy.corp:3128"
    assert "gw.yaml: backends.a.proxy_env: environment variable PROXY is not set" in error_for(tmp_path, path.read_text())
    msg = error_for(tmp_path, path.read_text(), env={"PROXY": "https://u:pw-xyz@proxy.corp"})
    assert "gw.yaml: backends.a.proxy_env: environment variable PROXY holds no proxy URL the gateway can use " \
           "(must start with http://" in msg and "pw-xyz" not in msg
    both = GOOD.replace("model: m}", "model: m, proxy: 'http://p:1', proxy_env: PROXY}")
    assert "gw.yaml: backends.a: give proxy or proxy_env, not both" in error_for(tmp_path, both, env={"PROXY": "http://p:1"})


def test_a_shared_console_secret_comes_from_the_environment_and_must_be_long(tmp_path):
    text = GOOD.replace("auth: {mode: open}", "auth: {mode: open, console_secret_env: CONSOLE_SECRET}")
    config = load_config(write(tmp_path, text), environ={"CONSOLE_SECRET": "s" * 32 + "\n"})
    assert config.auth.console_secret.get_secret_value() == "s" * 32 and "sss" not in repr(config)
    assert "gw.yaml: auth.console_secret_env: environment variable CONSOLE_SECRET is not set" in error_for(tmp_path, text)
    msg = error_for(tmp_path, text, env={"CONSOLE_SECRET": "short-secret"})
    assert "gw.yaml: auth.console_secret_env: environment variable CONSOLE_SECRET holds 12 characters: a signing " \
           "secret needs at least 32" in msg and "short-secret" not in msg


SIM = GOOD + """simulator:
  backends:
    a: {port: 9101}
    b: {port: 9101}
"""


def test_two_simulated_backends_on_one_port_are_named_at_check(tmp_path):
    # The fleet used to fail the start with a bind traceback and "the fleet exited with status 1".
    assert "gw.yaml: simulator: backends a and b both use port 9101" in error_for(tmp_path, SIM)
    with pytest.raises(ConfigError, match="gw.yaml: simulator: backends a and b both use port 9101"):
        load_simulator_config(write(tmp_path, SIM))


def test_a_simulated_backend_on_the_gateways_own_port_is_named_at_check(tmp_path):
    text = GOOD + "server: {port: 9101}\nsimulator:\n  backends:\n    a: {port: 9101}\n"
    assert "gw.yaml: simulator.backends.a.port: 9101 is the gateway's own server.port" in error_for(tmp_path, text)
