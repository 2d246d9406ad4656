"""Backend adapters, one per server kind; `adapter_for(kind)` is the only way the core gets one."""

from __future__ import annotations

from app.upstream.adapters.base import Adapter
from app.upstream.adapters.llamacpp import LlamaCppAdapter
from app.upstream.adapters.ollama import OllamaAdapter
from app.upstream.adapters.openai import OpenAIAdapter
from app.upstream.adapters.report import NO_REPORT, BackendReport, ServerLoad
from app.upstream.adapters.tgi import TgiAdapter
from app.upstream.adapters.vllm import VllmAdapter

ADAPTERS: dict[str, Adapter] = {a.kind: a for a in (OpenAIAdapter(), VllmAdapter(), TgiAdapter(), LlamaCppAdapter(),
                                                    OllamaAdapter())}


def adapter_for(kind: str) -> Adapter:
    """The adapter of a configured flavour (config validation guarantees it exists)."""
    return ADAPTERS[kind]


__all__ = ["ADAPTERS", "NO_REPORT", "Adapter", "BackendReport", "ServerLoad", "adapter_for"]
