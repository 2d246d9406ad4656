"""Many replicas behave as one gateway, and a replica shutting down lets its streams finish."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.cache.conftest import cache_config
from tests.cache.test_cache import settle
from tests.conftest import start_gateway
from tests.support import wait_until


@pytest.fixture
def replicas(fleet, redis_server, tmp_path):
    gws = []
    for i in range(3):
        (tmp_path / f"r{i}").mkdir()
        gws.append(start_gateway(tmp_path / f"r{i}", fleet, cache_config(fleet, "redis", redis_server.url)))
    yield gws
    for g in gws:
        g.process.stop()


def test_three_replicas_share_one_redis(replicas):
    q = f"Shared across replicas {time.time()}"
    first = replicas[0].client().chat.completions.with_raw_response.create(
        model="cached", messages=[{"role": "user", "content": q}], temperature=0)
    assert first.headers["x-slipstream-cache"] == "miss"
    settle(replicas[0])  # the write happens after the response: wait until it is in Redis
    for gw in replicas[1:]:
        raw = gw.client().chat.completions.with_raw_response.create(
            model="cached", messages=[{"role": "user", "content": q}], temperature=0)
        assert raw.headers["x-slipstream-cache"] == "hit"
        assert raw.parse().choices[0].message.content == first.parse().choices[0].message.content
    # And the semantic index is shared too.
    raw = replicas[2].client().chat.completions.with_raw_response.create(
        model="cached", messages=[{"role": "user", "content": "Please, " + q.lower()}], temperature=0)
    assert raw.headers["x-slipstream-cache"] == "semantic-hit"


def test_sigterm_mid_stream_lets_the_stream_finish(fleet, tmp_path):
    gw = start_gateway(tmp_path, fleet)
    client = gw.client()
    stream = client.chat.completions.create(model="slow", messages=[{"role": "user", "content": "drain"}],
                                            max_tokens=30, stream=True, extra_body={"ignore_eos": True})
    chunks = []
    for chunk in stream:
        chunks.append(chunk)
        if len(chunks) == 3:
            gw.process.proc.send_signal(signal.SIGTERM)
            # Soon the replica stops taking new calls, while this stream goes on.
            assert wait_until(lambda: not _accepts(gw.url), timeout=3)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text.split()) == 30
    assert chunks[-1].choices[0].finish_reason == "length"
    # uvicorn re-raises SIGTERM once it has shut down cleanly, so the exit status is the signal's.
    assert gw.process.proc.wait(timeout=10) in (0, -signal.SIGTERM)
    log = gw.process.log()
    assert "Finished server process" in log and "Traceback" not in log


def test_json_calls_still_running_past_the_grace_get_a_retryable_503_in_their_api_shape(fleet, tmp_path):
    # Every backend hangs; the grace period is short: uvicorn cancels the three calls. Each SDK sees a 503 in its
    # own error class and shape; they used to get uvicorn's plain-text "Internal Server Error" 500, recorded as a
    # client that left (499).
    import anthropic
    import openai

    from tests.conftest import ACME_KEY, gateway_config
    from tests.support import free_port, sim_stats

    config = gateway_config(fleet, free_port(), shutdown_grace_s=0.5)
    # Chat only (Responses and Messages translated to it), and no time limit of its own before the grace ends.
    config["backends"]["hang"].update(apis=["chat"], timeouts={"connect_s": 1, "first_token_s": 30, "total_s": 30})
    gw = start_gateway(tmp_path, fleet, config)
    oa = gw.client(timeout=20)
    an = anthropic.Anthropic(base_url=gw.url, api_key=ACME_KEY, max_retries=0, timeout=20)
    calls = {
        "chat": lambda: oa.chat.completions.create(model="hang", messages=[{"role": "user", "content": "hi"}]),
        "responses": lambda: oa.responses.create(model="hang", input="hi"),
        "messages": lambda: an.messages.create(model="hang", max_tokens=8, messages=[{"role": "user", "content": "hi"}]),
    }
    before = sim_stats(fleet.ports["hang"])["requests"]
    with ThreadPoolExecutor(3) as pool:
        futures = {name: pool.submit(call) for name, call in calls.items()}
        assert wait_until(lambda: sim_stats(fleet.ports["hang"])["requests"] - before >= 3, timeout=10)
        gw.process.proc.send_signal(signal.SIGTERM)
        errors = {}
        for name, future in futures.items():
            with pytest.raises((openai.APIStatusError, anthropic.APIStatusError)) as caught:
                future.result(timeout=15)
            errors[name] = caught.value
    assert gw.process.proc.wait(timeout=10) in (0, -signal.SIGTERM)
    assert all(e.status_code == 503 and e.response.headers["x-should-retry"] == "true" for e in errors.values())
    assert isinstance(errors["chat"], openai.InternalServerError) and isinstance(errors["messages"], anthropic.InternalServerError)
    assert errors["chat"].code == errors["responses"].code == "request_interrupted"
    assert errors["messages"].body["error"]["type"] == "api_error"
    assert "Exception in ASGI application" not in gw.process.log()


class StallingLink:
    """A TCP link on loopback to a real server (here Redis) that can stall: once `stall()` is called, what
    the gateway sends is taken and held, never passed on, as a dependency stuck mid-call holds it.
    `held` counts the sends held so far."""

    def __init__(self, port: int) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._target = port
        self._stalled = threading.Event()
        self._sockets: list[socket.socket] = [self._server]
        self.held = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def stall(self) -> None:
        self._stalled.set()

    def close(self) -> None:
        for s in self._sockets:
            s.close()

    def _accept(self) -> None:
        while True:
            try:
                near, _ = self._server.accept()
            except OSError:
                return
            far = socket.create_connection(("127.0.0.1", self._target))
            self._sockets += [near, far]
            threading.Thread(target=self._pump, args=(near, far, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(far, near, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, outbound: bool) -> None:
        try:
            while data := src.recv(65536):
                if outbound and self._stalled.is_set():
                    self.held += 1
                    continue
                dst.sendall(data)
        except OSError:
            pass


def test_any_route_still_running_past_the_grace_gets_a_retryable_503_never_a_500(fleet, redis_server, tmp_path):
    # Stored responses and the limiter (which /admin/tenants and the console's cache page read) live in a real
    # Redis behind a link that stalls; the grace period is short: uvicorn cancels the calls left waiting on it.
    # Routes the fast path does not serve got uvicorn's plain-text "Internal Server Error" 500 there.
    import openai

    from tests.conftest import ADMIN_KEY, gateway_config
    from tests.support import free_port

    link = StallingLink(redis_server.port)
    url = f"redis://127.0.0.1:{link.port}/0"
    config = gateway_config(fleet, free_port(), shutdown_grace_s=0.5)
    config["responses"] = {"store": "redis", "redis_url": url, "timeout_ms": 30000}
    config["limits"] = {"store": "redis", "redis_url": url, "timeout_ms": 30000, "key_prefix": f"stall-{time.time()}:",
                        "tenants": {"acme": {"limits": {"requests_per_minute": 1000}}}}
    gw = start_gateway(tmp_path, fleet, config)
    oa = gw.client(timeout=20)
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    try:
        # Through the link before it stalls, each route answers.
        with pytest.raises(openai.NotFoundError):
            oa.responses.retrieve("resp_never_stored")
        assert httpx.get(f"{gw.url}/admin/tenants", headers=admin, timeout=10).status_code == 200
        link.stall()
        calls = {
            "GET /v1/responses/{id}": lambda: oa.responses.retrieve("resp_never_stored"),
            "DELETE /v1/responses/{id}": lambda: oa.responses.delete("resp_never_stored"),
            "GET /admin/tenants": lambda: httpx.get(f"{gw.url}/admin/tenants", headers=admin, timeout=20),
            "GET /console/api/cache": lambda: httpx.get(f"{gw.url}/console/api/cache", headers=admin, timeout=20),
        }
        with ThreadPoolExecutor(len(calls)) as pool:
            futures = {}
            for name, call in calls.items():  # one by one, each held at the link before the next starts
                held = link.held
                futures[name] = pool.submit(call)
                assert wait_until(lambda held=held: link.held > held, timeout=10), name
            gw.process.proc.send_signal(signal.SIGTERM)
            answers = {}
            for name, future in futures.items():
                if name.endswith("{id}"):
                    with pytest.raises(openai.APIStatusError) as caught:
                        future.result(timeout=15)
                    answers[name] = caught.value.response
                    assert isinstance(caught.value, openai.InternalServerError) and caught.value.code == "request_interrupted"
                else:
                    answers[name] = future.result(timeout=15)
        assert gw.process.proc.wait(timeout=10) in (0, -signal.SIGTERM)
    finally:
        link.close()
    assert {name: r.status_code for name, r in answers.items()} == dict.fromkeys(calls, 503)
    for name, r in answers.items():
        assert r.headers["x-should-retry"] == "true" and r.headers["retry-after"] == "1", name
        assert (r.json()["error"]["type"], r.json()["error"]["code"]) == ("api_error", "request_interrupted"), name
    assert "Exception in ASGI application" not in gw.process.log()


def test_a_call_still_sending_its_body_past_the_grace_gets_a_retryable_503_never_a_500(fleet, tmp_path):
    # Clients that have sent their headers and part of their body when SIGTERM comes, and send no more before the
    # grace period ends: uvicorn cancels each while it waits for the rest. A proxied route answered uvicorn's
    # plain-text 500 there, even after the 503s of calls stopped later.
    from tests.conftest import ACME_KEY, ADMIN_KEY, gateway_config
    from tests.support import free_port

    gw = start_gateway(tmp_path, fleet, gateway_config(fleet, free_port(), shutdown_grace_s=0.5))
    calls = {  # path, credentials and API headers, and whose error shape the answer is in
        "chat": (b"/v1/chat/completions", b"authorization: Bearer " + ACME_KEY.encode(), "openai"),
        "messages": (b"/v1/messages", b"x-api-key: " + ACME_KEY.encode() + b"\r\nanthropic-version: 2023-06-01", "anthropic"),
        "admin explain": (b"/admin/route/explain", b"authorization: Bearer " + ADMIN_KEY.encode(), "openai"),
    }
    clients = {}
    for name, (path, credentials, _) in calls.items():
        client = socket.create_connection(("127.0.0.1", gw.port), timeout=15)
        client.sendall(b"GET /healthz HTTP/1.1\r\nhost: gateway\r\n\r\n")  # the server has taken the connection
        assert client.recv(65536).startswith(b"HTTP/1.1 200 OK")
        client.sendall(b"POST %s HTTP/1.1\r\nhost: gateway\r\n%s\r\ncontent-type: application/json\r\n"
                       b"content-length: 200\r\n\r\n{\"model\": \"chat\"," % (path, credentials))
        clients[name] = client
    time.sleep(0.5)  # the heads and first bytes are read (a request not begun would be closed without a word)
    gw.process.proc.send_signal(signal.SIGTERM)
    answers = {}
    for name, client in clients.items():
        received = b""
        while chunk := client.recv(65536):
            received += chunk
        client.close()
        head, _, body = received.partition(b"\r\n\r\n")
        answers[name] = (head.split(b"\r\n")[0], {k.lower(): v for k, _, v in
                                                 (line.partition(b": ") for line in head.split(b"\r\n")[1:])}, body)
    assert gw.process.proc.wait(timeout=10) in (0, -signal.SIGTERM)
    assert {name: status for name, (status, _, _) in answers.items()} == dict.fromkeys(calls, b"HTTP/1.1 503 Service Unavailable")
    for name, (_, headers, body) in answers.items():
        assert headers[b"x-should-retry"] == b"true" and headers[b"retry-after"] == b"1", name
        error = json.loads(body)
        if calls[name][2] == "anthropic":
            assert (error["type"], error["error"]["type"]) == ("error", "api_error"), body
        else:
            assert (error["error"]["type"], error["error"]["code"]) == ("api_error", "request_interrupted"), body
    assert "Exception in ASGI application" not in gw.process.log()


def _accepts(url: str) -> bool:
    try:
        httpx.get(f"{url}/healthz", timeout=0.5)
        return True
    except httpx.HTTPError:
        return False


def test_serve_with_two_workers(fleet, tmp_path):
    from tests.conftest import gateway_config
    from tests.support import Process, free_port, write_yaml

    port = free_port()
    path = write_yaml(tmp_path / "gw.yaml", gateway_config(fleet, port))
    proc = Process(["serve", "--config", str(path), "--workers", "2"], tmp_path / "gw.log")
    try:
        proc.wait_listening(port)
        import openai

        from tests.conftest import ACME_KEY

        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=ACME_KEY, max_retries=0)
        for _ in range(6):
            assert client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "w"}], max_tokens=2).choices
        # The second worker may come up well after the first answers on a loaded machine: wait for it.
        assert wait_until(lambda: proc.log().count("Started server process") >= 2, timeout=60, interval=0.2), proc.log()
    finally:
        proc.stop()
