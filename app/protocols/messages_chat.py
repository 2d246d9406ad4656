"""Anthropic Messages over a chat-completions backend: the request translated to chat, the answer (JSON
or stream) translated back. Used only for backends whose `apis` leave out `messages`; a backend that
speaks Messages gets the request unchanged (passthrough first).

What maps (request):

| Messages                                  | Chat completions                                           |
|-------------------------------------------|------------------------------------------------------------|
| system (string or text blocks)            | a first `system` message (blocks joined by newlines)       |
| user/assistant text (string or blocks)    | the same role's content (text parts)                       |
| consecutive turns of one role             | one message, their parts joined (Anthropic combines them;  |
|                                           |   Gemma's and Mistral's templates refuse two in a row)     |
| image block (base64 or url source)        | an `image_url` part (data: URI for base64)                 |
| assistant tool_use blocks                 | the assistant message's `tool_calls` (input as JSON text)  |
| user tool_result blocks                   | `tool` messages (tool_call_id; text content), in order     |
| image blocks inside a tool_result         | a `user` message after the tool messages, each call's      |
|                                           |   images named by its id (app.protocols.tool_images)       |
| max_tokens                                | max_tokens (OpenAI: max_completion_tokens, which its       |
|                                           |   reasoning models require)                                |
| temperature, top_p, top_k                 | the same (top_k only to vLLM and llama.cpp, which take it; |
|                                           |   OpenAI refuses it, TGI and Ollama read none: named as    |
|                                           |   ignored)                                                 |
| stop_sequences                            | stop                                                       |
| tools (name, description, input_schema,   | function tools (parameters = input_schema; strict)         |
|   strict)                                 |                                                            |
| tool_choice auto / any / tool / none      | "auto" / "required" / {function: name} / "none"            |
| tool_choice.disable_parallel_tool_use     | parallel_tool_calls: false                                 |
| metadata.user_id                          | user                                                       |
| output_config.format (json_schema)        | response_format json_schema (name "output", strict)        |
| output_config.effort                      | reasoning_effort (self-hosted: xhigh / max -> high; TGI:   |
|                                           |   none, named as ignored)                                  |
| service_tier / speed fast (openai flavour)| service_tier default / auto / fast                         |
| thinking.display omitted                  | the reasoning is not relayed                               |
| stream                                    | stream, with stream_options.include_usage                  |
|                                           |   (and continuous_usage_stats for vLLM: message_start then |
|                                           |   has the prompt's count from the first chunk); none for a |
|                                           |   backend with stream_usage: false (usage then 0, unknown) |
| cache_control on any block                | dropped (a caching hint; backends cache prefixes anyway)   |
| thinking enabled / adaptive               | nothing: reasoning models (vLLM with a reasoning parser,   |
|                                           |   llama.cpp, DeepSeek) reason by default; budget_tokens    |
|                                           |   maps to no chat field (max_tokens bounds both, as here)  |
| thinking disabled                         | nothing (as without it; any reasoning is not relayed)      |
| a final assistant turn (a prefill)        | the last message; vLLM: continue_final_message (and        |
|                                           |   add_generation_prompt off); llama.cpp continues it       |
|                                           |   itself; an empty one is left out                         |
| assistant thinking / redacted_thinking    | dropped: chat backends take no reasoning back (vLLM's docs |
|   blocks                                  |   say not to send it), as Anthropic ignores earlier turns' |
|                                           |   thinking                                                 |

What maps (answer): content text -> a text block (OpenAI's `refusal` too, with stop_reason refusal);
tool_calls -> tool_use blocks (arguments parsed as JSON; a call that max_tokens cut short keeps its block,
with input {}, and stops for max_tokens); finish_reason stop / length / tool_calls / content_filter ->
stop_reason end_turn / max_tokens / tool_use / refusal (stop with a tool call: tool_use, as OpenAI ends a call
forced by a named tool_choice; stop with the stop string named, as vLLM and SGLang name it: stop_sequence and
that string); usage prompt_tokens (less cached_tokens) / cached_tokens / completion_tokens -> input_tokens /
cache_read_input_tokens / output_tokens (completion_tokens counts the reasoning tokens, as Anthropic's
output_tokens counts thinking). With thinking asked for (enabled or adaptive), the backend's reasoning
(`reasoning_content`, or `reasoning` as vLLM and OpenRouter name it) -> a thinking block before the text and
tool_use blocks, its signature "" (only Anthropic can sign; the block comes back in the history and is dropped
there, above); streamed as content_block_start (thinking), thinking_delta events, a signature_delta and
content_block_stop, in Anthropic's order. No reasoning: no thinking block. Thinking not asked for: the
reasoning is not relayed.

Accepted and named in the answer's x-slipstream-ignored-fields header (IGNORED_HEADER): every other field, each a
hint whose absence changes nothing the client relies on (see _MAPPED_FIELDS; ignored_fields lists them).

Refused with a 400 invalid_request_error naming the param, since a chat backend cannot honour it:
document and search-result blocks, blocks other than text and images inside a tool_result (images travel
after the tool messages, above), server tools (a tool with a `type` other than "custom"), `mcp_servers`,
`container`, `compaction`, and a stop_sequences list longer than 4 for OpenAI and TGI (their limit on `stop`).
Refused alike, as Anthropic refuses it (the gateway stands in for Anthropic; no backend sees the budget): thinking
enabled without an integer budget_tokens of at least 1024. Anthropic's other rule, budget_tokens < max_tokens, is not enforced: the
interleaved-thinking beta that Claude Code sends lifts it.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import TypeVar

import orjson

from app.errors import InvalidRequest, UpstreamProtocolError
from app.protocols import tool_images
from app.protocols.base import ParsedRequest
from app.protocols.chat_turns import add_turn
from app.protocols.responses.from_chat import reasoning_text
from app.protocols.translated_stream import TranslatedStream, another_call
from app.upstream.attempt import EventStream, JsonReply, json_object


def event(name: str, data: dict) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def system_text(system: object) -> str:
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n".join(b["text"] for b in system if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
                 "content_filter": "refusal"}
# What a chat backend cannot run, so that ignoring it would change the answer: MCP servers and a container (server-side
# tools and skills), and a compaction request (its answer is a summary block, not the next turn).
_REFUSED_FIELDS = ("mcp_servers", "container", "compaction")
# Top-level fields chat_body maps (or refuses, above); any other one with a value is accepted and named in
# IGNORED_HEADER: cache_control (a caching hint: backends cache prefixes themselves), context_management (edits that
# only shorten what the model reads; unapplied, it reads the conversation as sent, and earlier thinking is dropped
# over chat anyway), diagnostics (asks only for a cache-miss reason), inference_geo (where Anthropic runs inference:
# the gateway's backends run where their operator put them), fallbacks / fallback_credit_token / billing_policy
# (Anthropic's own model substitution and billing), and fields newer than this gateway.
_MAPPED_FIELDS = frozenset({"model", "messages", "max_tokens", "system", "temperature", "top_p", "top_k",
                            "stop_sequences", "stream", "metadata", "tools", "tool_choice", "thinking",
                            "output_config", "service_tier", "speed", *_REFUSED_FIELDS})
# A tool's fields a chat function carries (cache_control is named on its own, as on every block).
_TOOL_FIELDS = frozenset({"name", "description", "input_schema", "strict", "type", "cache_control"})
# The response header naming the request's fields this answer did not honour (comma-separated, as sent).
IGNORED_HEADER = "x-slipstream-ignored-fields"
_EFFORTS = ("low", "medium", "high", "xhigh", "max")
# Servers whose chat API has no reasoning effort (TGI reads no such field, and ignores fields it does not know).
_NO_EFFORT = ("tgi",)
# Servers whose chat API has no top_k: OpenAI's refuses it (400 "Unrecognized request argument supplied: top_k"), TGI's
# and Ollama's OpenAI-compatible chat read no such field. vLLM and llama.cpp take it as a sampling parameter.
_NO_TOP_K = ("openai", "tgi", "ollama")
# Servers that take at most 4 stop strings: OpenAI's chat API, and TGI by default (--max-stop-sequences). vLLM,
# llama.cpp and Ollama take any number, as Anthropic does.
_FOUR_STOPS = ("openai", "tgi")
_BLOCKS = ("text", "image", "tool_use", "tool_result")
_DROPPED_BLOCKS = ("thinking", "redacted_thinking")  # earlier turns' reasoning: chat backends take none back


def chat_body(req: ParsedRequest, backend_model: str, stream: bool, count_only: bool = False,
              flavor: str | None = None, stream_usage: bool = True) -> bytes:
    """The chat-completions body for this Messages request, or InvalidRequest for what cannot map (`flavor`: the
    backend's server kind, where a field maps only onto some; `stream_usage`: the backend takes stream_options)."""
    body = req.body
    _check_budget(body.get("thinking"))
    for name in _REFUSED_FIELDS:
        # (count_tokens accepts a compaction and ignores it, as Anthropic's does)
        if body.get(name) is not None and not (count_only and name == "compaction"):
            raise InvalidRequest(f"{name}: not supported by this model's chat-completions backends", param=name)
    out: dict = {"model": backend_model}
    messages: list[dict] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": system_text(system)})
    for i, m in enumerate(body["messages"]):
        for message in _turn(m, f"messages.{i}"):
            add_turn(messages, message)
    out["messages"] = messages
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant" and not last.get("tool_calls"):
        # A prefill: Anthropic continues the final assistant turn and answers only what follows. An empty one
        # prefills nothing. vLLM must be asked to continue it (else its template opens a fresh assistant turn
        # after it); llama.cpp continues a final assistant message by itself (--prefill-assistant, its default).
        if not last["content"]:
            messages.pop()
        elif flavor == "vllm":
            out["continue_final_message"], out["add_generation_prompt"] = True, False
    # OpenAI's chat API replaced max_tokens with max_completion_tokens, and its reasoning models refuse the old name;
    # self-hosted servers all read max_tokens.
    cap = "max_completion_tokens" if flavor == "openai" else "max_tokens"
    if count_only:
        out[cap] = 1
    else:
        out[cap] = body["max_tokens"]
        for name in ("temperature", "top_p", "top_k"):
            if body.get(name) is not None and not (name == "top_k" and flavor in _NO_TOP_K):
                out[name] = body[name]
        stops = body.get("stop_sequences")
        if stops:
            if len(stops) > 4 and flavor in _FOUR_STOPS:
                raise InvalidRequest("stop_sequences: at most 4 are supported by this model's chat-completions "
                                     "backends", param="stop_sequences")
            out["stop"] = stops
        metadata = body.get("metadata")
        if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str):
            out["user"] = metadata["user_id"]
        response_format = _output_format(body.get("output_config"))
        if response_format is not None:
            out["response_format"] = response_format
        effort = _effort(body.get("output_config"), flavor)
        if effort is not None:
            out["reasoning_effort"] = effort
        tier = _service_tier(body, flavor)
        if tier is not None:
            out["service_tier"] = tier
    tools = body.get("tools")
    if tools:
        out["tools"] = [_tool(t, j) for j, t in enumerate(tools)]
        choice = body.get("tool_choice")
        if choice is not None:
            kind = choice.get("type")
            if kind == "tool":
                if not isinstance(choice.get("name"), str):
                    raise InvalidRequest("tool_choice.name: Field required", param="tool_choice.name")
                out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
            else:
                out["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[kind]
            if choice.get("disable_parallel_tool_use") is True:
                out["parallel_tool_calls"] = False
    if stream and not count_only:
        out["stream"] = True
    if stream and not count_only and stream_usage:  # off for servers that refuse stream_options (backends.<name>)
        # vLLM's continuous usage puts the prompt's count on the first chunk already, so message_start can say
        # it (Anthropic's does); other servers report usage at the end only, and message_delta carries it.
        out["stream_options"] = {"include_usage": True, "continuous_usage_stats": True} if flavor == "vllm" \
            else {"include_usage": True}
    return orjson.dumps(out)


def thinks(body: dict) -> bool:
    """Whether this request asked for thinking (enabled or adaptive) shown: only then is a backend's reasoning
    relayed. `display: omitted` asks for the thinking's text to be left out of the answer (Anthropic keeps an empty,
    signed block for its own continuity, which a chat backend does not need)."""
    thinking = body.get("thinking")
    return (isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")
            and thinking.get("display") != "omitted")


def _effort(config: object, flavor: str | None) -> str | None:
    """`output_config.effort` as chat's `reasoning_effort`, the same knob (how much the model reasons, hence how long
    it takes). OpenAI takes Anthropic's five values as they are; self-hosted servers (vLLM, llama.cpp, Ollama) know
    low / medium / high, so xhigh and max ask for high, the most they give."""
    effort = config.get("effort") if isinstance(config, dict) else None
    if effort is None or flavor in _NO_EFFORT:
        return None
    if effort not in _EFFORTS:
        raise InvalidRequest("output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'",
                             param="output_config.effort")
    return effort if flavor == "openai" else {"xhigh": "high", "max": "high"}.get(effort, effort)


def _service_tier(body: dict, flavor: str | None) -> str | None:
    """`service_tier` and `speed` as OpenAI's `service_tier`, for the hosted OpenAI API only (self-hosted servers
    have no tiers). Anthropic's standard_only is OpenAI's default (standard capacity), its auto OpenAI's auto (the
    account's own tier); `speed: fast` is OpenAI's fast mode (`service_tier: fast`), unless standard_only forbids
    the faster, dearer capacity."""
    if flavor != "openai":
        return None
    tier = body.get("service_tier")
    if body.get("speed") == "fast" and tier != "standard_only":
        return "fast"
    return {"standard_only": "default", "auto": "auto"}.get(tier) if isinstance(tier, str) else None


def ignored_fields(body: dict, flavor: str | None) -> list[str]:
    """The request's fields a chat backend of this kind is not asked to honour (for IGNORED_HEADER): each one a hint
    whose absence changes nothing the client relies on (what would is refused instead, in chat_body)."""
    out = [name for name, value in body.items() if name not in _MAPPED_FIELDS and value is not None]
    config = body.get("output_config")
    if isinstance(config, dict):
        if config.get("effort") is not None and flavor in _NO_EFFORT:
            out.append("output_config.effort")
        out.extend(f"output_config.{k}" for k, v in config.items() if k not in ("format", "effort") and v is not None)
    if body.get("top_k") is not None and flavor in _NO_TOP_K:
        out.append("top_k")
    if flavor != "openai":
        if body.get("service_tier") is not None:
            out.append("service_tier")
        if body.get("speed") == "fast":
            out.append("speed")
    elif body.get("speed") == "fast" and body.get("service_tier") == "standard_only":
        out.append("speed")
    for tool in body.get("tools") or ():
        # A chat function has a name, description, parameters and strict only: input_examples (shown to the model),
        # defer_loading, eager_input_streaming, allowed_callers and anything newer reach no chat backend.
        for key, value in tool.items():
            if key not in _TOOL_FIELDS and value is not None and f"tools.{key}" not in out:
                out.append(f"tools.{key}")
    if "cache_control" not in out and _marks_cache(body):
        out.append("cache_control")
    return out


def _marks_cache(body: dict) -> bool:
    """Whether any block, system block or tool carries cache_control (dropped over chat, as a caching hint)."""
    for group in (body.get("system"), body.get("tools"), *(m.get("content") for m in body["messages"])):
        if isinstance(group, list) and any(isinstance(b, dict) and b.get("cache_control") is not None for b in group):
            return True
    return False


def _check_budget(thinking: object) -> None:
    """Anthropic's rule for enabled thinking: an integer budget_tokens of at least 1024. The gateway stands in for
    Anthropic here (no backend sees the budget), so a request Anthropic refuses is refused alike."""
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return
    budget = thinking.get("budget_tokens")
    if not isinstance(budget, int) or isinstance(budget, bool):
        raise InvalidRequest("thinking.enabled.budget_tokens: Field required (an integer)",
                             param="thinking.budget_tokens")
    if budget < 1024:
        raise InvalidRequest("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
                             param="thinking.budget_tokens")


def _tool(tool: dict, j: int) -> dict:
    if tool.get("type") not in (None, "custom"):
        raise InvalidRequest(f"tools.{j}.type: server tools ({tool['type']}) are not supported by this model's "
                             "chat-completions backends", param=f"tools.{j}.type")
    function: dict = {"name": tool["name"], "parameters": tool.get("input_schema") or {"type": "object"}}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    if isinstance(tool.get("strict"), bool):  # strict tool use: chat's strict function, the same promise
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def _output_format(config: object) -> dict | None:
    """Structured outputs (`output_config.format`, a JSON schema the answer must match) as chat's
    response_format, which vLLM, llama.cpp and OpenAI enforce; a format that cannot map is refused, since
    the client parses the answer by it. `output_config.effort` is a hint, with no chat equivalent."""
    fmt = config.get("format") if isinstance(config, dict) else None
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise InvalidRequest("output_config.format: only {\"type\": \"json_schema\", \"schema\": {...}} can be passed "
                             "to this model's chat-completions backends", param="output_config.format")
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"], "strict": True}}


def _turn(m: dict, where: str) -> list[dict]:
    """One Messages turn as chat messages: tool results become `tool` messages before the rest of a user
    turn; an assistant's tool_use blocks become its tool_calls."""
    role, content = m["role"], m["content"]
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    parts: list[dict] = []
    calls: list[dict] = []
    results: list[dict] = []
    images: list[tuple[str, list[dict]]] = []  # images the tool results returned, by tool_use id
    for j, block in enumerate(content):
        btype, at = block["type"], f"{where}.content.{j}"
        if btype in _DROPPED_BLOCKS and role == "assistant":
            continue
        if btype not in _BLOCKS:
            raise InvalidRequest(f"{at}.type: '{btype}' blocks are not supported by this model's chat-completions "
                                 "backends", param=f"{at}.type")
        if btype == "text":
            parts.append({"type": "text", "text": block["text"]})
        elif btype == "image":
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block["source"], at)}})
        elif btype == "tool_use":
            if role != "assistant":
                raise InvalidRequest(f"{at}: tool_use blocks belong to assistant turns", param=at)
            calls.append({"id": block["id"], "type": "function", "function": {
                "name": block["name"], "arguments": orjson.dumps(block.get("input") or {}).decode()}})
        else:  # tool_result
            if role != "user":
                raise InvalidRequest(f"{at}: tool_result blocks belong to user turns", param=at)
            inner = block.get("content")
            pictures: list[dict] = []
            if isinstance(inner, list):
                for k, b in enumerate(inner):
                    if b["type"] == "image":  # a chat `tool` message carries text only (app.protocols.tool_images)
                        url = _image_url(b["source"], f"{at}.content.{k}")
                        pictures.append({"type": "image_url", "image_url": {"url": url}})
                    elif b["type"] != "text":  # never dropped in silence
                        raise InvalidRequest(f"{at}.content.{k}.type: '{b['type']}' blocks in a tool_result are "
                                             "not supported by this model's chat-completions backends (text and "
                                             "images only)", param=f"{at}.content.{k}.type")
            text = inner if isinstance(inner, str) else "\n".join(b["text"] for b in inner or () if b["type"] == "text")
            if block.get("is_error") is True:
                text = f"Error: {text}"
            if pictures:
                images.append((block["tool_use_id"], pictures))
                text = f"{text}\n{tool_images.note(len(pictures))}" if text else tool_images.note(len(pictures))
            results.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": text})
    out = results
    if images:  # in the user message right after the tool messages, ahead of the rest of the turn
        parts = [*tool_images.parts(images), *parts]
    if calls:
        text = "".join(p["text"] for p in parts if p["type"] == "text")
        out.append({"role": "assistant", "content": text or None, "tool_calls": calls})
    elif parts:
        only_text = all(p["type"] == "text" for p in parts)
        out.append({"role": role, "content": "".join(p["text"] for p in parts) if only_text and len(parts) == 1
                    else parts})
    return out


def _image_url(source: dict, at: str) -> str:
    kind = source.get("type")
    if kind == "base64" and isinstance(source.get("data"), str) and isinstance(source.get("media_type"), str):
        return f"data:{source['media_type']};base64,{source['data']}"
    if kind == "url" and isinstance(source.get("url"), str):
        return source["url"]
    raise InvalidRequest(f"{at}.source: only base64 and url image sources are supported here", param=f"{at}.source")


# --- the answer --------------------------------------------------------------------------------------

def message_body(chat: dict, alias: str, thinking: bool = False) -> dict:
    """A chat completion as the Message it stands for; with `thinking` asked for, the backend's reasoning first,
    as a thinking block."""
    choices = chat.get("choices")
    choice: dict = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message: dict = choice["message"] if isinstance(choice.get("message"), dict) else {}
    content: list[dict] = []
    reasoning = reasoning_text(message) if thinking else None
    if reasoning is not None:
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    text = message.get("content")
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:  # OpenAI's refusal, with no content: the model's words as the text
        content.append({"type": "text", "text": refusal})
    cut = choice.get("finish_reason") == "length"
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        content.append({"type": "tool_use", "id": call.get("id") or f"toolu_{uuid.uuid4().hex[:24]}",
                        "name": fn.get("name") or "", "input": _arguments(fn.get("arguments"), cut)})
    reason = _stop_reason(choice.get("finish_reason"), any(b["type"] == "tool_use" for b in content))
    if isinstance(refusal, str) and refusal and reason == "end_turn":
        reason = "refusal"
    matched = matched_stop(choice) if reason == "end_turn" else None
    return {"id": _message_id(chat.get("id")), "type": "message", "role": "assistant", "model": alias,
            "content": content, "stop_reason": "stop_sequence" if matched else reason, "stop_sequence": matched,
            "usage": message_usage(chat.get("usage"))}


def matched_stop(choice: dict) -> str | None:
    """The stop string that ended a chat choice, where the backend names it: vLLM's `stop_reason` (a string only
    for a stop string; a token id or null otherwise), SGLang's `matched_stop`. Other backends (llama.cpp, TGI,
    OpenAI) do not say, and such an answer stays an end_turn."""
    for name in ("stop_reason", "matched_stop"):
        value = choice.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def _stop_reason(finish_reason: object, called: bool) -> str:
    """Anthropic's stop reason for a chat finish reason. An answer that ends in a tool call stops for
    tool_use even when the backend said "stop": OpenAI and vLLM end a call forced by a named tool_choice
    that way, and a client's agent loop runs the tool only on tool_use."""
    reason = _STOP_REASONS.get(str(finish_reason), "end_turn")
    return "tool_use" if called and reason == "end_turn" else reason


def count_body(chat: dict) -> dict:
    """count_tokens' answer from a chat completion's usage (the backend's own count of the prompt)."""
    usage = chat.get("usage")
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if not isinstance(tokens, int):
        raise UpstreamProtocolError("the backend's answer carries no prompt token count")
    return {"input_tokens": tokens}


def message_usage(usage: object) -> dict:
    if not isinstance(usage, dict):
        return {"input_tokens": 0, "output_tokens": 0}
    prompt = int(usage.get("prompt_tokens") or 0)
    details = usage.get("prompt_tokens_details")
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    return {"input_tokens": max(0, prompt - cached), "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached, "output_tokens": int(usage.get("completion_tokens") or 0)}


def _arguments(raw: object, cut: bool = False) -> dict:
    """A tool call's arguments as the tool_use block's input. Arguments that are not JSON because max_tokens cut
    them (`cut`) are an incomplete call, as Anthropic answers one: the block with what is known (`{}` for its
    input) and stop_reason max_tokens, on which clients retry with more tokens rather than run the tool."""
    if isinstance(raw, dict):
        return raw
    try:
        value = orjson.loads(raw) if isinstance(raw, str) and raw else {}
    except orjson.JSONDecodeError:
        if cut:
            return {}
        raise UpstreamProtocolError("the backend's tool call arguments are not JSON") from None
    return value if isinstance(value, dict) else {"value": value}


def _message_id(chat_id: object) -> str:
    return f"msg_{chat_id}" if isinstance(chat_id, str) and chat_id else f"msg_{uuid.uuid4().hex[:24]}"


_TEXT_DELTA = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,'
               b'"delta":{"type":"text_delta","text":')


class StreamTranslator:
    """Chat-completion chunks in, Messages events out, one chunk at a time (each call returns the events
    that chunk completes; nothing is held back beyond what the Messages framing needs)."""

    def __init__(self, alias: str, thinking: bool = False) -> None:
        self.alias = alias
        self.thinking = thinking  # relay the backend's reasoning as thinking blocks
        self.started = False
        self.index = -1  # the open content block's index
        self.open: str | None = None  # its kind: "thinking", "text" or "tool_use"
        self.tool_blocks: dict[int, int] = {}  # chat tool-call index -> block index
        self.tool_ids: dict[int, str] = {}  # chat tool-call index -> the id of the call there
        self.stop_reason: str | None = None
        self.stop_sequence: str | None = None
        self.refused = False  # the backend's answer came as OpenAI's `refusal`
        self.usage: dict | None = None
        self.done = False

    def feed(self, data: bytes) -> list[bytes]:
        if data == b"[DONE]":
            return self.finish()
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise UpstreamProtocolError("the backend sent a chunk that is not JSON") from None
        if not isinstance(chunk, dict):
            raise UpstreamProtocolError("the backend sent a chunk that is not a JSON object")
        out: list[bytes] = []
        if isinstance(chunk.get("usage"), dict):
            self.usage = message_usage(chunk["usage"])
        if not self.started:
            self.started = True
            # The prompt's count where the backend reported it by now (vLLM's continuous usage, on its first
            # chunk); otherwise 0, as nothing is known yet: message_delta carries the count, and the SDK's final
            # message takes it from there. Never an estimate presented as the backend's figure.
            out.append(event("message_start", {"type": "message_start", "message": {
                "id": _message_id(chunk.get("id")), "type": "message", "role": "assistant", "model": self.alias,
                "content": [], "stop_reason": None, "stop_sequence": None,
                "usage": self.usage or {"input_tokens": 0, "output_tokens": 0}}}))
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = reasoning_text(delta) if self.thinking else None
            if reasoning is not None:
                if self.open != "thinking":
                    out.extend(self._start({"type": "thinking", "thinking": "", "signature": ""}, "thinking"))
                out.append(event("content_block_delta", {"type": "content_block_delta", "index": self.index,
                                                         "delta": {"type": "thinking_delta", "thinking": reasoning}}))
            text = delta.get("content")
            if isinstance(text, str) and text:
                if self.open != "text":
                    out.extend(self._start({"type": "text", "text": ""}, "text"))
                # The most frequent event by far: written from a template, only the text serialised.
                out.append(_TEXT_DELTA % self.index + orjson.dumps(text) + b"}}\n\n")
            refusal = delta.get("refusal")
            if isinstance(refusal, str) and refusal:  # OpenAI's refusal: its words as text, the stop a refusal
                self.refused = True
                out.extend(self._text(refusal))
            for call in delta.get("tool_calls") or ():
                out.extend(self._tool_delta(call))
            reason = choice.get("finish_reason")
            if isinstance(reason, str):
                self.stop_reason = _stop_reason(reason, bool(self.tool_blocks))
                if self.refused and self.stop_reason == "end_turn":
                    self.stop_reason = "refusal"
                self.stop_sequence = matched_stop(choice) if self.stop_reason == "end_turn" else None
                if self.stop_sequence:
                    self.stop_reason = "stop_sequence"
        return out

    def _text(self, text: str) -> list[bytes]:
        out = [] if self.open == "text" else self._start({"type": "text", "text": ""}, "text")
        out.append(_TEXT_DELTA % self.index + orjson.dumps(text) + b"}}\n\n")
        return out

    def _start(self, block: dict, kind: str) -> list[bytes]:
        out = self._close()
        self.index += 1
        self.open = kind
        out.append(event("content_block_start", {"type": "content_block_start", "index": self.index,
                                                 "content_block": block}))
        return out

    def _close(self) -> list[bytes]:
        if self.open is None:
            return []
        out = []
        if self.open == "thinking":  # Anthropic ends a thinking block with its signature (none to give here)
            out.append(event("content_block_delta", {"type": "content_block_delta", "index": self.index,
                                                     "delta": {"type": "signature_delta", "signature": ""}}))
        self.open = None
        out.append(event("content_block_stop", {"type": "content_block_stop", "index": self.index}))
        return out

    def _tool_delta(self, call: dict) -> list[bytes]:
        out: list[bytes] = []
        k = call.get("index", 0)
        fn = call.get("function") or {}
        call_id = call.get("id")
        if k not in self.tool_blocks or another_call(call_id, self.tool_ids.get(k)):
            call_id = call_id or f"toolu_{uuid.uuid4().hex[:24]}"
            out.extend(self._start({"type": "tool_use", "id": call_id, "name": fn.get("name") or "", "input": {}},
                                   "tool_use"))
            self.tool_blocks[k], self.tool_ids[k] = self.index, call_id
        elif self.tool_blocks[k] != self.index:
            raise UpstreamProtocolError("the backend interleaved two tool calls' arguments")
        args = fn.get("arguments")
        if isinstance(args, str) and args:
            out.append(event("content_block_delta", {"type": "content_block_delta", "index": self.index,
                                                     "delta": {"type": "input_json_delta", "partial_json": args}}))
        return out

    def finish(self) -> list[bytes]:
        """The closing events, once the chat stream ended complete ([DONE] after a finish reason)."""
        if self.done:
            return []
        if self.stop_reason is None:
            raise UpstreamProtocolError("the backend ended the stream without a finish reason")
        self.done = True
        out = [] if self.started else self.feed(b'{"choices":[]}')
        out.extend(self._close())
        out.append(event("message_delta", {"type": "message_delta", "delta": {
            "stop_reason": self.stop_reason, "stop_sequence": self.stop_sequence},
            "usage": self.usage or {"input_tokens": 0, "output_tokens": 0}}))
        out.append(event("message_stop", {"type": "message_stop"}))
        return out


class TranslatedMessagesStream(TranslatedStream):
    """A chat-completions stream read as the Messages stream it stands for."""

    def __init__(self, inner: EventStream, alias: str, thinking: bool = False) -> None:
        super().__init__(inner)
        self.translator = StreamTranslator(alias, thinking)

    @property
    def usage_reported(self) -> bool:
        return self.translator.usage is not None

    async def batches(self) -> AsyncIterator[list[bytes]]:
        translator = self.translator
        async for batch in self.inner.batches():
            out: list[bytes] = []
            for data in self.chat_data(batch):
                out.extend(_data_only(e) for e in translator.feed(data))
                if translator.done:
                    break
            if out:
                yield out
            if translator.done:
                return
        # A backend that closed after its final chunk without [DONE]: complete if it said why it stopped.
        yield [_data_only(e) for e in translator.finish()]


def _data_only(event: bytes) -> bytes:
    """An event as its data line alone, without its blank line: the relay frames it again by its type
    (app.protocols.messages.MessagesSse), and reads a one-line event on its fast path."""
    return event[event.index(b"\n") + 1:-2]


_R = TypeVar("_R", JsonReply, EventStream, TranslatedMessagesStream)


def translated(result: JsonReply | EventStream, alias: str, count_only: bool = False,
               thinking: bool = False, ignored: list[str] | None = None) -> JsonReply | TranslatedMessagesStream:
    """A chat backend's answer as the Messages (or count_tokens) answer it stands for (`thinking`: the request
    asked for it, and the backend's reasoning is relayed; `ignored`: the request's fields named in IGNORED_HEADER)."""
    if isinstance(result, JsonReply):
        chat = result.data if result.data is not None else json_object(result.body, result.backend)
        body = count_body(chat) if count_only else message_body(chat, alias, thinking)
        reported = count_only or isinstance(chat.get("usage"), dict)  # else message_body's zeros stand in for it
        return named_ignored(replace(result, body=orjson.dumps(body), data=body, usage_reported=reported), ignored)
    return named_ignored(TranslatedMessagesStream(result, alias, thinking), ignored)


def named_ignored(result: _R, ignored: list[str] | None) -> _R:
    """The answer with the request's fields it did not honour named in IGNORED_HEADER (none: unchanged)."""
    if ignored:
        result.headers = {**result.headers, IGNORED_HEADER: ", ".join(ignored)}
    return result
