"""/v1/responses in front of real llama.cpp: translation to its chat completions (the llamacpp flavour's default,
and a backend declared chat-only), and passthrough to its own /v1/responses where a backend lists `responses`
(stateless: it refuses previous_response_id, so chains work only because the gateway expands them). Official
clients: the openai SDK and the OpenAI Agents SDK."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    function_tool,
)

from app.admission.auth import hash_key
from tests.real.conftest import KEY
from tests.support import Process, free_port, write_yaml

MODELS = ["a", "a-chat"]  # passthrough (opted into), translated (the same llama-server, declared chat-only)


@pytest.fixture(scope="module")
def gw(llama_servers, tmp_path_factory):
    a, _ = llama_servers
    tmp = tmp_path_factory.mktemp("real-responses")
    port = free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port, "queue_timeout_s": 30},
        "auth": {"mode": "keys", "clients": [{"tenant": "t", "key_sha256": hash_key(KEY)}]},
        "backends": {
            # Its own /v1/responses, which the flavour does not use by default: listed here.
            "a": {"base_url": a.url, "model": "smol-a", "flavor": "llamacpp", "apis": ["chat", "responses"]},
            "a-chat": {"base_url": a.url, "model": "smol-a", "flavor": "llamacpp", "apis": ["chat"]},
            "a-default": {"base_url": a.url, "model": "smol-a", "flavor": "llamacpp"},
        },
        "models": {"a": {"backends": ["a"]}, "a-chat": {"backends": ["a-chat"]}, "a-default": {"backends": ["a-default"]}},
    }
    proc = Process(["serve", "--config", str(write_yaml(tmp / "gateway.yaml", config))], tmp / "gateway.log")
    proc.wait_listening(port)
    yield f"http://127.0.0.1:{port}", a
    proc.stop()


def client(gw) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw[0]}/v1", api_key=KEY, max_retries=0)


def test_llama_cpp_itself_refuses_previous_response_id(gw):
    r = httpx.post(f"{gw[1].url}/responses", json={"model": "smol-a", "input": "hi", "previous_response_id": "resp_1"})
    assert r.status_code == 400


@pytest.mark.parametrize("model", MODELS)
def test_create_json_and_stream(gw, model):
    c = client(gw)
    r = c.responses.create(model=model, input="Say hello in five words.", max_output_tokens=12, temperature=0)
    assert r.output_text and r.usage.input_tokens > 0 and 0 < r.usage.output_tokens <= 12 and r.model == model
    events = list(c.responses.create(model=model, input="Say hello in five words.", max_output_tokens=12, stream=True))
    types = [e.type for e in events]
    # Translated, an answer cut by max_output_tokens is incomplete (llama.cpp's own /v1/responses says completed).
    assert types[0] == "response.created" and types[-1] in ("response.completed", "response.incomplete")
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text and events[-1].response.output_text == text and events[-1].response.usage.output_tokens > 0
    assert events[-1].response.model == model  # the alias, also where llama.cpp names its model only at the end


def test_the_llamacpp_flavour_answers_responses_as_the_openai_sdk_reads_them(gw):
    # llama.cpp's own /v1/responses streams events without output_index, content_index or sequence_number (the
    # SDK's responses.stream() raised TypeError accumulating them), says `completed` for an answer cut by
    # max_output_tokens and gives no output_tokens_details. By default the flavour's Responses are translated
    # from its chat completions, which say all of it.
    c = client(gw)
    with c.responses.stream(model="a-default", input="Tell me a long story about a river.", max_output_tokens=4) as s:
        events = list(s)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.incomplete"
    assert {e.output_index for e in events if e.type == "response.output_text.delta"} == {0}
    r = c.responses.create(model="a-default", input="Tell me a long story about a river.", max_output_tokens=4)
    assert (r.status, r.incomplete_details.reason, r.output[-1].status) == ("incomplete", "max_output_tokens", "incomplete")
    assert r.usage.output_tokens == 4 and r.usage.output_tokens_details.reasoning_tokens == 0


def test_llama_cpp_takes_an_earlier_turns_reasoning_back_through_the_translation(gw):
    # Sent as reasoning_content on the turn's assistant message, as llama.cpp's own /v1/responses sends it.
    r = client(gw).responses.create(model="a-default", max_output_tokens=8, input=[
        {"role": "user", "content": "Hi"},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "Greet them back."}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello!"}]},
        {"role": "user", "content": "Again"}])
    assert r.output_text and r.usage.input_tokens > 0


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", [False, True])
def test_chaining_reaches_llama_cpp_with_the_earlier_turns(gw, model, stream):
    c = client(gw)

    def ask(text: str, previous: str | None = None):
        kw = {"model": model, "input": text, "max_output_tokens": 16, "temperature": 0, "previous_response_id": previous}
        if not stream:
            return c.responses.create(**kw)
        return list(c.responses.create(**kw, stream=True))[-1].response

    first = ask("My name is Ada and I live by the river Thames.")
    chained = ask("What is my name?", first.id)
    alone = ask("What is my name?")
    # llama.cpp counted the first question and its answer too.
    assert chained.usage.input_tokens > alone.usage.input_tokens + first.usage.output_tokens
    # And found the first turn still in its prompt cache: the chain reached it as the same tokens.
    assert chained.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens // 2
    assert c.responses.retrieve(chained.id).previous_response_id == first.id
    items = c.responses.input_items.list(chained.id, order="asc")
    assert [getattr(i, "role", None) for i in items.data] == ["user", "assistant", "user"]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("kind", ["responses", "chat_completions"])
def test_a_function_tool_agent_runs_to_a_final_answer(gw, model, kind):
    """SmolLM2-135M does not call tools (llama.cpp's template for it has none), so this run checks the loop
    with a tool declared end to end; the simulator tests check a tool call and its output round trip."""

    @function_tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    async def run():
        c = openai.AsyncOpenAI(base_url=f"{gw[0]}/v1", api_key=KEY, max_retries=0)
        model_cls = OpenAIResponsesModel if kind == "responses" else OpenAIChatCompletionsModel
        agent = Agent(name="forecaster", instructions="Reply with one word.", tools=[weather],
                      model=model_cls(model, c), model_settings=ModelSettings(max_tokens=64, temperature=0, include_usage=True))
        return await Runner.run(agent, "Say yes.", run_config=RunConfig(tracing_disabled=True))

    result = asyncio.run(run())
    assert isinstance(result.final_output, str) and result.final_output
    assert all(r.usage.input_tokens > 0 for r in result.raw_responses)
