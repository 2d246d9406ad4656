"""Latency baseline: measure a backend (or the gateway) as the flat-latency method prescribes."""
