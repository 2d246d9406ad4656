"""OpenAI embeddings (/v1/embeddings): input in, vectors out; never streamed, never cached, no prefix."""

from __future__ import annotations

from app.errors import InvalidRequest
from app.protocols.base import CHARS_PER_TOKEN, PromptSize
from app.protocols.openai import OpenAIProtocol, is_prompt, prompt_chars


class EmbeddingsProtocol(OpenAIProtocol):
    name = "embeddings"
    value = "embeddings"
    operation = "embeddings"
    streams = False

    def check_shape(self, body: dict) -> None:
        if "input" not in body:
            raise InvalidRequest("'input' is required", param="input")
        if not is_prompt(body["input"]) or body["input"] in ("", []):
            raise InvalidRequest("'input' must be a non-empty string, an array of strings, or an array (of arrays) of "
                                 "token ids", param="input")

    def prompt_chars(self, body: dict) -> int:
        return prompt_chars(body["input"])

    def prompt_size(self, body: dict) -> PromptSize:
        # An embedding has no output to reserve or predict.
        return PromptSize(max(1, self.prompt_chars(body) // CHARS_PER_TOKEN), None, 1, generates=False)

    def answer_text(self, body: dict) -> str | None:
        return None


EMBEDDINGS = EmbeddingsProtocol()
