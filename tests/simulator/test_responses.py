"""The simulator's /v1/responses: native by config (as llama.cpp serves it, stateless), absent on a chat-only one."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.support import Process, free_port, write_yaml


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sim-responses")
    ports = {"native": free_port(), "chat": free_port()}
    base = {"prefill_tokens_per_s": 20000, "tpot_ms": 2, "output": {"median": 6, "sigma": 0, "max": 6}}
    write_yaml(tmp / "s.yaml", {"simulator": {"seed": 5, "backends": {
        "native": dict(port=ports["native"], model="n", apis=["chat", "responses"], **base),
        "chat": dict(port=ports["chat"], model="c", **base),
    }}})
    p = Process(["simulate", "--config", str(tmp / "s.yaml")], tmp / "s.log")
    for port in ports.values():
        p.wait_listening(port)
    yield ports
    p.stop()


def client(port: int) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)


def test_a_native_simulator_answers_responses_json_with_usage(sim):
    r = client(sim["native"]).responses.create(model="n", input="hello there", instructions="be brief")
    assert r.status == "completed" and r.output_text
    assert r.usage.input_tokens > 0 and r.usage.output_tokens == 6


def test_a_native_simulator_streams_the_responses_event_sequence(sim):
    events = list(client(sim["native"]).responses.create(model="n", input="hello", stream=True))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    assert "response.output_text.delta" in types
    assert events[-1].response.usage.output_tokens == 6


def test_it_refuses_previous_response_id_as_llama_cpp_does(sim):
    with pytest.raises(openai.BadRequestError):
        client(sim["native"]).responses.create(model="n", input="x", previous_response_id="resp_1")


def test_a_chat_only_simulator_has_no_responses_route(sim):
    r = httpx.post(f"http://127.0.0.1:{sim['chat']}/v1/responses", json={"model": "c", "input": "x"})
    assert r.status_code == 404


TOOLS = [{"type": "function", "name": "weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_tool_choice_answers_with_a_call(sim, stream):
    c = client(sim["native"])
    if stream:
        events = list(c.responses.create(model="n", input="weather?", tools=TOOLS, tool_choice="required", stream=True))
        r = events[-1].response
    else:
        r = c.responses.create(model="n", input="weather?", tools=TOOLS, tool_choice="required")
    (call,) = r.output
    assert call.type == "function_call" and call.name == "weather" and call.arguments == '{"city":"Paris"}'


def test_without_a_forced_choice_the_answer_is_text(sim):
    r = client(sim["native"]).responses.create(model="n", input="weather?", tools=TOOLS)
    assert r.output[0].type == "message"
