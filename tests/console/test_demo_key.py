"""The demo config's admin key ("demo-admin") is printed in README, so it opens /admin and the console only to
callers on this machine: the container image serves the demo config on 0.0.0.0. A real demo gateway listens on
every address here and is called from loopback and from this machine's own non-loopback address."""

from __future__ import annotations

import socket

import httpx
import pytest

from tests.console.browser import ADMIN_KEY, demo_config
from tests.support import Process


def _own_address() -> str | None:
    """This machine's address on its default route (a UDP connect sends nothing), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = s.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address


@pytest.fixture(scope="module")
def everywhere(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("demo-key")
    path, port = demo_config(tmp, capture_content=False)
    proc = Process(["serve", "--config", str(path), "--host", "0.0.0.0"], tmp / "gateway.log")
    try:
        proc.wait_listening(port)
        yield port
    finally:
        proc.stop()


def test_the_demo_admin_key_works_from_loopback(everywhere):
    r = httpx.get(f"http://127.0.0.1:{everywhere}/admin/backends", headers={"authorization": f"Bearer {ADMIN_KEY}"})
    assert r.status_code == 200, r.text


def test_the_demo_admin_key_is_refused_from_another_address(everywhere):
    address = _own_address()
    if address is None:
        pytest.skip("this machine has no non-loopback address to call from")
    base = f"http://{address}:{everywhere}"
    r = httpx.get(f"{base}/admin/backends", headers={"authorization": f"Bearer {ADMIN_KEY}"})
    assert r.status_code == 401
    assert "only from this machine" in r.json()["error"]["message"]
    # The console's sign-in says why, and sets no session.
    page = httpx.post(f"{base}/console/login", content=f"key={ADMIN_KEY}",
                      headers={"content-type": "application/x-www-form-urlencoded"})
    assert "only from this machine" in page.text and "set-cookie" not in page.headers
    # The API the clients use is not affected.
    chat = httpx.post(f"{base}/v1/chat/completions", headers={"authorization": "Bearer any"}, timeout=30,
                      json={"model": "llama-8b", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
    assert chat.status_code == 200, chat.text
