"""A chat-completions stream read as the stream of the client API it stands for (Anthropic Messages, OpenAI
Responses), for a backend that speaks chat only: the relay sees only the client API's events.

The shared part: the backend's stream as the relay knows it (its backend, headers and timing), its chat
events' data with comments and keep-alives dropped and an error event raised as the backend's error, and
closing, which closes the backend's stream. Each API's subclass turns those data into its own events.
"""

from __future__ import annotations

from collections.abc import Iterator

from app.upstream.attempt import EventStream, json_object
from app.upstream.sse import event_data


def another_call(call_id: object, known: str | None) -> bool:
    """Whether a tool-call delta at an index already seen starts another call: it names an id of its own, not the
    one of the call at that index. Gemini's OpenAI-compatible endpoint streams parallel calls without an index
    (each read as 0), one id each; read by index alone, the second call's arguments were appended to the first's."""
    return isinstance(call_id, str) and bool(call_id) and known is not None and call_id != known


class TranslatedStream:
    def __init__(self, inner: EventStream) -> None:
        self.inner = inner
        self.backend = inner.backend
        self.headers = inner.headers
        self.timing = inner.timing

    @property
    def usage_reported(self) -> bool:
        """Whether the backend reported usage for the translation to carry. An API whose events must hold numbers
        (Messages) says 0 where none came; those zeros are not counts (EventStream.usage_reported)."""
        return True

    def chat_data(self, batch: list[bytes]) -> Iterator[bytes]:
        """The data of the batch's chat events, in order."""
        for raw in batch:
            data = event_data(raw)
            if data is None:
                continue
            if data.startswith(b'{"error"'):
                json_object(data, self.backend)  # raises the backend's error, classified by its adapter
            yield data

    def close(self) -> None:
        self.inner.close()

    async def aclose(self) -> None:
        self.inner.close()
