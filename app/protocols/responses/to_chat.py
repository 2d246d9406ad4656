"""A Responses request as a chat completions request, for backends that do not speak Responses natively.

What maps and what is refused is the README's table "Responses over a chat-only backend"; a field with no chat
equivalent that changes the answer is refused with a 400 naming it, never dropped in silence. Fields that only
concern the gateway (store, previous_response_id, metadata) never reach the backend on either path.
"""

from __future__ import annotations

from typing import Any

from app.errors import InvalidRequest
from app.protocols import tool_images
from app.protocols.chat_turns import add_turn

# Passed on unchanged: the same name and meaning in both APIs.
_SAME = ("temperature", "top_p", "parallel_tool_calls", "user", "seed", "stop")
# The gateway's own, or a transport matter: not part of the chat body. max_tool_calls caps calls to OpenAI's
# built-in (hosted) tools only; those are refused here (_tool), so over chat it has nothing to cap.
_GATEWAY = ("model", "input", "instructions", "stream", "store", "previous_response_id", "metadata", "include",
            "truncation", "stream_options", "service_tier", "prompt_cache_key", "safety_identifier",
            "prompt_cache_retention", "prompt_cache_options", "max_tool_calls")
# Answer-changing features a chat completions backend has no way to honour.
_REFUSED = {
    "background": "background responses",
    "conversation": "the Conversations API",
    "prompt": "stored prompt templates",
}


def as_items(value: str | list) -> list:
    """A request's `input` as a list of items: a string is one user message (OpenAI's own reading)."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return value


def to_chat(body: dict, items: list, reasoning_back: bool = False) -> dict:
    """The chat body for `body` (a validated Responses request) whose input, chain expanded, is `items`.
    `reasoning_back`: earlier turns' reasoning items go as their turn's `reasoning_content` (a server that reads
    it: llama.cpp); otherwise they are left out."""
    out: dict = {"model": body["model"]}
    messages: list[dict] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str):
        messages.append({"role": "system", "content": instructions})
    images: list[tuple[str, list[dict]]] = []  # the images of the run of tool outputs now being added
    # Items that leave the run of tool messages open: the outputs, and reasoning items where they are left out.
    within_run = ("function_call_output",) if reasoning_back else ("function_call_output", "reasoning")
    for i, item in enumerate(items):
        if images and item.get("type", "message") not in within_run:
            messages.append({"role": "user", "content": tool_images.parts(images)})
            images = []
        _add_item(messages, item, f"input[{i}]", images, reasoning_back)
    if images:
        messages.append({"role": "user", "content": tool_images.parts(images)})
    out["messages"] = messages
    for key, value in body.items():
        if key in _SAME:
            out[key] = value
        elif key in _GATEWAY:
            continue
        elif key == "max_output_tokens":
            if value is not None:
                out["max_tokens"] = value
        elif key == "tools":
            if value:
                out["tools"] = [_tool(t, f"tools[{j}]") for j, t in enumerate(value)]
        elif key == "tool_choice":
            if value is not None and not _allowed_tools(value):
                out["tool_choice"] = _tool_choice(value)
        elif key == "text":
            fmt = _response_format(value)
            if fmt is not None:
                out["response_format"] = fmt
            if isinstance(value, dict) and value.get("verbosity") is not None:
                out["verbosity"] = value["verbosity"]  # chat's own top-level name for it (OpenAI's chat API)
        elif key == "reasoning":
            effort = value.get("effort") if isinstance(value, dict) else None
            if effort is not None:
                out["reasoning_effort"] = effort  # summary: no chat equivalent, and it only adds to the answer
        elif key == "top_logprobs":
            if value:
                out["logprobs"], out["top_logprobs"] = True, value
        elif key in _REFUSED:
            if value not in (None, False):
                raise InvalidRequest(f"'{key}' ({_REFUSED[key]}) is not available on this model: its backends "
                                     "speak chat completions only", param=key)
        else:
            raise InvalidRequest(f"'{key}' is not a Responses parameter this gateway can pass to a chat completions "
                                 "backend", param=key)
    if _allowed_tools(body.get("tool_choice")):
        _only_allowed(out, body["tool_choice"])
    include = body.get("include")
    if isinstance(include, list) and "message.output_text.logprobs" in include:
        out["logprobs"] = True  # the sampled tokens' own, with or without top_logprobs
    if body.get("stream") is True:
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out


def _add_item(messages: list[dict], item: dict, where: str, images: list[tuple[str, list[dict]]],
              reasoning_back: bool) -> None:
    kind = item.get("type", "message")
    if kind == "message":
        role = item["role"]
        content: Any = item.get("content")  # a string or a list of parts, checked by request.py
        if role == "assistant":
            text = content if isinstance(content, str) else "".join(_assistant_text(content, where))
            prev = messages[-1] if messages else None
            # The turn's assistant message begun by its reasoning or its calls: the text joins it.
            if prev is not None and prev["role"] == "assistant" and prev.get("content") is None:
                prev["content"] = text
            else:
                messages.append({"role": "assistant", "content": text})
            return
        if role == "developer" and all(m["role"] == "system" for m in messages):
            # Before any turn, a developer message is what a system message is: one with the instructions (a
            # second system message is refused by strict templates; chat_turns says which).
            role = "system"
        add_turn(messages, {"role": role, "content": content if isinstance(content, str) else
                            [_input_part(p, f"{where}.content[{j}]") for j, p in enumerate(content)]})
    elif kind == "function_call":
        call = {"id": item["call_id"], "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]}}
        prev = messages[-1] if messages else None
        # Parallel calls of one turn are one assistant message with several tool_calls in chat.
        if prev is not None and prev["role"] == "assistant":
            prev.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        output = item["output"]
        if not isinstance(output, str):
            output = [_input_part(p, f"{where}.output[{j}]") for j, p in enumerate(output)]
            pictures = [p for p in output if p["type"] != "text"]
            if pictures:  # a tool message carries text only: the images follow the run of tool messages
                images.append((item["call_id"], pictures))
                output = [*(p for p in output if p["type"] == "text"),
                          {"type": "text", "text": tool_images.note(len(pictures))}]
        messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": output})
    elif kind == "reasoning":
        # A reasoning item of an earlier turn. llama.cpp's chat reads it back as the turn's reasoning_content (its
        # own /v1/responses sends it so, and thinking models continue a tool loop from it); other chat backends
        # take none (vLLM's docs say not to send it, OpenAI's chat has no such field): left out there, its effect
        # being in the answer that followed it (the README's table says so).
        thought = _reasoning_of(item) if reasoning_back else None
        if thought is None:
            return
        prev = messages[-1] if messages else None
        if prev is not None and prev["role"] == "assistant" and "reasoning_content" not in prev:
            prev["reasoning_content"] = thought
        else:  # it comes before its turn's message and calls, which join this one
            messages.append({"role": "assistant", "content": None, "reasoning_content": thought})
    else:
        raise InvalidRequest(f"input item type '{kind}' has no chat completions equivalent (this model's backends "
                             "speak chat completions only)", param=f"{where}.type")


def _reasoning_of(item: dict) -> str | None:
    """A reasoning item's own text (`content`'s reasoning_text parts, as the gateway and llama.cpp write them); None
    for one that carries only a summary or encrypted content (OpenAI's), which is not the reasoning itself."""
    parts = item.get("content")
    texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)] if isinstance(parts, list) else []
    return "".join(texts) or None


def _assistant_text(content: list, where: str):
    for j, part in enumerate(content or ()):
        kind = part.get("type")
        if kind in ("output_text", "input_text", "text"):
            yield part["text"]
        elif kind == "refusal":
            yield part.get("refusal") or ""
        else:
            raise InvalidRequest(f"assistant content type '{kind}' has no chat completions equivalent",
                                 param=f"{where}.content[{j}].type")


def _input_part(part: dict, where: str) -> dict:
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        return {"type": "text", "text": part["text"]}
    if kind == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str):
            raise InvalidRequest("an input_image needs 'image_url' here (file_id needs the Files API, which this "
                                 "gateway does not serve)", param=f"{where}.image_url")
        image = {"url": url}
        if isinstance(part.get("detail"), str):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    raise InvalidRequest(f"content type '{kind}' has no chat completions equivalent", param=f"{where}.type")


def _tool(tool: dict, where: str) -> dict:
    if tool.get("type") != "function":
        raise InvalidRequest(f"tool type '{tool.get('type')}' is a hosted tool; only function tools can be passed to "
                             "a chat completions backend", param=f"{where}.type")
    fn = {"name": tool["name"]}
    for key in ("description", "parameters", "strict"):
        if tool.get(key) is not None:
            fn[key] = tool[key]
    return {"type": "function", "function": fn}


def _tool_choice(choice: str | dict) -> str | dict:
    if isinstance(choice, str):
        return choice
    if choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise InvalidRequest(f"tool_choice type '{choice.get('type')}' has no chat completions equivalent",
                         param="tool_choice")


def _allowed_tools(choice: object) -> bool:
    return isinstance(choice, dict) and choice.get("type") == "allowed_tools"


def _only_allowed(out: dict, choice: dict) -> None:
    """tool_choice allowed_tools: the model may call only the tools it names (`mode` auto or required), while the
    request keeps its whole tool list (OpenAI's way to keep the prompt cache). Chat backends take no such choice
    (llama.cpp and vLLM know none), so they are sent the allowed tools alone, with the mode as the tool choice."""
    mode = choice.get("mode")
    if mode not in ("auto", "required"):
        raise InvalidRequest("tool_choice.mode must be 'auto' or 'required'", param="tool_choice.mode")
    allowed = choice.get("tools")
    if not isinstance(allowed, list):
        raise InvalidRequest("tool_choice.tools must be an array of tools", param="tool_choice.tools")
    names = set()
    for j, tool in enumerate(allowed):
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("name"), str):
            raise InvalidRequest("tool_choice.tools may name function tools only here (hosted tools cannot be passed "
                                 "to a chat completions backend)", param=f"tool_choice.tools[{j}]")
        names.add(tool["name"])
    tools = [t for t in out.get("tools") or () if t["function"]["name"] in names]
    missing = names - {t["function"]["name"] for t in tools}
    if missing:
        raise InvalidRequest(f"tool_choice.tools names '{min(missing)}', which is not one of the request's tools",
                             param="tool_choice.tools")
    if tools:
        out["tools"], out["tool_choice"] = tools, mode
    elif mode == "required":
        raise InvalidRequest("tool_choice 'required' with no allowed tools", param="tool_choice.tools")
    else:
        out.pop("tools", None)  # no tool allowed: the model answers in text


def _response_format(text: dict) -> dict | None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if fmt is None or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    raise InvalidRequest(f"text.format type '{fmt.get('type')}' is not one of text, json_object, json_schema",
                         param="text.format.type")
