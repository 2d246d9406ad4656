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
        slot = self.choices.setdefault(int(c.get("index", 0)), {"content": [], "tool_calls": {}, "role": None, "finish_reason": None})
        if c.get("finish_reason"):
            slot["finish_reason"] = c["finish_reason"]
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
                choices.append({"index": index, "message": message, "logprobs": None, "finish_reason": c["finish_reason"]})
            else:
                choices.append({"index": index, "text": text, "logprobs": None, "finish_reason": c["finish_reason"]})
        body = {**self.meta, "object": "chat.completion" if self.chat else "text_completion", "choices": choices}
        if self.usage is not None:
            body["usage"] = self.usage
        return body
