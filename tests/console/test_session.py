"""Console sessions across replicas: with a shared signing secret (`auth.console_secret_env`) a sign-in on one
replica is valid on every other, as a console behind a Service that spreads requests needs; without one, each
process signs its own."""

from __future__ import annotations

import httpx

from tests.conftest import ADMIN_KEY, gateway_config
from tests.support import Process, free_port, write_yaml

SECRET = "0123456789abcdef0123456789abcdef-shared"


def _replica(tmp, fleet, name: str, shared: bool) -> tuple[Process, str]:
    port = free_port()
    config = gateway_config(fleet, port)
    if shared:
        config["auth"]["console_secret_env"] = "SLIPSTREAM_TEST_CONSOLE_SECRET"
    path = write_yaml(tmp / f"{name}.yaml", config)
    proc = Process(["serve", "--config", str(path)], tmp / f"{name}.log", env={"SLIPSTREAM_TEST_CONSOLE_SECRET": SECRET})
    proc.wait_listening(port)
    return proc, f"http://127.0.0.1:{port}"


def test_a_session_begun_on_one_replica_is_valid_on_another_that_shares_the_secret(fleet, tmp_path):
    started = [_replica(tmp_path, fleet, "a", True), _replica(tmp_path, fleet, "b", True), _replica(tmp_path, fleet, "c", False)]
    (_, a), (_, b), (_, c) = started
    try:
        signed_in = httpx.post(f"{a}/console/login", data={"key": ADMIN_KEY})
        assert signed_in.status_code == 303
        cookie = {"slipstream_console": signed_in.cookies["slipstream_console"]}
        on_b = httpx.get(f"{b}/console/api/session", cookies=cookie)
        assert on_b.status_code == 200
        # A change made on b with the token a's page got: the same session, the same CSRF token.
        token = httpx.get(f"{a}/console/api/session", cookies=cookie).json()["csrf"]
        assert on_b.json()["csrf"] == token
        explain = httpx.post(f"{b}/console/api/explain", cookies=cookie, headers={"x-csrf-token": token},
                             json={"body": '{"model": "chat", "messages": [{"role": "user", "content": "hi"}]}'})
        assert explain.status_code == 200, explain.text
        # A replica that signs with its own secret does not know the session.
        assert httpx.get(f"{c}/console/api/session", cookies=cookie).status_code == 401
    finally:
        for proc, _ in started:
            proc.stop()
    assert all(SECRET not in proc.log() for proc, _ in started)
