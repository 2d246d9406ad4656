"""How many of routing's prompt tokens make one token as the server's tokenizer counts them.

Routing sizes a prompt before any server has seen it: a quarter of its characters (app.protocols.base).
A rate the server publishes in its own tokens (llama.cpp's prompt_tokens_total / prompt_seconds_total)
prices routing's tokens only through this ratio, which each answer's usage.prompt_tokens teaches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Each answer keeps this share of the earlier answers' weight: a workload's text changes over minutes,
# a tokenizer never, and twenty answers settle it.
KEEP = 0.95
# Beyond these, an estimate is not of the same prompt the server counted (an empty body, a tool schema
# the template expands): not learned.
BOUNDS = (0.25, 4.0)


@dataclass
class TokenRatio:
    """Routing's estimated prompt tokens per token the server counted, over recent answers: the sum of
    one over the sum of the other, so a long prompt weighs as many tokens as it has (prefill time is
    theirs); None until an answer has said."""

    estimated: float = field(default=0.0, init=False)
    reported: float = field(default=0.0, init=False)
    samples: int = field(default=0, init=False)

    def observe(self, estimated: float, reported: float) -> None:
        if estimated <= 0 or reported <= 0 or not BOUNDS[0] <= estimated / reported <= BOUNDS[1]:
            return
        self.estimated = self.estimated * KEEP + estimated
        self.reported = self.reported * KEEP + reported
        self.samples += 1

    def get(self) -> float | None:
        return self.estimated / self.reported if self.samples else None
