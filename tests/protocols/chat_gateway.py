"""A real gateway process in front of one loopback chat backend (tests/protocols/chat_backend.py), and the official
SDKs' clients for it: what the tests of the gateway's translations to chat completions share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import openai

from app.admission.auth import hash_key
from tests.conftest import ACME_KEY, ADMIN_KEY
from tests.protocols.chat_backend import ChatBackend
from tests.support import Process, free_port, write_yaml

# A gateway config's auth section: tenant acme's key (ACME_KEY), and the admin key `settle` needs.
AUTH = {"mode": "keys", "clients": [{"tenant": "acme", "key_sha256": hash_key(ACME_KEY)}],
        "admin_keys": [hash_key(ADMIN_KEY)]}


class ChatGateway:
    def __init__(self, url: str, backend: ChatBackend) -> None:
        self.url, self.backend = url, backend

    def anthropic(self, key: str = ACME_KEY) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.url, api_key=key, max_retries=0)

    def openai(self, key: str = ACME_KEY) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)

    def settle(self) -> None:
        """The cache is written after the answer, in the background: wait until every entry is stored, or the
        next request may miss and reach a backend with no answer left to give (needs ADMIN_KEY in the config)."""
        r = httpx.post(f"{self.url}/admin/cache/flush", headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=10)
        assert r.status_code == 200, r.text


def serve(tmp: Path, backend: ChatBackend, config: dict) -> Iterator[ChatGateway]:
    """A module fixture's body: the gateway started with `config` (its server section filled in) in front of the
    started `backend`, yielded, then both stopped."""
    port = free_port()
    config = {**config, "server": {"host": "127.0.0.1", "port": port, **config.get("server", {})}}
    proc = Process(["serve", "--config", str(write_yaml(tmp / "gw.yaml", config))], tmp / "gw.log")
    try:
        proc.wait_listening(port)
        yield ChatGateway(f"http://127.0.0.1:{port}", backend)
    finally:
        proc.stop()
        backend.stop()
