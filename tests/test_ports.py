"""free_port: a loopback port a child can bind, chosen where client connections do not take ports."""

from __future__ import annotations

import socket
from collections import deque
from pathlib import Path
from types import SimpleNamespace

import pytest

from app import ports
from app.ports import free_port

RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


@pytest.mark.skipif(not RANGE.exists(), reason="the kernel publishes no ephemeral range here (not Linux)")
def test_the_port_is_below_the_range_outgoing_connections_take_their_ports_from():
    low = int(RANGE.read_text().split()[0])
    assert all(free_port() < low for _ in range(50))


def test_the_port_is_free_for_a_server_to_bind_and_listen():
    for _ in range(20):
        port = free_port()
        with socket.socket() as server:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("127.0.0.1", port))
            server.listen()


@pytest.mark.skipif(not RANGE.exists(), reason="no ephemeral range: the OS picks the port itself")
def test_a_port_someone_listens_on_is_passed_over(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        held = taken.getsockname()[1]
        other = free_port()
        picks = iter([held, held, other])
        # The random pick made to land on the taken port first: a stand-in for the one-in-20,000 chance.
        monkeypatch.setattr(ports, "_rng", SimpleNamespace(randrange=lambda a, b: next(picks)))
        monkeypatch.setattr(ports, "_given", deque(maxlen=256))  # neither handed out before, as far as it knows
        assert free_port() == other


def test_picks_spread_so_two_suites_side_by_side_rarely_collide():
    assert len({free_port() for _ in range(100)}) > 90


def test_a_range_given_hands_out_its_free_ports_in_order_and_each_once():
    # A bench's --port-base: parallel runs given disjoint ranges never meet. Four ports free now, one
    # of them then taken by a listener: it is passed over, and the range's end is an error, not a
    # port from elsewhere.
    base = next(p for p in iter(free_port, None) if all(ports._bindable(p + k) for k in range(4)))
    try:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", base + 1))
            taken.listen()
            ports.use_ports(base, 4)
            assert [free_port(), free_port(), free_port()] == [base, base + 2, base + 3]
            with pytest.raises(RuntimeError):
                free_port()
    finally:
        ports.use_ports(None)
    assert len({free_port() for _ in range(20)}) > 10  # random free ports again, not the range's next
    with pytest.raises(ValueError):
        ports.use_ports(65000, 1000)


def test_a_port_handed_out_is_not_handed_out_again_before_its_child_binds_it(monkeypatch):
    # Two picks made before either child starts: both ports are still free, so only the memory of the
    # first keeps the second off it (a demo config once gave its gateway and a backend the same port).
    first = free_port()
    other = free_port()
    picks = iter([first, first, other])
    monkeypatch.setattr(ports, "_rng", SimpleNamespace(randrange=lambda a, b: next(picks)))
    monkeypatch.setattr(ports, "_given", deque([first], maxlen=256))  # only the first handed out
    monkeypatch.setattr(ports, "_BELOW", ports._BELOW or 40000)
    assert free_port() == other
