"""The benches' --port-base: a run's servers listen in the range it was given, so runs side by side on one
box (each helper given its own range) never take each other's ports."""

from __future__ import annotations

import argparse

import httpx

from app import ports
from bench.harness import Fleet, apply_port_options, port_options, start_gateway


def test_a_bench_given_a_port_base_starts_its_fleet_and_gateway_there(tmp_path):
    base = next(p for p in iter(ports.free_port, None) if all(ports._bindable(p + k) for k in range(10)))
    ap = argparse.ArgumentParser()
    port_options(ap)
    assert ap.parse_args([]).port_base is None  # by default: random free ports
    try:
        apply_port_options(ap.parse_args(["--port-base", str(base), "--port-span", "10"]))
        fleet = Fleet.zero_latency(tmp_path)
        try:
            gateway = start_gateway(tmp_path, fleet)
            try:
                assert fleet.backends["zero"]["port"] == base
                assert gateway.url == f"http://127.0.0.1:{base + 1}"
                r = httpx.post(f"{gateway.url}/v1/chat/completions", timeout=30,
                               json={"model": "zero", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
                assert r.status_code == 200
            finally:
                gateway.stop()
        finally:
            fleet.stop()
    finally:
        ports.use_ports(None)
