"""Client protocols: one module per client API, each owning what that API decides.

The core reads a client API only through `ClientProtocol` (app/protocols/base.py), as it reads server
kinds only through app/upstream/adapters. `PROTOCOLS` maps each served path to its protocol; a parsed
request carries its protocol (`req.protocol`), so no stage branches on the API.

The interface, by the stage that asks:

- HTTP front and auth: `parse(raw) -> ParsedRequest` (alias, stream flag, body, size; a bad body raises
  an InvalidRequest naming the param), `credentials(headers)` (the key, from this API's auth headers),
  `pass_headers(headers)` (client headers a native backend must see), `error_body(err)`,
  `error_status(err)` and `error_headers(err)` (an error in the API's own shape, status and retry hints).
- Admission, routing, prediction: `req.size`, one `PromptSize` estimate from `prompt_size(body)`
  (prompt tokens from its characters, the output cap, choices). Nothing else estimates a prompt.
  `ratelimit_headers(figures)` names the limits as the API's clients read them.
- Routing: `prefix_text(body)` (the prompt as one canonical text for prefix affinity; None: none).
- Cache: `cache_turns(body)` (the last user turn's text and the earlier turns, or None: not eligible for
  the semantic cache), `user_texts(body)` (every user turn's text, for the question's category),
  `replay(body, include_usage)` (a stored answer as the API's stream events),
  `served_again(body, suffix, semantic)` (a stored answer made honest: fresh ids, usage), `assembler()`
  (a stream rebuilt into its JSON answer, to store it).
- Dispatch: `upstream(req, backend, streamed) -> Upstream` (path, body, headers, and an `adapt` that
  turns the backend's answer into this API's: passthrough to a backend whose `apis` include this API,
  translation otherwise), `assembles` (whether a JSON client may be served from an upstream stream).
- Relay: `relay` ("openai": data-only chunks and [DONE]; "events": named events relayed whole),
  `classify(data) -> EventKind` (content, usage, finish, error, end: the first CONTENT is the TTFT),
  `usage(obj)` and `stream_usage(data, so_far)` (token counts in the gateway's terms), `stop_reason(data)`,
  `error_event(err, after)` (how a stream that fails midway ends, after the last events sent), `stream_over(tail)`.
- Telemetry: `operation` (gen_ai.operation.name), `answer_text(body)` (content capture).

Adding an API: subclass ClientProtocol (or OpenAIProtocol), override what it decides, register it
below and give it a route in app/http/fastpath.py.
"""

from __future__ import annotations

from app.protocols.base import ClientProtocol, EventKind, LimitFigure, ParsedRequest, PromptSize
from app.protocols.chat import CHAT
from app.protocols.completions import COMPLETIONS
from app.protocols.embeddings import EMBEDDINGS
from app.protocols.messages import COUNT_TOKENS, MESSAGES
from app.protocols.responses.protocol import RESPONSES

# Served paths -> their protocol.
PROTOCOLS: dict[str, ClientProtocol] = {
    "/v1/chat/completions": CHAT,
    "/v1/completions": COMPLETIONS,
    "/v1/embeddings": EMBEDDINGS,
    "/v1/messages": MESSAGES,
    "/v1/messages/count_tokens": COUNT_TOKENS,
    "/v1/responses": RESPONSES,
}
# gen_ai.operation.name by the record's endpoint (the protocol's path).
OPERATIONS = {p.value: p.operation for p in PROTOCOLS.values()}

__all__ = ["CHAT", "COMPLETIONS", "COUNT_TOKENS", "EMBEDDINGS", "MESSAGES", "OPERATIONS", "PROTOCOLS", "RESPONSES", "ClientProtocol", "EventKind",
           "LimitFigure", "ParsedRequest", "PromptSize"]
