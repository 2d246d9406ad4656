"""free_port: a loopback port a child can bind, chosen where client connections do not take ports."""

from __future__ import annotations

import socket
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
        assert free_port() == other


def test_picks_spread_so_two_suites_side_by_side_rarely_collide():
    assert len({free_port() for _ in range(100)}) > 90
