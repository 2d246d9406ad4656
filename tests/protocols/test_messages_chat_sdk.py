"""Anthropic's Messages API over chat-completions backends, as the official anthropic SDK sees it from a real gateway
process: the usage it reports, and what becomes of the request fields a chat backend has no place for. The
backends are loopback chat servers whose answers each test writes (tests/protocols/chat_backend.py)."""

from __future__ import annotations

import anthropic
import pytest

from app.admission.auth import hash_key
from tests.conftest import ACME_KEY, NO_BREAKER
from tests.protocols.chat_backend import ChatBackend, Chunks, Json
from tests.support import Process, free_port, write_yaml

ASK = [{"role": "user", "content": "Weather in Paris?"}]
USAGE = {"prompt_tokens": 42, "completion_tokens": 3, "total_tokens": 45}


class Gateway:
    def __init__(self, url: str, backend: ChatBackend) -> None:
        self.url, self.backend = url, backend

    def anthropic(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.url, api_key=ACME_KEY, max_retries=0)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    backend = ChatBackend().start()
    port = free_port()
    url = f"http://127.0.0.1:{backend.port}/v1"
    config = {
        "server": {"host": "127.0.0.1", "port": port},
        "auth": {"mode": "keys", "clients": [{"tenant": "acme", "key_sha256": hash_key(ACME_KEY)}]},
        # Both speak chat completions only here (TGI's flavour does anyway; the vLLM one is told so): Messages is
        # translated for them. They differ in what the flavour lets the gateway ask of the server.
        "backends": {"tgi": {"base_url": url, "model": "m-scripted", "flavor": "tgi"},
                     "vllm": {"base_url": url, "model": "m-scripted", "flavor": "vllm", "apis": ["chat"]}},
        "reliability": NO_BREAKER,
        "models": {"tgi": {"backends": ["tgi"], "retry": {"max_attempts": 1}},
                   "vllm": {"backends": ["vllm"], "retry": {"max_attempts": 1}}},
    }
    tmp = tmp_path_factory.mktemp("messages-chat-gw")
    proc = Process(["serve", "--config", str(write_yaml(tmp / "gw.yaml", config))], tmp / "gw.log")
    proc.wait_listening(port)
    yield Gateway(f"http://127.0.0.1:{port}", backend)
    proc.stop()
    backend.stop()


@pytest.fixture(autouse=True)
def _fresh(gateway):
    gateway.backend.answers.clear()
    gateway.backend.bodies.clear()


# --- usage ------------------------------------------------------------------------------------------------------

def _streamed(gateway: Gateway, alias: str) -> tuple[anthropic.types.Message, anthropic.types.Message]:
    """The message_start event's message and the SDK's final message of one streamed answer."""
    gateway.backend.queue(Chunks([{"role": "assistant", "content": ""}, {"content": "Sunny"}, {"content": "."}],
                                 usage=USAGE))
    with gateway.anthropic().messages.stream(model=alias, max_tokens=16, messages=ASK) as stream:
        start = next(e for e in stream if e.type == "message_start").message
        final = stream.get_final_message()
    return start, final


def test_a_backend_that_reports_the_prompt_on_its_first_chunk_has_message_start_say_it(gateway):
    # vLLM reports usage on every chunk, the first one included, when asked for continuous usage: the gateway asks
    # its vLLM backends, and message_start carries the prompt's count as Anthropic's does (it said 0 before).
    start, final = _streamed(gateway, "vllm")
    assert gateway.backend.bodies[0]["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert start.usage.input_tokens == 42
    assert (final.usage.input_tokens, final.usage.output_tokens) == (42, 3)


def test_a_backend_that_reports_usage_at_the_end_only_has_the_final_message_right(gateway):
    # TGI, llama.cpp and OpenAI say nothing of the prompt before their last chunk. message_start says 0 then (no
    # estimate passed off as the backend's count), and message_delta's usage, which the SDK's accumulator takes
    # over message_start's, gives the final message the true count.
    start, final = _streamed(gateway, "tgi")
    assert gateway.backend.bodies[0]["stream_options"] == {"include_usage": True}
    assert start.usage.input_tokens == 0
    assert (final.usage.input_tokens, final.usage.output_tokens) == (42, 3)


def test_a_whole_answer_reports_the_prompt(gateway):
    gateway.backend.queue(Json({"role": "assistant", "content": "Sunny."}, usage=USAGE))
    message = gateway.anthropic().messages.create(model="tgi", max_tokens=16, messages=ASK)
    assert (message.usage.input_tokens, message.usage.output_tokens) == (42, 3)
