"""Client authentication: a bearer key becomes a tenant."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from app.admission.limits import key_id
from app.config import AuthConfig
from app.errors import PermissionDenied, Unauthorized


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    # Aliases this tenant may call; None means every alias.
    models: frozenset[str] | None = None
    # The client key's id for its own limits (a digest prefix, never the key); None in open mode.
    key_id: str | None = None

    def check_model(self, alias: str) -> None:
        if self.models is not None and alias not in self.models:
            raise PermissionDenied(f"this key may not use model {alias!r}", param="model")


# config/demo.yaml's admin key, "demo-admin": published in README, so anyone who reads it holds it.
DEMO_ADMIN_KEY_SHA256 = "cce7a2cf1ae045989cfc914fb95a41526f167a838b3c7d33745143614abace7c"
_LOOPBACK = ("127.", "::1", "::ffff:127.")


def admin_keys_for(auth: AuthConfig, peer: str | None) -> tuple[str, ...]:
    """The admin key digests a caller at `peer` (the connection's own address) may use. The published demo
    key opens /admin and the console from this machine only: the demo config in a container listens on
    0.0.0.0, and `docker run -p 8080:8080` would otherwise hand config changes to anyone who can reach it."""
    keys = auth.admin_keys
    if DEMO_ADMIN_KEY_SHA256 in keys and not (peer is not None and peer.startswith(_LOOPBACK)):
        return tuple(k for k in keys if k != DEMO_ADMIN_KEY_SHA256)
    return keys


def peer_of(request) -> str | None:
    """The address of a Starlette request's connection (never a forwarded header: proxy_headers is off)."""
    return request.client.host if request.client is not None else None


def duplicate_authorization() -> Unauthorized:
    """One rule everywhere: a request with more than one Authorization header is refused, never
    resolved by picking the first or the last (which proxies in front may disagree on)."""
    return Unauthorized("send exactly one Authorization header", code="duplicate_authorization")


def authorization_of(request) -> str | None:
    """The single Authorization header of a Starlette request (duplicate_authorization if repeated)."""
    values = request.headers.getlist("authorization")
    if len(values) > 1:
        raise duplicate_authorization()
    return values[0] if values else None


def hash_key(key: str) -> str:
    """The digest stored in config for a client key (sha256 hex)."""
    return hashlib.sha256(key.encode()).hexdigest()


class Authenticator:
    """Maps an Authorization header to a Tenant; built once from config."""

    def __init__(self, config: AuthConfig) -> None:
        self._open = Tenant(config.open_tenant) if config.mode == "open" else None
        # Lookup by digest: the clear key is never stored, and comparing digests in a dict does not
        # leak the key through timing.
        self._by_digest = {
            c.key_sha256: Tenant(c.tenant, frozenset(c.models) if c.models else None, key_id(c.key_sha256))
            for c in config.clients
        }

    def authenticate(self, authorization: str | None) -> Tenant:
        if self._open is not None:
            return self._open
        if not authorization:
            raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'")
        scheme, _, key = authorization.partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            raise Unauthorized("malformed Authorization header: expected 'Bearer <key>'")
        tenant = self._by_digest.get(hash_key(key))
        if tenant is None:
            raise Unauthorized("incorrect API key provided")
        return tenant
