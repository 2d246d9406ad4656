"""A free loopback port: for the child processes the offline tools start, and for tests and benchmarks."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port no one listens on now (the OS picks it); a child started right after can bind it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
