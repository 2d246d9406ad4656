"""What-if on live traffic: the recent request log (or an uploaded workload) replayed through the
running config and through a changed one, with the existing what-if engine (app.tools.whatif), in a child
process so the replay never shares the serving event loop.

The fleet replayed against is the config's own `simulator` section when it has one (the embedded
default), else one simulated backend per real one with what the latency model has learned of it
(prefill rate, TPOT and its growth under batch, slots): the comparison is of routing policies on a
fleet like this one, not a forecast of the real backends. Both policies replay on fresh, identical
fleets; the response cache is off in both (the replayed prompts are stand-ins, so hits would say
nothing) and limits use the in-process store (nothing shared is touched).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import yaml

from app.http.console.changes import deep_merge
from app.ports import free_port
from app.record import Outcome
from app.telemetry.recent import revive
from app.telemetry.workload import Arrival
from app.telemetry.workload import parse_workload as workload_lines

if TYPE_CHECKING:
    from app.gateway import Gateway

MAX_REQUESTS = 400
MAX_SPAN_S = 60.0
JOB_TIMEOUT_S = 300.0


def workload_from_ring(entries, aliases: set[str]) -> list[Arrival]:
    """The newest proxied requests (at most MAX_REQUESTS over at most MAX_SPAN_S), as arrivals: each
    one's time, estimated prompt size, the tokens it got (else asked for), stream or not, alias."""
    records = [revive(e) for e in entries]
    chosen = [r for r in records if r.alias in aliases and r.endpoint != "embeddings" and r.outcome is not Outcome.CLIENT_ERROR]
    chosen = chosen[-MAX_REQUESTS:]
    if not chosen:
        return []
    end = chosen[-1].received
    chosen = [r for r in chosen if end - r.received <= MAX_SPAN_S]
    t0 = chosen[0].received
    out = []
    for r in chosen:
        out_tokens = r.usage.completion_tokens if r.usage and r.usage.completion_tokens else None
        if out_tokens is None and r.params and isinstance(r.params.get("max_tokens"), int):
            out_tokens = r.params["max_tokens"]
        out.append(Arrival(round(r.received - t0, 4), max(1, r.prompt_tokens_hint), max(1, out_tokens or 64), r.stream, r.alias))
    return out


def parse_workload(text: str) -> list[Arrival]:
    """An uploaded JSONL workload (the `slipstream simulate --workload` format), bounded."""
    out = workload_lines(text, max_requests=MAX_REQUESTS)
    if out and out[-1].t - out[0].t > MAX_SPAN_S:
        raise ValueError(f"the workload spans more than {MAX_SPAN_S:.0f} s")
    return out


def learned_fleet(gw: Gateway) -> dict:
    """A simulator section from what the latency models learned: one simulated backend per real one."""
    backends = {}
    for name, s in gw.router.states.items():
        m = s.model
        _, per_token = m.prefill.coefficients(time.monotonic())
        backends[name] = {
            "model": s.backend.config.model, "slots": int(m.slots or min(s.capacity, 64)),
            "network_ms": round(m.net.get(time.monotonic()) * 1000, 3),
            "prefill_tokens_per_s": round(1.0 / per_token, 1) if per_token > 0 else 8000.0,
            "tpot_ms": round(m.tpot_base.get(time.monotonic()) * 1000, 3), "tpot_growth": m.tpot_growth,
        }
    return {"seed": 1, "backends": backends}


def policy(raw: dict, fleet: dict) -> dict:
    """A replayable policy from a config mapping: its routing as written, its backends pointed at a
    fresh simulated fleet on free ports, and nothing that reaches outside the replay."""
    sims = {name: {**spec, "port": free_port()} for name, spec in fleet["backends"].items()}
    out = deep_merge(raw, {
        "server": {"host": "127.0.0.1", "port": 0},
        "auth": {"mode": "open", "clients": [], "admin_keys": [], "ops_keys": []},
        "cache": {"store": "memory", "redis_url": None, "redis_url_env": None},
        "limits": {"store": "memory", "redis_url": None, "redis_url_env": None},
        "responses": {"store": "memory", "redis_url": None, "redis_url_env": None},
        # A replay's placements are its simulated fleet's: never told to the real replicas.
        "routing": {"share_prefixes": False, "redis_url": None, "redis_url_env": None},
        "telemetry": {"metrics": False, "scrape_interval_s": 0, "tracing": {"enabled": False}},
        "simulator": {"host": "127.0.0.1", "seed": fleet.get("seed", 1), "backends": sims},
    })
    out["backends"] = {}
    for name, spec in raw.get("backends", {}).items():
        sim = sims.get(name)
        if sim is None:
            continue
        b = {k: v for k, v in spec.items() if k not in ("api_key", "api_key_env", "headers", "ca_bundle", "proxy", "proxy_env")}
        b["base_url"] = f"http://127.0.0.1:{sim['port']}/v1"
        out["backends"][name] = b
    for spec in out.get("models", {}).values():
        if isinstance(spec, dict):
            spec["cache"] = {"exact": {"enabled": False}, "semantic": {"enabled": False}}
    return out


@dataclass
class Job:
    id: str
    started: float
    requests: int
    status: str = "running"  # running | done | failed
    error: str | None = None
    result: dict | None = None
    patch: dict = field(default_factory=dict)


class WhatIfRunner:
    """At most one what-if at a time per gateway; its job is kept until the next starts."""

    def __init__(self) -> None:
        self.job: Job | None = None
        self._task: asyncio.Task | None = None

    def busy(self) -> bool:
        return self.job is not None and self.job.status == "running"

    def start(self, policies: dict[str, dict], workload: list[Arrival], patch: dict) -> Job:
        job = Job(uuid.uuid4().hex[:12], time.time(), len(workload), patch=patch)
        self.job = job
        self._task = asyncio.get_running_loop().create_task(self._run(job, policies, workload))
        return job

    async def _run(self, job: Job, policies: dict[str, dict], workload: list[Arrival]) -> None:
        with tempfile.TemporaryDirectory(prefix="slipstream-whatif-") as tmp:
            paths = []
            for name, data in policies.items():
                p = Path(tmp) / f"{name}.yaml"
                p.write_text(yaml.safe_dump(data, sort_keys=False))
                paths.append(str(p))
            wl = Path(tmp) / "workload.jsonl"
            wl.write_bytes(b"".join(orjson.dumps({"t": a.t, "prompt_tokens": a.prompt_tokens, "max_tokens": a.max_tokens,
                                                  "stream": a.stream, "model": a.model}) + b"\n" for a in workload))
            out = Path(tmp) / "result.json"
            try:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "app.tools.whatif_job", str(wl), str(out), *paths,
                    stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
                try:
                    _, err = await asyncio.wait_for(proc.communicate(), JOB_TIMEOUT_S)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
                    raise RuntimeError(f"the replay took longer than {JOB_TIMEOUT_S:.0f} s") from None
                if proc.returncode != 0:
                    lines = (err or b"").decode(errors="replace").strip().splitlines()
                    raise RuntimeError(lines[-1] if lines else f"replay exited with {proc.returncode}")
                job.result = orjson.loads(out.read_bytes())
                job.status = "done"
            except Exception as exc:  # noqa: BLE001 - the operator sees why; the gateway goes on
                job.status, job.error = "failed", str(exc)[:500]

    async def aclose(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
