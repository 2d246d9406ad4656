"""Every failure reaches the client as an OpenAI-style error the SDK raises as the matching exception."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from tests.conftest import ACME_KEY, MAX_BODY, gateway_config, start_gateway
from tests.support import free_port, set_faults

AUTH = {"authorization": f"Bearer {ACME_KEY}"}
MSG = [{"role": "user", "content": "hello"}]


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def test_malformed_json_is_400(gateway):
    r = httpx.post(f"{gateway.url}/v1/chat/completions", headers=AUTH, content=b'{"model": "chat", "messages": [')
    assert r.status_code == 400
    assert error_of(r)["code"] == "invalid_json"


@pytest.mark.parametrize(
    "body, param",
    [
        (b"[1, 2]", None),
        (b'{"messages": [{"role": "user", "content": "x"}]}', "model"),
        (b'{"model": 5, "messages": []}', "model"),
        (b'{"model": "chat", "messages": []}', "messages"),
        (b'{"model": "chat", "messages": ["hi"]}', "messages[0]"),
        (b'{"model": "chat", "messages": [{"role": "user"}], "stream": "yes"}', "stream"),
        (b'{"model": "chat", "messages": [{"role": "user"}], "max_tokens": "ten"}', "max_tokens"),
        (b'{"model": "chat", "messages": [{"role": "user"}], "max_tokens": true}', "max_tokens"),
        (b'{"model": "chat", "messages": [{"role": "user"}], "stream_options": {"include_usage": true}}', "stream_options"),
        (b"\xff\xfe not utf-8", None),
    ],
)
def test_bad_bodies_are_400_naming_the_field(gateway, body, param):
    r = httpx.post(f"{gateway.url}/v1/chat/completions", headers=AUTH, content=body)
    assert r.status_code == 400
    assert error_of(r)["param"] == param


def test_sdk_raises_bad_request(client):
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="chat", messages=[])


def test_unknown_model_is_404_model_not_found(client):
    with pytest.raises(openai.NotFoundError) as exc:
        client.chat.completions.create(model="no-such-model", messages=MSG)
    assert exc.value.code == "model_not_found"


def test_body_over_limit_is_413(client):
    with pytest.raises(openai.APIStatusError) as exc:
        client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "x" * (MAX_BODY + 1)}])
    assert exc.value.status_code == 413


def test_body_over_limit_without_content_length_is_413(gateway):
    def chunks():
        for _ in range(MAX_BODY // 1024 + 2):
            yield b" " * 1024

    r = httpx.post(f"{gateway.url}/v1/chat/completions", headers=AUTH, content=chunks())
    assert r.status_code == 413


def test_missing_key_is_401(gateway):
    r = httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "chat", "messages": MSG})
    assert r.status_code == 401
    assert error_of(r)["type"] == "authentication_error"


def test_unknown_key_is_401_and_not_echoed(gateway):
    client = gateway.client(key="sk-wrong-secret-value")
    with pytest.raises(openai.AuthenticationError) as exc:
        client.chat.completions.create(model="chat", messages=MSG)
    assert "sk-wrong" not in str(exc.value) and "secret-value" not in str(exc.value)


def test_model_outside_tenant_allowance_is_403(gateway):
    from tests.conftest import GLOBEX_KEY

    client = gateway.client(key=GLOBEX_KEY)
    client.chat.completions.create(model="chat", messages=MSG, max_tokens=1)
    with pytest.raises(openai.PermissionDeniedError):
        client.chat.completions.create(model="slow", messages=MSG, max_tokens=1)


def test_unreachable_backend_is_502(client):
    with pytest.raises(openai.InternalServerError) as exc:
        client.chat.completions.create(model="dead", messages=MSG)
    assert exc.value.status_code == 502
    assert exc.value.code == "upstream_unreachable"


def test_unreachable_backend_on_stream_is_502_before_any_chunk(client):
    with pytest.raises(openai.InternalServerError) as exc:
        client.chat.completions.create(model="dead", messages=MSG, stream=True)
    assert exc.value.status_code == 502


def test_backend_timeout_is_504(client):
    with pytest.raises(openai.InternalServerError) as exc:
        client.chat.completions.create(model="hang", messages=MSG)
    assert exc.value.status_code == 504
    assert exc.value.code == "upstream_timeout"


def test_backend_4xx_passes_through_with_status_and_message(client, flaky):
    set_faults(flaky, rate_limit_rate=1.0, retry_after_s=7)
    with pytest.raises(openai.RateLimitError) as exc:
        client.chat.completions.create(model="flaky", messages=MSG)
    assert exc.value.status_code == 429
    assert "simulated rate limit" in exc.value.message
    assert exc.value.response.headers["retry-after"] == "7"


def test_backend_500_passes_through(client, flaky):
    set_faults(flaky, error_rate=1.0)
    with pytest.raises(openai.InternalServerError) as exc:
        client.chat.completions.create(model="flaky", messages=MSG, stream=True)
    assert exc.value.status_code == 500


def test_stream_broken_midway_ends_with_error_event(client, flaky):
    set_faults(flaky, disconnect_rate=1.0)
    stream = client.chat.completions.create(
        model="flaky", messages=MSG, max_tokens=20, stream=True, extra_body={"ignore_eos": True}
    )
    with pytest.raises(openai.APIError) as exc:
        for _ in stream:
            pass
    assert "closed the connection" in str(exc.value) or "ended the stream" in str(exc.value)


def test_backend_dropping_a_non_streamed_call_is_502(client, flaky):
    set_faults(flaky, disconnect_rate=1.0)
    with pytest.raises(openai.InternalServerError) as exc:
        client.chat.completions.create(model="flaky", messages=MSG, max_tokens=20, extra_body={"ignore_eos": True})
    assert exc.value.status_code == 502


def test_unknown_route_is_openai_style_404(gateway):
    r = httpx.get(f"{gateway.url}/v1/nothing-here", headers=AUTH)
    assert r.status_code == 404
    assert error_of(r)["type"] == "invalid_request_error"


def test_process_survives_garbage(gateway):
    for body in [b"", b"null", b"{}", b'{"model": "chat", "messages": [{"role": "user", "content": {"a": 1}}]}', b"[" * 10000]:
        httpx.post(f"{gateway.url}/v1/chat/completions", headers=AUTH, content=body)
    assert gateway.process.proc.poll() is None
    assert "Traceback" not in gateway.process.log()
    assert httpx.get(f"{gateway.url}/healthz").status_code == 200


@pytest.fixture(scope="module")
def quick_idle(fleet, tmp_path_factory):
    """A gateway whose flaky and slow backends may go silent mid-stream for at most 0.5 s."""
    config = gateway_config(fleet, free_port())
    for name in ("flaky", "slow"):
        config["backends"][name]["timeouts"] = {"idle_s": 0.5}
    gw = start_gateway(tmp_path_factory.mktemp("idle"), fleet, config)
    yield gw
    gw.process.stop()


def test_a_backend_silent_mid_stream_past_the_idle_limit_ends_the_stream_with_an_error_event(quick_idle, flaky):
    set_faults(flaky, stall_rate=1.0, stall_s=5.0)
    stream = quick_idle.client().chat.completions.create(
        model="flaky", messages=MSG, max_tokens=20, stream=True, extra_body={"ignore_eos": True})
    started = time.monotonic()
    with pytest.raises(openai.APIError) as exc:
        for _ in stream:
            pass
    assert "sent nothing for 0.5s mid-stream" in str(exc.value)
    assert time.monotonic() - started < 3.0  # the limit, not the backend's 5 s stall


def test_a_backend_that_keeps_sending_is_never_cut_by_the_idle_limit_however_long_the_stream(quick_idle):
    # 40 tokens 40 ms apart: 1.6 s in all, three times the idle limit, but never silent for long.
    started = time.monotonic()
    stream = quick_idle.client().chat.completions.create(
        model="slow", messages=MSG, max_tokens=40, stream=True, extra_body={"ignore_eos": True})
    assert sum(1 for c in stream if c.choices and c.choices[0].delta.content) == 40
    assert time.monotonic() - started > 1.0


def test_an_unexpected_failure_and_a_typed_parameter_refused_answer_in_the_shape_of_the_clients_api():
    # No route of the gateway is known to raise, nor takes a parameter FastAPI validates, so routes that do are
    # added (the only way to reach those two handlers); the app is the real one, in-process.
    import asyncio

    from app.config import load_config
    from app.http.server import create_app
    from tests.support import ROOT

    def crash() -> None:
        raise RuntimeError("secret-ish detail from deep inside")

    def typed(limit: int) -> None:
        return None

    async def answers() -> tuple[httpx.Response, ...]:
        front = create_app(load_config(ROOT / "config/demo.yaml"))
        front.app.add_api_route("/v1/messages/crash", crash)
        front.app.add_api_route("/v1/crash", crash)
        front.app.add_api_route("/v1/messages/typed", typed)
        transport = httpx.ASGITransport(front, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            return (await client.get("/v1/messages/crash"), await client.get("/v1/crash"),
                    await client.get("/v1/messages/typed?limit=ten"))

    anthropic_shaped, openai_shaped, refused = asyncio.run(answers())
    assert refused.status_code == 400 and refused.json()["error"]["type"] == "invalid_request_error"
    assert refused.json()["type"] == "error" and refused.json()["error"]["message"].startswith("invalid request:")
    assert anthropic_shaped.status_code == 500 and openai_shaped.status_code == 500
    assert anthropic_shaped.json() == {"type": "error", "error": {"type": "api_error",
                                                                 "message": "internal gateway error"}}
    assert error_of(openai_shaped)["code"] == "internal_error"
    assert "secret-ish" not in anthropic_shaped.text + openai_shaped.text
