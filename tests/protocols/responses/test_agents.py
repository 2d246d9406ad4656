"""The OpenAI Agents SDK through the gateway: a function-tool agent on its Responses model and on its Chat
Completions model, against a backend that speaks Responses (passthrough) and a chat-only one (translation).

The simulator calls a tool when the tool choice forces one (tool_choice "required"); the SDK then resets the
choice to auto, so the second turn answers in text: a full agent loop of tool call, tool output, final answer."""

from __future__ import annotations

import asyncio

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

MODELS = {"responses": OpenAIResponsesModel, "chat_completions": OpenAIChatCompletionsModel}


@pytest.mark.parametrize("alias", ["native", "translated"])
@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("stream", [False, True])
def test_a_function_tool_agent_calls_its_tool_then_answers(responses_gateway, alias, kind, stream):
    calls: list[str] = []

    @function_tool
    def weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return f"sunny in {city}"

    async def run():
        client = responses_gateway.async_client()
        agent = Agent(name="forecaster", instructions="Answer with the weather.", tools=[weather],
                      model=MODELS[kind](alias, client), model_settings=ModelSettings(tool_choice="required", include_usage=True))
        config = RunConfig(tracing_disabled=True)
        if not stream:
            return await Runner.run(agent, "What is the weather in Paris?", run_config=config)
        result = Runner.run_streamed(agent, "What is the weather in Paris?", run_config=config)
        async for _ in result.stream_events():
            pass
        return result

    result = asyncio.run(run())
    assert calls == ["Paris"]
    assert isinstance(result.final_output, str) and result.final_output
    # Both model calls were counted: the tool call's and the answer's.
    assert len(result.raw_responses) == 2 and all(r.usage.output_tokens > 0 for r in result.raw_responses)
