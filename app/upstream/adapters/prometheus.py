"""Just enough of the Prometheus text format to read a server's gauges."""

from __future__ import annotations

import re

_SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+([-+\d.eEinfNa]+)")


def gauges(text: str) -> dict[str, float]:
    """Metric name -> value, summed over label sets (one server may serve several models)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _SAMPLE.match(line)
        if m:
            try:
                value = float(m.group(3))
            except ValueError:
                continue
            values[m.group(1)] = values.get(m.group(1), 0.0) + value
    return values
