"""The W3C Server-Timing header: each stage's duration in ms, with its source as the description."""

from __future__ import annotations

from app.telemetry.stages import Stage


def server_timing(stages: list[Stage], cache_s: float | None, gateway_s: float | None, extra: dict[str, float] | None = None) -> str:
    """`cache;dur=0.1;desc="measured", network;dur=1.2;desc="measured", ..., gateway;dur=0.3;desc="measured"`."""
    parts = []
    if cache_s is not None:
        parts.append(f'cache;dur={cache_s * 1000:.2f};desc="measured"')
    for s in stages:
        parts.append(f'{s.name};dur={s.duration * 1000:.2f};desc="{s.source}"')
    for name, seconds in (extra or {}).items():
        parts.append(f'{name};dur={seconds * 1000:.2f};desc="measured"')
    if gateway_s is not None:
        parts.append(f'gateway;dur={gateway_s * 1000:.2f};desc="measured"')
    return ", ".join(parts)


def timing_summary(stages: list[Stage], cache_s: float | None, gateway_s: float | None,
                   extra: dict[str, float] | None = None) -> dict:
    """The same figures as a JSON object, for the opt-in final usage extension of a stream."""
    out: dict = {s.name: {"ms": round(s.duration * 1000, 3), "source": s.source} for s in stages}
    if cache_s is not None:
        out["cache"] = {"ms": round(cache_s * 1000, 3), "source": "measured"}
    for name, seconds in (extra or {}).items():
        out[name] = {"ms": round(seconds * 1000, 3), "source": "measured"}
    if gateway_s is not None:
        out["gateway"] = {"ms": round(gateway_s * 1000, 3), "source": "measured"}
    return out
