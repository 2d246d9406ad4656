"""Ollama: native durations in nanoseconds (its /api routes); its OpenAI route reports only usage."""

from __future__ import annotations

from collections.abc import Mapping

from app.upstream.adapters.base import Adapter, usage_report
from app.upstream.adapters.report import NO_REPORT, BackendReport, integer, ns


class OllamaAdapter(Adapter):
    kind = "ollama"
    provider = "ollama"

    def report_from_body(self, obj: Mapping) -> BackendReport:
        return from_ollama(obj) or usage_report(obj)


def from_ollama(obj: Mapping) -> BackendReport:
    """Ollama's native durations; model load time counts as queueing."""
    if "eval_duration" not in obj and "prompt_eval_duration" not in obj:
        return NO_REPORT
    return BackendReport(
        queue_s=ns(obj.get("load_duration")),
        prefill_s=ns(obj.get("prompt_eval_duration")),
        decode_s=ns(obj.get("eval_duration")),
        output_tokens=integer(obj.get("eval_count")),
        # Ollama counts only the prompt tokens it evaluated: a cached prefix is left out.
        prompt_processed=integer(obj.get("prompt_eval_count")),
        server_s=ns(obj.get("total_duration")),
        source="ollama",
    )
