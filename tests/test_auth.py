"""Bearer keys map to tenants; keys are only ever held as digests."""

from __future__ import annotations

import pytest

from app.admission.auth import DEMO_ADMIN_KEY_SHA256, Authenticator, admin_keys_for, hash_key
from app.config import AuthConfig
from app.errors import PermissionDenied, Unauthorized

CONFIG = AuthConfig(
    mode="keys",
    clients=[
        {"tenant": "acme", "key_sha256": hash_key("k-acme")},
        {"tenant": "lite", "key_sha256": hash_key("k-lite"), "models": ["small"]},
    ],
)


def test_key_maps_to_tenant():
    assert Authenticator(CONFIG).authenticate("Bearer k-acme").name == "acme"
    assert Authenticator(CONFIG).authenticate("bearer   k-lite").name == "lite"


@pytest.mark.parametrize("header", [None, "", "Bearer", "Basic k-acme", "Bearer k-nope"])
def test_bad_credentials_are_401(header):
    with pytest.raises(Unauthorized):
        Authenticator(CONFIG).authenticate(header)


def test_model_allowance():
    lite = Authenticator(CONFIG).authenticate("Bearer k-lite")
    lite.check_model("small")
    with pytest.raises(PermissionDenied):
        lite.check_model("big")


def test_open_mode_needs_no_key():
    auth = Authenticator(AuthConfig(mode="open", open_tenant="dev"))
    assert auth.authenticate(None).name == "dev"


def test_clear_keys_are_not_kept():
    auth = Authenticator(CONFIG)
    assert "k-acme" not in repr(vars(auth))


def test_the_published_demo_admin_key_is_honoured_from_this_machine_only():
    own = hash_key("an operator's own key")
    auth = AuthConfig(mode="open", admin_keys=[DEMO_ADMIN_KEY_SHA256, own])
    assert DEMO_ADMIN_KEY_SHA256 == hash_key("demo-admin")  # config/demo.yaml's, as README prints it
    for peer in ("127.0.0.1", "127.3.4.5", "::1", "::ffff:127.0.0.1"):
        assert admin_keys_for(auth, peer) == (DEMO_ADMIN_KEY_SHA256, own)
    for peer in ("192.0.2.2", "10.0.0.7", "fd00::2", "::ffff:192.0.2.2", None):
        assert admin_keys_for(auth, peer) == (own,)
    assert admin_keys_for(AuthConfig(mode="open", admin_keys=[own]), "192.0.2.2") == (own,)
