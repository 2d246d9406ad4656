"""Cache keys and scopes, built from explicit fields of the canonical request.

The exact key covers everything that can change an answer: tenant, alias, endpoint and the whole
body except fields that only change how it is delivered. A semantic scope is the same minus the
texts of the conversation's user and assistant turns: the last user turn is embedded and compared,
and the earlier ones must match turn by turn by the same rules (app/cache/service.py). System
prompts, the roles and order of the turns, and every parameter stay in the scope, exactly.

The last user turn is embedded and compared as app/cache/normalise.py writes it (typos repaired,
shorthand spelt out, greetings, filler and sign-offs dropped), and stored that way, so a cached
question and a new one always go through the same rewriting. The exact key is not normalised: it is
the request as sent, byte for byte, and a hit on it is served with no verifier, so nothing that
rewrites text may decide it; every near-repeat reaches the semantic lookup, where the guard checks
the rewritten texts. Neither the key nor the scope ever loses the tenant.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

import orjson

from app.cache.normalise import normalise
from app.protocols import ParsedRequest
from app.protocols.chat import plain_text

# Delivery and bookkeeping fields: they never change the answer's content.
# previous_response_id: a chained Responses request is keyed by its expanded input (app.conversations), the id
# adds nothing to what the answer depends on. safety_identifier and prompt_cache_key are what OpenAI has `user`
# replaced by (an end user's id for abuse detection; a bucket for its prompt cache), and prompt_cache_retention
# how long that cache keeps a prefix: an application that sends one per end user, as OpenAI asks, would
# otherwise give each of them a cache of their own.
_NOT_IN_KEY = frozenset({"stream", "stream_options", "user", "metadata", "store", "service_tier", "previous_response_id",
                         "safety_identifier", "prompt_cache_key", "prompt_cache_retention"})
# Semantic matching is for plain text questions only.
_NOT_SEMANTIC = ("tools", "functions", "logprobs", "top_logprobs", "echo", "suffix")
# The fields that carry the conversation's turns (compared turn by turn, not as parameters).
_TURNS = ("messages", "prompt", "system", "input", "instructions")


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def _canonical(obj: object) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def exact_key(tenant: str, req: ParsedRequest) -> str:
    """The exact-match key: a digest of the tenant scope and the canonical request."""
    params = {k: v for k, v in req.body.items() if k not in _NOT_IN_KEY}
    params["model"] = req.alias
    return _digest(tenant.encode(), req.protocol.value.encode(), _canonical(params))


def is_deterministic(body: dict) -> bool:
    """Temperature 0 or a seed, and one choice: an answer meant to repeat."""
    n = body.get("n")
    if n not in (None, 1):
        return False
    return body.get("temperature") == 0 or body.get("seed") is not None


# Marks a stored question that carries its conversation (entries of single questions stay plain text).
_CONVERSATION = "\x00conversation:"


@dataclass(frozen=True, slots=True)
class SemanticQuery:
    scope: str  # digest of tenant, alias, endpoint, system prompts, the turns' roles and parameters
    text: str  # the last user turn, embedded and compared
    history: tuple[str, ...] = ()  # the earlier user and assistant turns' texts, in order
    # Their roles ("user" | "assistant"), not stored: the scope makes a cached conversation's the same.
    roles: tuple[str, ...] = ()

    def stored(self) -> str:
        """The question as the store keeps it beside its vector: with its history, if it has one."""
        return _CONVERSATION + orjson.dumps([self.text, self.history]).decode() if self.history else self.text


def parse_stored(stored: str) -> tuple[str, tuple[str, ...]]:
    """(last turn, earlier turns) of a stored question."""
    if stored.startswith(_CONVERSATION):
        text, history = orjson.loads(stored[len(_CONVERSATION):])
        return text, tuple(history)
    return stored, ()


def semantic_query(tenant: str, req: ParsedRequest) -> SemanticQuery | None:
    """The query to embed and its exact-match scope, or None when the request is not eligible."""
    body = req.body
    if not is_deterministic(body) or any(body.get(k) for k in _NOT_SEMANTIC):
        return None
    turns = req.protocol.cache_turns(body)
    if turns is None or not turns[0].strip():
        return None
    text, messages = turns
    earlier, roles, history = _conversation(messages)
    params = {k: v for k, v in body.items() if k not in _NOT_IN_KEY and k not in _TURNS}
    params["model"] = req.alias
    parts = [tenant.encode(), req.protocol.value.encode(), _canonical(earlier), _canonical(params)]
    layouts = [_layout(t) for t in (text, *history)]
    if any(layouts):
        parts.append(_canonical(layouts))
    return SemanticQuery(_digest(*parts), normalise(text), history, roles)


def _layout(text: str) -> list[str]:
    """Each non-blank line's indentation beyond what all of them share, when the lines are not all level (code:
    "for ...:\n    print(i)\n    print('done')" and the same with the last line not indented are two programs);
    [] for one line, or lines all level (spaces around a one-line question are markup, not structure).

    The compared texts are normalised, which folds whitespace, and the embeddings read no indentation, so two
    such texts would be the same question at similarity 1.0: the layout is kept in the scope instead, exactly."""
    indents = [line[:len(line) - len(line.lstrip())] for line in text.splitlines() if line.strip()]
    shared = os.path.commonprefix(indents)
    relative = [indent[len(shared):] for indent in indents]
    return relative if any(relative) else []


# Message fields that say nothing when empty: SDKs send a reply back as they got it, with
# "refusal": null, "tool_calls": [], "annotations": [] and the like.
def _empty(value: object) -> bool:
    return value is None or (isinstance(value, str | list | dict) and not value)


def _conversation(earlier: list) -> tuple[list, tuple[str, ...], tuple[str, ...]]:
    """(what of the earlier turns stays exact in the scope, the roles and texts of the turns compared
    by meaning).

    Plain user and assistant turns are compared by meaning (app/cache/history.py): the scope keeps
    only their role, so the order of turns must be the same. System prompts, and any turn with more
    than a role and plain text (a name, tool calls, a tool result), stay in the scope word for word.
    Empty fields are dropped first, and text given as a list of text parts is the same text as a string.
    """
    exact: list = []
    roles: list[str] = []
    texts: list[str] = []
    for m in earlier:
        if not isinstance(m, dict):
            exact.append(m)
            continue
        m = {k: v for k, v in m.items() if k in ("role", "content") or not _empty(v)}
        text = plain_text(m.get("content"))
        if text is not None and m.get("role") in ("user", "assistant") and set(m) <= {"role", "content"}:
            exact.append(m["role"])
            roles.append(m["role"])
            texts.append(text)
        else:
            exact.append({**m, "content": text} if text is not None else m)
    return exact, tuple(roles), tuple(texts)
