"""How long an answer will be, learned per alias and per request shape: the API it came through, its
max_tokens (in powers of two) and whether it sets stop sequences. A capped chat with stop words and an
uncapped completion of the same alias answer at very different lengths; one average per backend
(the latency model's fallback) mixes them.

A request that fixes its length (ignore_eos, or min_tokens = max_tokens) needs no prediction: routing
takes max_tokens as it is (app/routing/predict.py).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

# Per answer, the weight of the newest one once a shape has a few: about the last 10 answers count.
ALPHA = 0.1
# A shape is trusted once it has this many answers; before, the alias's API-wide figure is used.
MIN_SAMPLES = 3
# Unfed, a figure counts for less and less (time constant), in favour of the wider one.
STALE_TAU_S = 600.0
# Shapes kept per gateway: clients use a handful; the bound only guards against a client that varies
# max_tokens per request.
MAX_SHAPES = 4096


@dataclass(frozen=True, slots=True)
class Shape:
    """What a request says about its answer's length."""

    api: str
    cap: int  # max_tokens rounded up to a power of two; 0 when the request sets none
    stop: bool  # the request names stop sequences


def shape_of(api: str, max_tokens: int | None, stop: object) -> Shape:
    cap = 1 << max(0, math.ceil(math.log2(max_tokens))) if max_tokens else 0
    return Shape(api, cap, bool(stop))


@dataclass(slots=True)
class _Mean:
    value: float = 0.0
    samples: int = 0
    updated: float = 0.0

    def add(self, x: float, now: float) -> None:
        w = max(ALPHA, 1.0 / (self.samples + 1))
        self.value += (x - self.value) * w
        self.samples += 1
        self.updated = now

    def weight(self, now: float) -> float:
        """How far to trust this figure now: 0 before MIN_SAMPLES, fading when unfed."""
        if self.samples < MIN_SAMPLES:
            return 0.0
        return math.exp(-max(0.0, now - self.updated) / STALE_TAU_S)


class OutputLengths:
    """Mean output tokens per (alias, shape), with the alias's per-API mean as the fallback."""

    def __init__(self) -> None:
        self._shapes: OrderedDict[tuple[str, Shape], _Mean] = OrderedDict()
        self._apis: dict[tuple[str, str], _Mean] = {}

    def predict(self, alias: str, shape: Shape, now: float) -> float | None:
        """Expected output tokens for a request of this shape, or None when nothing is known yet."""
        wide = self._apis.get((alias, shape.api))
        fine = self._shapes.get((alias, shape))
        wide_w = wide.weight(now) if wide else 0.0
        fine_w = fine.weight(now) if fine else 0.0
        if fine is not None and fine_w > 0.0:
            if wide is None or wide_w == 0.0:
                return fine.value
            return fine.value * fine_w + wide.value * (1.0 - fine_w)
        return wide.value if wide is not None and wide_w > 0.0 else None

    def observe(self, alias: str, shape: Shape, tokens: int, now: float) -> None:
        """A whole answer of `tokens` output tokens."""
        key = (alias, shape)
        fine = self._shapes.get(key)
        if fine is None:
            fine = self._shapes[key] = _Mean()
            if len(self._shapes) > MAX_SHAPES:
                self._shapes.popitem(last=False)
        else:
            self._shapes.move_to_end(key)
        fine.add(float(tokens), now)
        wide = self._apis.get((alias, shape.api))
        if wide is None:
            wide = self._apis[(alias, shape.api)] = _Mean()
        wide.add(float(tokens), now)

    def snapshot(self, now: float) -> list[dict]:
        """Per alias and shape, what is predicted now (for /admin/backends)."""
        return [{"alias": a, "api": s.api, "max_tokens_up_to": s.cap or None, "stop": s.stop,
                 "output_tokens": round(m.value, 1), "samples": m.samples}
                for (a, s), m in self._shapes.items() if m.weight(now) > 0.0]
