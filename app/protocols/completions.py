"""OpenAI text completions (/v1/completions): a prompt in, text out."""

from __future__ import annotations

import orjson

from app.errors import InvalidRequest
from app.protocols.openai import OpenAIProtocol, is_prompt, prompt_chars
from app.upstream.assemble import CHUNK_FIELDS, StreamAssembler


class CompletionsProtocol(OpenAIProtocol):
    name = "completions"
    value = "completions"
    operation = "text_completion"
    assembles = True

    def check_shape(self, body: dict) -> None:
        if "prompt" not in body:
            raise InvalidRequest("'prompt' is required", param="prompt")
        if not is_prompt(body["prompt"]):
            raise InvalidRequest("'prompt' must be a string, an array of strings, or an array (of arrays) of token ids",
                                 param="prompt")
        if "messages" in body:
            raise InvalidRequest("'messages' is not a parameter of /v1/completions (use 'prompt')", param="messages")

    def prompt_chars(self, body: dict) -> int:
        return prompt_chars(body["prompt"])

    def prefix_text(self, body: dict) -> str:
        prompt = body["prompt"]
        if isinstance(prompt, list):
            return "".join(p if isinstance(p, str) else orjson.dumps(p).decode() for p in prompt)
        return prompt

    def cache_turns(self, body: dict) -> tuple[str, list] | None:
        prompt = body["prompt"]
        return (prompt, []) if isinstance(prompt, str) else None

    def user_texts(self, body: dict) -> list[str]:
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            return [prompt]
        # A prompt list's strings (token lists are not text).
        return [p for p in prompt if isinstance(p, str)] if isinstance(prompt, list) else []

    def replay(self, body: dict, include_usage: bool) -> list[bytes]:
        base = {k: body[k] for k in CHUNK_FIELDS if k in body}
        base["object"] = "text_completion"
        events = []

        def emit(choices: list, **extra) -> None:
            events.append(b"data: " + orjson.dumps({**base, "choices": choices, **extra}) + b"\n\n")

        for choice in body.get("choices", []):
            i = choice.get("index", 0)
            emit([{"index": i, "text": choice.get("text", ""), "logprobs": choice.get("logprobs"), "finish_reason": None}])
            # The choice's own fields (vLLM's `stop_reason`) come with its finish reason, as on its last chunk.
            extra = {k: v for k, v in choice.items() if k not in ("index", "text", "logprobs", "finish_reason")}
            emit([{"index": i, "text": "", "logprobs": None, "finish_reason": choice.get("finish_reason"), **extra}])
        if include_usage and isinstance(body.get("usage"), dict):
            emit([], usage=body["usage"])
        events.append(b"data: [DONE]\n\n")
        return events

    def assembler(self) -> StreamAssembler:
        return StreamAssembler(chat=False)

    def answer_text(self, body: dict) -> str | None:
        choices = body.get("choices")
        first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        text = first.get("text")
        return text if isinstance(text, str) else None


COMPLETIONS = CompletionsProtocol()
