"""OpenAI and other hosted OpenAI-compatible APIs: usage with cached tokens, openai-processing-ms."""

from __future__ import annotations

from collections.abc import Mapping

from app.upstream.adapters.base import Adapter, processing_header
from app.upstream.adapters.report import BackendReport


class OpenAIAdapter(Adapter):
    kind = "openai"
    provider = "openai"

    def report_from_headers(self, headers: Mapping[str, str]) -> BackendReport:
        # The server's processing time: what the gateway measured beyond it is network.
        return processing_header(headers, "openai-processing-ms", "openai")
