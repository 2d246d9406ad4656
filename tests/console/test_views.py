"""What the fleet page says of a backend's state, from the router's own breaker and 429 cooldown."""

from __future__ import annotations

from types import SimpleNamespace

from app.config import BreakerConfig
from app.http.console.views import _state_of
from app.routing.health import Breaker


def backend(limited_until: float = 0.0) -> SimpleNamespace:
    # The two fields _state_of reads of a router BackendState (building a whole one needs a backend client).
    return SimpleNamespace(breaker=Breaker(BreakerConfig(consecutive_failures=2, cooldown_s=10.0)), limited_until=limited_until)


def test_a_healthy_backend_is_healthy():
    assert _state_of(backend(), 100.0) == ("healthy", 0.0)


def test_an_ejected_backend_shows_its_cooldown_then_probing():
    b = backend()
    b.breaker.record(False, 100.0)
    b.breaker.record(False, 100.0)
    assert _state_of(b, 103.0) == ("ejected", 7.0)
    b.breaker.on_chosen(111.0)  # the cooldown is over: one probe goes out
    assert _state_of(b, 111.0) == ("probing", 0.0)


def test_a_429_cooling_backend_shows_the_time_left():
    assert _state_of(backend(limited_until=105.0), 100.0) == ("rate_limited", 5.0)
    assert _state_of(backend(limited_until=105.0), 106.0) == ("healthy", 0.0)
