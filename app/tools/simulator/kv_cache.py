"""The simulated backend's prompt (KV) cache: blocks of prompt tokens kept in LRU order.

Modelled on vLLM's automatic prefix caching (llama.cpp's prompt cache behaves alike for a repeated
prefix): the prompt is cut into blocks of BLOCK_TOKENS tokens, each block's key chains the keys of the
blocks before it, and a request reuses the longest run of leading blocks still cached. Blocks enter
the cache once computed (after prefill), and the answer's blocks too, so a conversation's next turn
finds its whole history cached. Capacity is in tokens; the least recently used blocks leave first.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from app.tools.simulator.textgen import CHARS_PER_TOKEN

BLOCK_TOKENS = 16
_BLOCK_CHARS = BLOCK_TOKENS * CHARS_PER_TOKEN


def serialise(body: dict, reply: str | None = None) -> str:
    """The prompt as the simulated tokenizer sees it: a chat template over the messages (and, with
    `reply`, the answer appended as the assistant's turn), or the completion prompt."""
    messages = body.get("messages")
    if isinstance(messages, list):
        parts = []
        for m in messages:
            if not isinstance(m, dict):
                continue
            content = m.get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            parts.append(f"<|{m.get('role')}|>{content if isinstance(content, str) else ''}<|end|>")
        if reply is not None:
            parts.append(f"<|assistant|>{reply}<|end|>")
        return "".join(parts)
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        prompt = "".join(p for p in prompt if isinstance(p, str))
    text = prompt if isinstance(prompt, str) else str(prompt)
    return text + reply if reply is not None else text


def block_keys(text: str) -> list[bytes]:
    """Chained keys of the text's full blocks: equal keys mean equal text up to that block's end."""
    keys, prev = [], b""
    for start in range(0, len(text) - _BLOCK_CHARS + 1, _BLOCK_CHARS):
        prev = hashlib.blake2b(prev + text[start:start + _BLOCK_CHARS].encode(), digest_size=12).digest()
        keys.append(prev)
    return keys


class PrefixCache:
    """One backend's cached blocks, bounded by `capacity_tokens` (0: no cache)."""

    def __init__(self, capacity_tokens: int) -> None:
        self.capacity_blocks = capacity_tokens // BLOCK_TOKENS
        self._blocks: OrderedDict[bytes, None] = OrderedDict()
        self.hit_tokens = 0
        self.lookups = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def match(self, keys: list[bytes]) -> int:
        """Tokens of the longest cached leading run of `keys`; the matched blocks become most recent."""
        self.lookups += 1
        n = 0
        for key in keys:
            if key not in self._blocks:
                break
            self._blocks.move_to_end(key)
            n += 1
        self.hit_tokens += n * BLOCK_TOKENS
        return n * BLOCK_TOKENS

    def insert(self, keys: list[bytes]) -> None:
        if not self.capacity_blocks:
            return
        for key in keys:
            self._blocks[key] = None
            self._blocks.move_to_end(key)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)

    def clear(self) -> None:
        self._blocks.clear()
