"""The tokens a call reserves at admission: the protocol's one size estimate (app.protocols.PromptSize)."""

from __future__ import annotations

from app.protocols import ParsedRequest


def reservation(req: ParsedRequest, expected_output: int) -> int:
    """Prompt tokens (estimated) plus the output cap, or the alias's expected output, per choice."""
    return req.size.reservation(expected_output)
