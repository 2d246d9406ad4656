"""Slipstream: an OpenAI-compatible, latency-aware LLM gateway."""
