"""Dispatch: the retry/fallback loop over a model chain, one owned attempt at a time, and hedging."""
