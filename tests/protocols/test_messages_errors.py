"""Every error the gateway gives a Messages client, produced by the real pipeline (scripted transport) and
read by the official anthropic SDK's own status-to-exception code, which must pick the matching class.

The SDK's reader (`_make_status_error_from_response`) gets the gateway's response as an httpx2 response
object rather than over a socket: producing a 529 or a 504 on demand from real processes would take
breakers and timeouts of seconds; the pipeline and the SDK code are the real ones.
"""

from __future__ import annotations

import anthropic
import httpx2
import orjson
import pytest

from app.admission.auth import hash_key
from app.config import GatewayConfig
from app.errors import PayloadTooLarge, UpstreamUnreachable
from app.http.fastpath import error_response
from app.protocols import MESSAGES
from app.upstream.scripted import Fail, Hang, Reply, ScriptedTransport, completion
from tests.scripted import KEY, LIMITED_KEY, Answer, call, run

ASK = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
SDK = anthropic.Anthropic(api_key="unused", base_url="http://gateway.invalid")


def config(**sections) -> GatewayConfig:
    return GatewayConfig.model_validate({
        "auth": {"mode": "keys", "clients": [
            {"tenant": "acme", "key_sha256": hash_key(KEY)},
            {"tenant": "other", "key_sha256": hash_key(LIMITED_KEY), "models": ["n"]},
        ]},
        "backends": {"a": {"base_url": "http://127.0.0.1:9/a/v1", "model": "m-a", "flavor": "tgi"}},
        "models": {"m": {"backends": ["a"], "retry": {"max_attempts": 1}}, "n": {"backends": ["a"]}},
        "reliability": {"breaker": {"consecutive_failures": 1, "error_rate": 1.0, "min_requests": 1000}},
        "limits": {"tenants": {"acme": {"limits": {"requests_per_minute": 1000}}}},
        **sections,
    })


def sdk_error(answer: Answer) -> anthropic.APIStatusError:
    request = httpx2.Request("POST", "http://gateway.invalid/v1/messages")
    response = httpx2.Response(answer.status, headers=answer.headers, content=answer.body, request=request)
    return SDK._make_status_error_from_response(response)


def answers(transport, *calls, cfg=None) -> list[Answer]:
    async def scenario(gw):
        return [await call(gw, body, endpoint=MESSAGES, **kw) for body, kw in calls]

    return run(cfg or config(), transport, scenario)


@pytest.mark.parametrize(("case", "status", "etype", "cls"), [
    ("bad body", 400, "invalid_request_error", anthropic.BadRequestError),
    ("wrong key", 401, "authentication_error", anthropic.AuthenticationError),
    ("model not allowed", 403, "permission_error", anthropic.PermissionDeniedError),
    ("unknown model", 404, "not_found_error", anthropic.NotFoundError),
    ("backend 500", 500, "api_error", anthropic.InternalServerError),
    ("deadline", 504, "timeout_error", anthropic.GatewayTimeoutError),
])
def test_each_error_is_anthropics_type_status_and_sdk_class(case, status, etype, cls):
    transport = ScriptedTransport({
        "backend 500": [Reply({"error": {"message": "boom", "type": "server_error"}}, status=500)],
        "deadline": [Hang()],
    }.get(case, [Reply(completion())]))
    body, kw = {
        "bad body": ({**ASK, "max_tokens": "many"}, {}),
        "wrong key": (ASK, {"key": "sk-wrong-0000000000"}),
        "model not allowed": (ASK, {"key": LIMITED_KEY}),
        "unknown model": ({**ASK, "model": "nope"}, {}),
        "backend 500": (ASK, {}),
        "deadline": (ASK, {"headers": {"x-slipstream-timeout-ms": "50"}}),
    }[case]
    (answer,) = answers(transport, (body, kw))
    assert answer.status == status
    assert answer.json() == {"type": "error", "error": {"type": etype, "message": answer.json()["error"]["message"]}}
    assert isinstance(sdk_error(answer), cls)


def test_a_body_over_the_limit_is_request_too_large():
    # The HTTP front refuses it before the pipeline (app.http.fastpath reads the body): its answer for this API.
    response = error_response(PayloadTooLarge("request body is larger than the limit"), MESSAGES)
    answer = Answer(response.status_code, dict(response.headers), response.body)
    assert answer.status == 413 and answer.json()["error"]["type"] == "request_too_large"
    assert isinstance(sdk_error(answer), anthropic.RequestTooLargeError)


def test_a_rate_limited_call_is_a_rate_limit_error_with_retry_after():
    cfg = config(limits={"tenants": {"acme": {"limits": {"requests_per_minute": 1}}}})
    _, limited = answers(ScriptedTransport(lambda b, n: Reply(completion())), (ASK, {}), (ASK, {}), cfg=cfg)
    assert limited.status == 429 and limited.json()["error"]["type"] == "rate_limit_error"
    assert int(limited.headers["retry-after"]) >= 1 and "anthropic-ratelimit-requests-limit" in limited.headers
    assert isinstance(sdk_error(limited), anthropic.RateLimitError)


def test_every_backend_ejected_is_overloaded_529():
    transport = ScriptedTransport([Fail(UpstreamUnreachable("down"))])
    _, ejected = answers(transport, (ASK, {}), (ASK, {}))
    assert ejected.status == 529 and ejected.json()["error"]["type"] == "overloaded_error"
    assert "retry-after" in ejected.headers
    assert isinstance(sdk_error(ejected), anthropic.OverloadedError)


def test_an_error_body_never_carries_openais_shape():
    (answer,) = answers(ScriptedTransport([]), ({**ASK, "messages": []}, {}))
    assert set(orjson.loads(answer.body)) == {"type", "error"} and "param" not in answer.json()["error"]
