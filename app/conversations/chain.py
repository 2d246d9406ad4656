"""Chain expansion: a turn with `previous_response_id` becomes one stateless call whose `input` is the whole chain.

Backends need not keep state (llama.cpp refuses previous_response_id outright), so the gateway sends what the
chain holds: the previous turn's input, its output items, then the new input. The previous turn's input and
output are replayed as they were stored, so the body of turn n+1 starts with the bytes of turn n's input:
backends' prompt caches and our prefix routing keep hitting. Nothing is ever dropped to make a chain fit: a
backend that finds it too long says context_length_exceeded (and the alias's context_fallback applies), and a
chain past the store's bound per turn is refused here.
"""

from __future__ import annotations

from app.conversations.store import StoredResponse
from app.errors import InvalidRequest
from app.protocols.responses.to_chat import as_items


class ChainTooLong(InvalidRequest):
    """The expanded chain would exceed what one stored turn may hold (responses.max_entry_bytes)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"the conversation chain is {size} bytes, over the gateway's bound of {limit} bytes per "
                         "stored response; start a new chain (nothing was cut)",
                         param="previous_response_id", code="context_length_exceeded")


def expand(previous: StoredResponse | None, new_input: str | list) -> list:
    """The input the backend is sent: the chain so far (as stored), then this turn's items."""
    items = as_items(new_input)
    if previous is None:
        return items
    return [*previous.input, *previous.output, *items]
