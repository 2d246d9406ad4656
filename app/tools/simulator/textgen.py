"""Deterministic fake text: token counts and generated tokens as pure functions of their inputs."""

from __future__ import annotations

import hashlib
import math
import random

_VOCAB = ["the", "model", "answers", "with", "tokens", "that", "arrive", "one", "by", "one", "while", "the", "batch", "runs", "on", "a", "busy", "GPU", "and", "latency", "stays", "flat", "because", "decode", "time", "grows", "with", "output", "length", "not", "with", "hardware", "so", "a", "gateway", "routes", "caches", "streams", "and", "measures", "every", "stage", "from", "queue", "to", "prefill", "to", "decode"]


# About four characters a token, as BPE tokenizers average on English.
CHARS_PER_TOKEN = 4


def count_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def prompt_text(body: dict) -> str:
    """The text a chat or completion request conditions on, flattened."""
    if isinstance(body.get("messages"), list):
        parts = []
        for m in body["messages"]:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):  # content parts: keep the text ones
                parts.extend(p.get("text", "") for p in content if isinstance(p, dict))
        return "\n".join(parts)
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        return "\n".join(p for p in prompt if isinstance(p, str))
    return prompt if isinstance(prompt, str) else str(prompt)


def prompt_tokens(body: dict) -> int:
    """Prompt tokens of a request, with the few tokens of chat framing each message adds."""
    messages = body.get("messages")
    framing = 3 * len(messages) if isinstance(messages, list) else 0
    return count_tokens(prompt_text(body)) + framing


def request_rng(seed: int, body: dict, choice: int = 0) -> random.Random:
    """A generator fixed by the simulator's seed, the prompt, the request's own seed and the choice index."""
    digest = hashlib.sha256(prompt_text(body).encode()).hexdigest()[:16]
    return random.Random(f"{seed}:{digest}:{body.get('seed')}:{choice}")


def generate_tokens(rng: random.Random, n: int) -> list[str]:
    """n tokens of text, each a word with its leading space (the first without)."""
    words = [rng.choice(_VOCAB) for _ in range(n)]
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


def embedding(text: str, dim: int) -> list[float]:
    """A unit vector fixed by the text: equal texts embed equally, different ones differ."""
    rng = random.Random(hashlib.sha256(text.encode()).digest())
    v = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / norm for x in v]
