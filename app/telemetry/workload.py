"""A workload: the arrivals a policy what-if replays, and their JSONL form (one request a line):
{"t": arrival seconds, "prompt_tokens": 200, "max_tokens": 100, "stream": true, "model": "alias"}.

Here, below the HTTP front, so that the console (which builds workloads from its ring of recent
requests, or reads an uploaded one) and the what-if tool (which replays them) share one vocabulary
without the front importing the tools.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson


@dataclass(frozen=True, slots=True)
class Arrival:
    t: float
    prompt_tokens: int
    max_tokens: int
    stream: bool
    model: str | None


def parse_workload(text: str, source: str | None = None, max_requests: int | None = None) -> list[Arrival]:
    """The arrivals of a JSONL workload, in time order; ValueError names the line that is not one (as
    `source:N`, or `line N`), or says the workload has more than `max_requests`."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = orjson.loads(line)
            out.append(Arrival(float(d["t"]), int(d.get("prompt_tokens", 100)), int(d.get("max_tokens", 100)),
                               bool(d.get("stream", False)), d.get("model")))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"{f'{source}:{n}' if source else f'line {n}'}: not a workload line ({exc})") from None
        if max_requests is not None and len(out) > max_requests:
            raise ValueError(f"at most {max_requests} requests per what-if")
    return sorted(out, key=lambda a: a.t)
