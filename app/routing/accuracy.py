"""How well the latency model predicted: per backend, the relative error of recent answered attempts'
predicted TTFT and end-to-end time against what the gateway measured (both from the attempt's start),
for /admin/backends and the console. Kept by the learner, read only by admin views."""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

# Recent attempts kept per backend and figure: enough for a stable median, bounded memory.
WINDOW = 256


@dataclass(slots=True)
class PredictionErrors:
    """Signed relative errors ((predicted - measured) / measured) of one backend's recent attempts."""

    ttft: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    e2e: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))

    def add(self, predicted_ttft: float, ttft: float | None, predicted_e2e: float, e2e: float) -> None:
        if ttft is not None and ttft > 0:
            self.ttft.append((predicted_ttft - ttft) / ttft)
        if e2e > 0:
            self.e2e.append((predicted_e2e - e2e) / e2e)

    def snapshot(self) -> dict:
        """Median absolute error (the accuracy figure) and median signed error (over- or under-predicting),
        as shares of the measured time, over the last `samples` attempts."""
        out: dict = {"source": "estimated vs measured"}
        for name, errors in (("ttft", self.ttft), ("e2e", self.e2e)):
            if errors:
                out[f"{name}_median_abs_error"] = round(statistics.median(abs(e) for e in errors), 4)
                out[f"{name}_median_signed_error"] = round(statistics.median(errors), 4)
            else:
                out[f"{name}_median_abs_error"] = out[f"{name}_median_signed_error"] = None
            out[f"{name}_samples"] = len(errors)
        return out
