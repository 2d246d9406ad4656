"""Exact and semantic response caches."""
