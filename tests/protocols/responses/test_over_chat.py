"""/v1/responses translated for a chat-completions backend whose answers each test writes (tests/protocols/chat_backend.py),
driven with the official openai SDK against a real gateway process: what a model says that the simulator never does."""

from __future__ import annotations

import openai
import pytest

from app.admission.auth import hash_key
from tests.conftest import ACME_KEY, GLOBEX_KEY, NO_BREAKER
from tests.protocols.chat_backend import ChatBackend, Chunks, Json
from tests.support import Process, free_port, write_yaml

WEATHER = {"type": "function", "name": "weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


class Gateway:
    def __init__(self, url: str, backend: ChatBackend) -> None:
        self.url, self.backend = url, backend

    def client(self, key: str = ACME_KEY) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    backend = ChatBackend().start()
    port = free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port},
        "auth": {"mode": "keys", "clients": [{"tenant": "acme", "key_sha256": hash_key(ACME_KEY)},
                                             {"tenant": "globex", "key_sha256": hash_key(GLOBEX_KEY)}]},
        "backends": {"chat": {"base_url": f"http://127.0.0.1:{backend.port}/v1", "model": "m-scripted",
                              "flavor": "tgi"}},  # TGI's flavour speaks chat completions only: Responses is translated
        "reliability": NO_BREAKER,
        "models": {"tools": {"backends": ["chat"], "retry": {"max_attempts": 1}},
                   "cached": {"backends": ["chat"], "retry": {"max_attempts": 1},
                              "cache": {"exact": {"enabled": True, "ttl_s": 300}}}},
    }
    tmp = tmp_path_factory.mktemp("responses-over-chat")
    proc = Process(["serve", "--config", str(write_yaml(tmp / "gw.yaml", config))], tmp / "gw.log")
    proc.wait_listening(port)
    yield Gateway(f"http://127.0.0.1:{port}", backend)
    proc.stop()
    backend.stop()


@pytest.fixture(autouse=True)
def _fresh(gateway):
    gateway.backend.answers.clear()
    gateway.backend.bodies.clear()


# --- a cut answer: the item the cut fell in says incomplete ----------------------------------------------------

REASONED_CALL_CUT = {"role": "assistant", "content": None, "reasoning_content": "Paris, so call weather.",
                     "tool_calls": [{"id": "call_1", "type": "function",
                                     "function": {"name": "weather", "arguments": '{"ci'}}]}


def test_a_call_cut_by_max_output_tokens_is_an_incomplete_item_after_a_completed_reasoning_item(gateway):
    # The reasoning ended before the call began; the cap fell inside the call's arguments. OpenAI marks only the
    # item the cut fell in `incomplete` (ResponseFunctionToolCall.status): a client that runs completed calls
    # must not run this one.
    gateway.backend.queue(Json(REASONED_CALL_CUT, "length"))
    client = gateway.client()
    r = client.responses.create(model="tools", input="Weather in Paris?", tools=[WEATHER], max_output_tokens=8)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert [(i.type, i.status) for i in r.output] == [("reasoning", "completed"), ("function_call", "incomplete")]
    assert [i.status for i in client.responses.retrieve(r.id).output] == ["completed", "incomplete"]


def test_a_streamed_call_cut_by_max_output_tokens_is_done_incomplete_in_every_event_and_the_stored_turn(gateway):
    gateway.backend.queue(Chunks([{"role": "assistant", "reasoning_content": "Paris, so call weather."},
                                  {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                   "function": {"name": "weather", "arguments": '{"ci'}}]}],
                                 finish_reason="length"))
    client = gateway.client()
    events = list(client.responses.create(model="tools", input="Weather in Paris?", tools=[WEATHER],
                                          max_output_tokens=8, stream=True))
    done = [(e.item.type, e.item.status) for e in events if e.type == "response.output_item.done"]
    assert done == [("reasoning", "completed"), ("function_call", "incomplete")]
    final = events[-1]
    assert final.type == "response.incomplete"
    assert [i.status for i in final.response.output] == ["completed", "incomplete"]
    assert [i.status for i in client.responses.retrieve(final.response.id).output] == ["completed", "incomplete"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_message_a_content_filter_stopped_is_incomplete_for_that_reason(gateway, stream):
    client = gateway.client()
    if stream:
        gateway.backend.queue(Chunks([{"role": "assistant", "content": "Here is how to"}], finish_reason="content_filter"))
        r = list(client.responses.create(model="tools", input="Tell me.", stream=True))[-1].response
    else:
        gateway.backend.queue(Json({"role": "assistant", "content": "Here is how to"}, "content_filter"))
        r = client.responses.create(model="tools", input="Tell me.")
    assert r.status == "incomplete" and r.incomplete_details.reason == "content_filter"
    assert [(i.type, i.status) for i in r.output] == [("message", "incomplete")]
