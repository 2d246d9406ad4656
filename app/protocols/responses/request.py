"""The Responses request: the fields the gateway acts on, checked with a 400 naming the param; the rest verbatim."""

from __future__ import annotations

from app.errors import InvalidRequest

_ROLES = ("user", "system", "developer", "assistant")
_TEXT_PARTS = ("input_text", "output_text", "text")
_TOOL_CHOICES = ("none", "auto", "required")


def check(body: dict) -> None:
    """Validate a Responses body (model and stream are the caller's); raise InvalidRequest naming the field."""
    if "input" not in body:
        raise InvalidRequest("'input' is required", param="input")
    value = body["input"]
    if isinstance(value, str):
        pass
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_item(item, f"input[{i}]")
    else:
        raise InvalidRequest("'input' must be a string or an array of input items", param="input")
    _optional(body, "instructions", str, "a string")
    _optional(body, "previous_response_id", str, "a string")
    _optional(body, "store", bool, "a boolean")
    _optional(body, "parallel_tool_calls", bool, "a boolean")
    _optional(body, "metadata", dict, "an object")
    _optional(body, "reasoning", dict, "an object")
    _optional(body, "text", dict, "an object")
    for name in ("temperature", "top_p"):
        v = body.get(name)
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)):
            raise InvalidRequest(f"'{name}' must be a number", param=name)
    cap = body.get("max_output_tokens")
    if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
        raise InvalidRequest("'max_output_tokens' must be a positive integer", param="max_output_tokens")
    for key, v in (body.get("metadata") or {}).items():
        if not isinstance(v, str):
            raise InvalidRequest(f"metadata values must be strings ('{key}' is not)", param=f"metadata.{key}")
    if isinstance(body.get("text"), dict):
        fmt = body["text"].get("format")
        if fmt is not None and (not isinstance(fmt, dict) or not isinstance(fmt.get("type"), str)):
            raise InvalidRequest("'text.format' must be an object with a string 'type'", param="text.format")
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise InvalidRequest("'tools' must be an array", param="tools")
        for j, tool in enumerate(tools):
            if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
                raise InvalidRequest(f"tools[{j}] must be an object with a string 'type'", param=f"tools[{j}]")
            if tool["type"] == "function":
                if not isinstance(tool.get("name"), str) or not tool["name"]:
                    raise InvalidRequest(f"tools[{j}].name must be a non-empty string", param=f"tools[{j}].name")
                if tool.get("parameters") is not None and not isinstance(tool["parameters"], dict):
                    raise InvalidRequest(f"tools[{j}].parameters must be an object", param=f"tools[{j}].parameters")
    choice = body.get("tool_choice")
    if choice is not None and not (choice in _TOOL_CHOICES or isinstance(choice, dict) and isinstance(choice.get("type"), str)):
        raise InvalidRequest("'tool_choice' must be none, auto, required or an object with a 'type'", param="tool_choice")
    if body.get("truncation") not in (None, "auto", "disabled"):
        raise InvalidRequest("'truncation' must be 'auto' or 'disabled'", param="truncation")
    if body.get("background") is True:
        raise InvalidRequest("background responses are not supported by this gateway", param="background")
    if body.get("conversation") is not None:
        # The Conversations API keeps a conversation's items server-side. The gateway serves no /v1/conversations
        # and no backend behind it holds them (vLLM and llama.cpp ignore the field): passed on, the turn reached
        # the model without its history. previous_response_id chains are the gateway's own.
        raise InvalidRequest("'conversation' (the Conversations API) is not supported by this gateway: chain turns "
                             "with previous_response_id, or send the whole conversation as input", param="conversation")
    if body.get("prompt") is not None:
        # A stored prompt template lives at OpenAI; a native backend here ignores the field and answered without
        # the template's instructions.
        raise InvalidRequest("'prompt' (stored prompt templates) is not supported by this gateway: send the "
                             "template's instructions and input themselves", param="prompt")


def _optional(body: dict, name: str, kind: type, what: str) -> None:
    v = body.get(name)
    if v is not None and (not isinstance(v, kind) or (kind is not bool and isinstance(v, bool))):
        raise InvalidRequest(f"'{name}' must be {what}", param=name)


def _check_item(item: object, where: str) -> None:
    if not isinstance(item, dict):
        raise InvalidRequest(f"'{where}' must be an object", param=where)
    kind = item.get("type", "message")
    if not isinstance(kind, str):
        raise InvalidRequest(f"'{where}.type' must be a string", param=f"{where}.type")
    if kind == "message":
        if item.get("role") not in _ROLES:
            raise InvalidRequest(f"'{where}.role' must be one of {', '.join(_ROLES)}", param=f"{where}.role")
        content = item.get("content")
        if isinstance(content, str):
            return
        if not isinstance(content, list):
            raise InvalidRequest(f"'{where}.content' must be a string or an array of content parts",
                                 param=f"{where}.content")
        for j, part in enumerate(content):
            _check_part(part, f"{where}.content[{j}]")
    elif kind == "function_call":
        for name in ("call_id", "name", "arguments"):
            if not isinstance(item.get(name), str):
                raise InvalidRequest(f"'{where}.{name}' must be a string", param=f"{where}.{name}")
    elif kind == "function_call_output":
        if not isinstance(item.get("call_id"), str):
            raise InvalidRequest(f"'{where}.call_id' must be a string", param=f"{where}.call_id")
        output = item.get("output")
        if isinstance(output, list):
            for j, part in enumerate(output):
                _check_part(part, f"{where}.output[{j}]")
        elif not isinstance(output, str):
            raise InvalidRequest(f"'{where}.output' must be a string or an array of content parts",
                                 param=f"{where}.output")
    elif kind == "reasoning" and not isinstance(item.get("summary", []), list):
        raise InvalidRequest(f"'{where}.summary' must be an array", param=f"{where}.summary")


def _check_part(part: object, where: str) -> None:
    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
        raise InvalidRequest(f"'{where}' must be an object with a string 'type'", param=where)
    if part["type"] in _TEXT_PARTS and not isinstance(part.get("text"), str):
        raise InvalidRequest(f"'{where}.text' must be a string", param=f"{where}.text")
    if part["type"] == "refusal" and not isinstance(part.get("refusal"), str):
        raise InvalidRequest(f"'{where}.refusal' must be a string", param=f"{where}.refusal")


def text_chars(body: dict, items: list) -> int:
    """The characters of the prompt's text: instructions and every item's text (the size estimate's input)."""
    chars = len(body["instructions"]) if isinstance(body.get("instructions"), str) else 0
    for item in items:
        content = item.get("content", item.get("output", item.get("arguments")))
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(len(p["text"]) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return chars
