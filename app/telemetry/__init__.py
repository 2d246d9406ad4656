"""Traces, metrics, timing breakdowns and backend timing signals."""
