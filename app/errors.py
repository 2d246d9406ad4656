"""The gateway's error types and the one place they become OpenAI-style error bodies."""

from __future__ import annotations

import orjson


class GatewayError(Exception):
    """An error the client sees as `{"error": {message, type, param, code}}` with `status`."""

    status = 500
    type = "api_error"
    code: str | None = None
    # Whether the request itself caused this failure (a backend adapter may know; None: unknown).
    # Request-caused failures never count against a backend's health.
    request_caused: bool | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def json(self) -> bytes:
        return orjson.dumps(self.body())

    @property
    def should_retry(self) -> bool:
        """Whether the client's own retry may help (the openai SDK reads it as `x-should-retry`):
        a busy or briefly broken upstream, not the request, a spent deadline or a misconfiguration."""
        if self.code in _NEVER_RETRY:
            return False
        return self.status in (429, 502, 503)


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"


class Unauthorized(GatewayError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class PermissionDenied(GatewayError):
    status = 403
    type = "permission_error"
    code = "model_not_allowed"


class ModelNotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"


class NotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class PayloadTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class Overloaded(GatewayError):
    """Every backend of the alias is at its concurrency limit for longer than the queue timeout."""

    status = 503
    type = "overloaded_error"
    code = "backends_busy"


class RateLimited(GatewayError):
    """A tenant's or key's limit refused the request (app/admission); the headers say when to return."""

    status = 429
    type = "requests"
    code = "rate_limit_exceeded"


class LimiterUnavailable(GatewayError):
    """The shared limiter cannot be reached and the config says to fail closed."""

    status = 503
    type = "overloaded_error"
    code = "rate_limiter_unavailable"


class TargetUnmeetable(GatewayError):
    """A sheddable request's latency target cannot be met by any backend now: refused before any work."""

    status = 503
    type = "overloaded_error"
    code = "latency_target_unmeetable"


class Interrupted(GatewayError):
    """The gateway stopped before the answer was complete (shutdown past its grace period) while the client
    still waited: nothing of it was wrong, so it may be sent again, to a replica that is not stopping."""

    status = 503
    code = "request_interrupted"


class NoBackendAvailable(GatewayError):
    """Every backend of the alias is ejected by its circuit breaker."""

    status = 503
    type = "overloaded_error"
    code = "no_backend_available"


class AllAttemptsFailed(GatewayError):
    """The alias and its whole fallback chain failed; the message lists every cause."""

    status = 503
    type = "upstream_error"
    code = "all_backends_failed"


class UpstreamUnreachable(GatewayError):
    status = 502
    type = "upstream_error"
    code = "upstream_unreachable"


class UpstreamMisconfigured(GatewayError):
    """A backend refused the gateway's own credentials (its 401/403): the operator's problem, not the client's."""

    status = 502
    type = "upstream_error"
    code = "upstream_misconfigured"


class UpstreamTimeout(GatewayError):
    status = 504
    type = "timeout_error"
    code = "upstream_timeout"


class FirstTokenTimeout(UpstreamTimeout):
    """A stream's first event did not come within the backend's first-token limit (`limit_s`, seconds from
    the request's send): routing weighs that wait against the one it predicted (app.routing.health.verdict)."""

    code = "first_token_timeout"

    def __init__(self, backend: str, limit_s: float) -> None:
        super().__init__(f"backend {backend} sent no first token within {limit_s:g}s")
        self.limit_s = limit_s


class UpstreamProtocolError(GatewayError):
    """The backend answered something that is not a valid OpenAI-style response."""

    status = 502
    type = "upstream_error"
    code = "upstream_bad_response"


class UpstreamStatus(GatewayError):
    """A backend's own error response, passed through with its status and message."""

    type = "upstream_error"

    @classmethod
    def from_response(cls, status: int, body: bytes, backend: str) -> UpstreamStatus:
        """Build from the backend's status and body, keeping its message, type and code where present."""
        message, etype, param, code = f"backend {backend} answered HTTP {status}", None, None, None
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            data = None
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(err, dict):
            message = str(err.get("message") or message)
            etype, param, code = err.get("type"), err.get("param"), err.get("code")
        elif isinstance(err, str):  # TGI and llama.cpp style: {"error": "...", "error_type": "..."}
            message, etype = err, data.get("error_type")
        elif isinstance(data, dict) and isinstance(data.get("detail"), str):
            message = data["detail"]
        elif isinstance(data, dict) and isinstance(data.get("message"), str):  # vLLM's ErrorResponse
            message, etype, param, code = data["message"], data.get("type"), data.get("param"), data.get("code")
        exc = cls(message, param=param if isinstance(param, str) else None, status=status)
        if isinstance(code, str) and code and not code.isdigit():  # a bare status number is no code
            exc.code = code[:64]
        exc.type = etype if isinstance(etype, str) else _default_type(status)
        return exc


# Errors a client retry cannot fix: its time is spent, or the gateway itself is misconfigured.
_NEVER_RETRY = frozenset({"deadline_exceeded", "upstream_misconfigured", "internal_error", "upstream_timeout"})

# Failures of an upstream attempt that say something about the backend's health.
UPSTREAM_FAILURES = (UpstreamStatus, UpstreamTimeout, UpstreamUnreachable, UpstreamProtocolError, UpstreamMisconfigured)


def _default_type(status: int) -> str:
    if status == 429:
        return "rate_limit_error"
    return "invalid_request_error" if status < 500 else "upstream_error"


def sse_error_event(err: GatewayError) -> bytes:
    """An SSE event carrying the error; the openai SDK raises APIError when it reads one."""
    return b"data: " + err.json() + b"\n\n"


# Two facts about an upstream error that both dispatch (retry, fall back) and routing (health) read.
def retry_after_s(err: GatewayError) -> float | None:
    """The backend's Retry-After in seconds, when it gave one in the delta-seconds form."""
    value = err.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def counts_against_backend(err: GatewayError) -> bool:
    """Failures that say the backend is unwell (a 429 only says it is busy; a 4xx is the request's fault)."""
    if err.request_caused:
        return False
    if isinstance(err, UpstreamStatus):
        return err.status >= 500 and err.status != 501
    if isinstance(err, UpstreamTimeout):
        return err.code != "deadline_exceeded"  # the client's budget ran out, not the backend's
    return isinstance(err, (UpstreamUnreachable, UpstreamProtocolError, UpstreamMisconfigured))
