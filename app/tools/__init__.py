"""Offline tools: the backend simulator, the baseline sweep, the what-if replay and their charts."""
