"""Who may use the console: an admin key, sent as a bearer token or exchanged once for a session cookie.

The cookie is signed with a secret (it never holds the key) and names the admin key by its digest prefix, so
taking a key out of `auth.admin_keys` ends its sessions at the next reload. The secret is this process's own,
unless `auth.console_secret_env` names one every replica (and worker) shares: then a session begun on one is
valid on all, as a console behind a Service that spreads requests over several replicas needs.
A browser sends the cookie on its own, so every change (POST) needs the CSRF token the page got from
/console/api/session, and an Origin, when sent, must be this host: another site's form can do neither.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from starlette.requests import Request

from app.admission.auth import admin_keys_for, authorization_of, hash_key, peer_of
from app.config import AuthConfig
from app.errors import PermissionDenied, Unauthorized

COOKIE = "slipstream_console"
CSRF_HEADER = "x-csrf-token"
SESSION_S = 8 * 3600
_PROCESS_SECRET = secrets.token_bytes(32)  # without a shared one: a restart signs everyone out


@dataclass(frozen=True, slots=True)
class Operator:
    key_id: str  # the admin key's digest prefix: who did what, never the key
    via_cookie: bool
    cookie: str = ""
    csrf: str = ""  # the token a cookie session's changes must carry (none for a bearer key)


def signing_secret(auth: AuthConfig) -> bytes:
    """What sessions are signed with: the shared secret the config names, else this process's own."""
    return auth.console_secret.get_secret_value().encode() if auth.console_secret is not None else _PROCESS_SECRET


def _sign(secret: bytes, message: str) -> str:
    return hmac.new(secret, message.encode(), hashlib.sha256).hexdigest()


def key_id(digest: str) -> str:
    return digest[:12]


def check_key(admin_keys: tuple[str, ...], key: str) -> str | None:
    """The matching admin key digest for a clear key, or None."""
    digest = hash_key(key.strip()) if key.strip() else ""
    match = None
    for k in admin_keys:
        if hmac.compare_digest(digest, k):
            match = k
    return match


def session_cookie(digest: str, secret: bytes, now: float | None = None) -> str:
    expires = int((now or time.time()) + SESSION_S)
    body = f"{expires}.{key_id(digest)}"
    return f"{body}.{_sign(secret, body + '.' + digest)}"


def _from_cookie(admin_keys: tuple[str, ...], value: str, secret: bytes) -> str | None:
    parts = value.split(".")
    if len(parts) != 3 or not parts[0].isdigit() or int(parts[0]) < time.time():
        return None
    body = f"{parts[0]}.{parts[1]}"
    for digest in admin_keys:
        if key_id(digest) == parts[1] and hmac.compare_digest(parts[2], _sign(secret, body + "." + digest)):
            return digest
    return None


def operator(request: Request) -> Operator:
    """The admin behind this request, or 401."""
    auth = request.app.state.gateway.config.auth
    keys = admin_keys_for(auth, peer_of(request))
    header = authorization_of(request)
    if header:
        scheme, _, key = header.partition(" ")
        digest = check_key(keys, key) if scheme.lower() == "bearer" else None
        if digest is None:
            raise Unauthorized("an admin key is required for the console")
        return Operator(key_id(digest), via_cookie=False)
    cookie = request.cookies.get(COOKIE, "")
    secret = signing_secret(auth)
    digest = _from_cookie(keys, cookie, secret) if cookie else None
    if digest is None:
        raise Unauthorized("an admin key is required for the console")
    return Operator(key_id(digest), via_cookie=True, cookie=cookie, csrf=_sign(secret, "csrf." + cookie)[:32])


def same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if origin is None:  # not a browser's cross-site request (curl, a same-origin GET)
        return True
    host = request.headers.get("host", "")
    return origin.split("://", 1)[-1] == host


def operator_for_change(request: Request) -> Operator:
    """As `operator`, for a request that changes something: cross-site requests are refused."""
    who = operator(request)
    if not same_origin(request):
        raise PermissionDenied("cross-origin request refused", code="csrf_refused")
    if who.via_cookie and not hmac.compare_digest(request.headers.get(CSRF_HEADER, ""), who.csrf):
        raise PermissionDenied("missing or wrong CSRF token", code="csrf_refused")
    return who
