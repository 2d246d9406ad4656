"""A free loopback port: for the child processes the offline tools start, and for tests and benchmarks.

The port is chosen below the kernel's ephemeral range. The OS's own pick (bind to port 0) comes from
that range, which is also where every outgoing connection takes its local port: between our choice and
the child's bind, any client connection on the machine (a test's, a benchmark's, another suite's) could
take the port, and the child then fails with "address already in use". Below the range only another
listener can take it, and a random pick among ~20,000 ports makes that rare.

A benchmark run beside others can be given a range of its own instead (`use_ports`, the benches'
--port-base): every port it then takes comes from there, in order, so runs given disjoint ranges never
meet, and a run's servers are found by their ports.
"""

from __future__ import annotations

import random
import socket
from collections import deque
from pathlib import Path

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10000  # below this sit well-known services' ports
_rng = random.SystemRandom()  # not the random module's shared state: tests seed that
# With a range of our own (use_ports): the next port to try and the end of the range (exclusive).
_range: list[int] | None = None
# The random ports handed out last: a port is free until its child binds it, so two picks made before
# either child starts can land on the same one. A test's demo config took its gateway's port and then a
# simulated backend's, both 31262; the backend bound it, and the test's requests reached the backend.
_given: deque[int] = deque(maxlen=256)


def _ephemeral_start() -> int | None:
    """The first port of the kernel's ephemeral range, or None where the kernel does not say (not Linux)."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


_BELOW = _ephemeral_start()


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        # As the servers we start bind: a port left in TIME_WAIT by an earlier test is free to them.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def use_ports(base: int | None, span: int = 1000) -> None:
    """Take every later port from `base` up to `base + span` (exclusive), the next one free each time,
    and never one already handed out, since a child may not have bound it yet; None: random free ports
    again (the default)."""
    global _range
    if base is None:
        _range = None
        return
    if not 0 < base < base + span <= 65536:
        raise ValueError(f"ports {base}-{base + span - 1} are not a range of TCP ports")
    _range = [base, base + span]


def free_port() -> int:
    """A port no one listens on now: the next in the range `use_ports` gave, else a random one outside
    the ephemeral range where the kernel knows it; a child started right after can bind it."""
    if _range is not None:
        while _range[0] < _range[1]:
            port = _range[0]
            _range[0] += 1
            if _bindable(port):
                return port
        raise RuntimeError(f"no free port left below {_range[1]} in the range given to use_ports")
    if _BELOW is not None and _BELOW > _LOWEST + 1000:
        for _ in range(64):
            port = _rng.randrange(_LOWEST, _BELOW)
            if port not in _given and _bindable(port):
                _given.append(port)
                return port
    for _ in range(64):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _given:
            break
    _given.append(port)
    return port
