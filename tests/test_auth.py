"""Bearer keys map to tenants; keys are only ever held as digests."""

from __future__ import annotations

import pytest

from app.admission.auth import Authenticator, hash_key
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
