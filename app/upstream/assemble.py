"""Rebuild a complete response from a stream's chunks, so a finished stream can be cached."""

from __future__ import annotations

import orjson


class StreamAssembler:
    """Feed each chunk's JSON data; `result()` gives the equivalent non-streamed body."""

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.meta: dict = {}
        self.usage: dict | None = None
        self.choices: dict[int, dict] = {}
        self.broken = False

    def feed(self, data: bytes) -> None:
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            self.broken = True
            return
        if not isinstance(chunk, dict):
            self.broken = True
            return
        if not self.meta:
            self.meta = {k: chunk.get(k) for k in ("id", "created", "model", "system_fingerprint") if k in chunk}
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for c in chunk.get("choices") or ():
            self._merge(c)

    def _merge(self, c: dict) -> None:
        slot = self.choices.setdefault(int(c.get("index", 0)), {"content": [], "tool_calls": {}, "role": None, "finish_reason": None,
                                                                "logprobs": None})
        if c.get("finish_reason"):
            slot["finish_reason"] = c["finish_reason"]
        if c.get("logprobs") is not None:
            slot["logprobs"] = _merge_logprobs(slot["logprobs"], c["logprobs"])
        if not self.chat:
            slot["content"].append(c.get("text") or "")
            return
        delta = c.get("delta") or {}
        if delta.get("role"):
            slot["role"] = delta["role"]
        if delta.get("content"):
            slot["content"].append(delta["content"])
        for tc in delta.get("tool_calls") or ():
            call = slot["tool_calls"].setdefault(int(tc.get("index", 0)), {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
            if tc.get("id"):
                call["id"] = tc["id"]
            fn = tc.get("function") or {}
            call["function"]["name"] += fn.get("name") or ""
            call["function"]["arguments"] += fn.get("arguments") or ""

    def finish_reasons(self) -> list[str | None]:
        return [c["finish_reason"] for _, c in sorted(self.choices.items())]

    def result(self) -> dict:
        choices = []
        for index, c in sorted(self.choices.items()):
            text = "".join(c["content"])
            if self.chat:
                message: dict = {"role": c["role"] or "assistant", "content": text if text or not c["tool_calls"] else None}
                if c["tool_calls"]:
                    message["tool_calls"] = [v for _, v in sorted(c["tool_calls"].items())]
                choices.append({"index": index, "message": message, "logprobs": c["logprobs"], "finish_reason": c["finish_reason"]})
            else:
                choices.append({"index": index, "text": text, "logprobs": c["logprobs"], "finish_reason": c["finish_reason"]})
        body = {**self.meta, "object": "chat.completion" if self.chat else "text_completion", "choices": choices}
        if self.usage is not None:
            body["usage"] = self.usage
        return body


def _merge_logprobs(so_far: object, chunk: object) -> object:
    """A chunk's log-probabilities appended to those before it: each chunk carries its own tokens' entries,
    in lists (chat's `content` and `refusal`; the legacy completions' `tokens`, `token_logprobs`,
    `top_logprobs`, `text_offset`), so the whole answer's are the lists joined in order. The lists are
    the slot's own copies, extended in place: a long answer streamed a token a chunk stays linear."""
    if isinstance(chunk, list):
        if isinstance(so_far, list):
            so_far.extend(chunk)
            return so_far
        return list(chunk)
    if not isinstance(chunk, dict):
        return chunk
    merged = so_far if isinstance(so_far, dict) else {}
    # The legacy lists run parallel to `tokens`: a list that is null or absent in some chunks and not in
    # others is padded with nulls, one per token, so each entry stays beside its token.
    parallel = isinstance(chunk.get("tokens"), list)
    done = len(merged.get("tokens") or ()) if parallel else 0
    count = len(chunk["tokens"]) if parallel else 0
    for key, value in chunk.items():
        before = merged.get(key)
        if parallel and key != "tokens" and value is None and isinstance(before, list):
            before.extend([None] * count)
        elif isinstance(value, list) and isinstance(before, list):
            before.extend(value)
        elif isinstance(value, list):
            merged[key] = [None] * done + value if parallel and key != "tokens" else list(value)
        elif value is not None or key not in merged:
            merged[key] = value
    if parallel:
        for key, before in merged.items():
            if key not in chunk and isinstance(before, list):
                before.extend([None] * count)
    return merged
