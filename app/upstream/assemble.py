"""Rebuild a complete response from a stream's chunks, so a finished stream can be cached."""

from __future__ import annotations

import orjson

# A delta's fields the assembler joins itself; any other text field of a delta (llama.cpp's and older vLLM's
# `reasoning_content`, newer vLLM's `reasoning`, OpenAI's `refusal`) is a text told in pieces too, and is
# joined the same way into the message's field of that name, as the backend's non-streamed answer has it.
DELTA_OWN = frozenset({"role", "content", "tool_calls"})
# A choice's fields the assembler sets itself; any other (vLLM's `stop_reason`, SGLang's `matched_stop`) is
# the choice's as its last chunk that names it says it (a list: the chunks' lists joined).
_CHOICE_OWN = frozenset({"index", "delta", "text", "logprobs", "finish_reason"})
# The answer's own fields, told on every chunk (the first one's are kept; a replayed stream tells them alike).
CHUNK_FIELDS = ("id", "created", "model", "system_fingerprint", "service_tier")


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
        if chunk is None:
            return  # an event with nothing in it: llama.cpp opens the stream of a prompt list with `data: null`
        if not isinstance(chunk, dict):
            self.broken = True
            return
        if not self.meta:
            self.meta = {k: chunk.get(k) for k in CHUNK_FIELDS if k in chunk}
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for c in chunk.get("choices") or ():
            self._merge(c)

    def _merge(self, c: dict) -> None:
        index = int(c.get("index", 0))
        slot = self.choices.get(index)
        if slot is None:
            slot = self.choices[index] = {"content": [], "tool_calls": {}, "role": None, "finish_reason": None,
                                          "logprobs": None, "texts": {}, "extra": {}}
        if not _CHOICE_OWN.issuperset(c):  # a field beyond OpenAI's own (vLLM's stop_reason)
            _merge_extra(slot["extra"], c)
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
        if len(delta) > 1 or "content" not in delta:  # most chunks carry content alone
            for key, value in delta.items():
                if key not in DELTA_OWN and isinstance(value, str):
                    slot["texts"].setdefault(key, []).append(value)
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
                message: dict = {"role": c["role"] or "assistant",
                                 "content": text if text or not (c["tool_calls"] or c["texts"].get("refusal")) else None}
                message.update((key, "".join(parts)) for key, parts in c["texts"].items())
                if c["tool_calls"]:
                    message["tool_calls"] = [v for _, v in sorted(c["tool_calls"].items())]
                choices.append({"index": index, "message": message, "logprobs": c["logprobs"], "finish_reason": c["finish_reason"],
                                **c["extra"]})
            else:
                choices.append({"index": index, "text": text, "logprobs": c["logprobs"], "finish_reason": c["finish_reason"],
                                **c["extra"]})
        body = {**self.meta, "object": "chat.completion" if self.chat else "text_completion", "choices": choices}
        if self.usage is not None:
            body["usage"] = self.usage
        return body


def _merge_extra(extra: dict, choice: dict) -> None:
    """A choice's fields beyond the assembler's own, as its chunks tell them: the last value given (a null
    after a value is no news), a list joined across chunks in the slot's own copy (vLLM's `token_ids`)."""
    for key, value in choice.items():
        if key in _CHOICE_OWN:
            continue
        before = extra.get(key)
        if isinstance(value, list):
            if isinstance(before, list):
                before.extend(value)
            else:
                extra[key] = list(value)
        elif value is not None or key not in extra:
            extra[key] = value


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
