"""The console over HTTP, on the demo gateway: who may see it, what a cross-site request can do, and
that no secret is ever in what it serves."""

from __future__ import annotations

import json

import httpx
import pytest
import yaml

from app.http.console.routes import router
from tests.console.browser import ADMIN_KEY, demo_config, traffic, wait_for
from tests.support import Process

BACKEND_SECRET = "sk-backend-secret-do-not-show"
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("console-http")
    path, port = demo_config(tmp)
    data = yaml.safe_load(path.read_text())
    data["backends"]["big-a"]["api_key_env"] = "CONSOLE_TEST_BACKEND_KEY"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = Process(["serve", "--config", str(path)], tmp / "gateway.log", env={"CONSOLE_TEST_BACKEND_KEY": BACKEND_SECRET})
    proc.wait_listening(port)
    base = f"http://127.0.0.1:{port}"
    try:
        traffic(base, 12)
        yield base
    finally:
        proc.stop()


def every_route() -> list[tuple[str, str]]:
    out = []
    for r in router.routes:
        path = r.path.replace("{name}", "console.js").replace("{request_id}", "x")
        out += [(m, path) for m in r.methods if m != "HEAD"]
    return out


@pytest.mark.parametrize("method,path", every_route())
def test_every_console_route_answers_401_without_the_admin_key(gw, method, path):
    for headers in ({}, {"authorization": "Bearer not-the-admin-key"}, {"cookie": "slipstream_console=1.2.3"}):
        r = httpx.request(method, gw + path, headers=headers, content=b"{}" if method == "POST" else None)
        assert r.status_code == 401, (method, path, headers, r.status_code)


def test_the_page_and_its_assets_come_from_the_gateway_itself(gw):
    page = httpx.get(f"{gw}/console", headers=ADMIN)
    assert page.status_code == 200 and "script-src 'self'" in page.headers["content-security-policy"]
    assert "http" not in page.text.split("<body>")[0].replace('charset="utf-8"', ""), "nothing fetched from elsewhere"
    for asset in ("console.js", "console.css"):
        r = httpx.get(f"{gw}/console/static/{asset}", headers=ADMIN)
        assert r.status_code == 200 and len(r.content) > 1000
        text = r.text.replace("http://www.w3.org/2000/svg", "")  # the SVG namespace name, never fetched
        assert "https://" not in text and "http://" not in text


def sign_in(gw) -> httpx.Client:
    client = httpx.Client(base_url=gw)
    r = client.post("/console/login", data={"key": ADMIN_KEY})
    assert r.status_code == 303 and "slipstream_console" in client.cookies
    assert "httponly" in r.headers["set-cookie"].lower() and "samesite=strict" in r.headers["set-cookie"].lower()
    return client


def test_a_cookie_session_needs_the_csrf_token_to_change_anything(gw):
    client = sign_in(gw)
    assert client.get("/console/api/fleet").status_code == 200
    change = {"patch": {"models": {"llama-70b": {"strategy": "round_robin"}}}}
    r = client.post("/console/api/apply", json=change)
    assert r.status_code == 403 and r.json()["error"]["code"] == "csrf_refused"
    token = client.get("/console/api/session").json()["csrf"]
    r = client.post("/console/api/apply", json=change, headers={"x-csrf-token": token, "origin": "https://evil.example"})
    assert r.status_code == 403, "another site's page cannot post, even with a token"
    r = client.post("/console/api/apply", json=change, headers={"x-csrf-token": token, "origin": gw})
    assert r.status_code == 200 and r.json()["applied"]
    r = client.post("/console/api/rollback", json={}, headers={"x-csrf-token": token})
    assert r.status_code == 200
    audit = client.get("/console/api/policy").json()["audit"]
    assert [a["action"] for a in audit[:2]] == ["rollback", "apply"]
    assert all(a["who"].startswith("admin key ") and ADMIN_KEY not in a["who"] for a in audit)


def test_a_change_that_does_not_validate_is_refused_and_nothing_changes(gw):
    before = httpx.get(f"{gw}/console/api/policy", headers=ADMIN).json()["models"]
    r = httpx.post(f"{gw}/console/api/apply", headers=ADMIN, json={"patch": {"models": {"llama-70b": {"strategy": "nope"}}}})
    assert r.status_code == 400 and r.json()["error"]["code"] == "change_refused"
    assert httpx.get(f"{gw}/console/api/policy", headers=ADMIN).json()["models"] == before


def test_no_backend_or_client_key_is_ever_served(gw):
    bodies = [httpx.get(f"{gw}/console/api/{v}", headers=ADMIN).text for v in ("fleet", "requests", "cache", "policy", "session")]
    rows = httpx.get(f"{gw}/console/api/requests", headers=ADMIN).json()["rows"]
    bodies += [httpx.get(f"{gw}/console/api/requests/{r['id']}", headers=ADMIN).text for r in rows[:5]]
    bodies.append(httpx.post(f"{gw}/console/api/explain", headers=ADMIN, json={"request_id": rows[0]["id"]}).text)
    for body in bodies:
        assert BACKEND_SECRET not in body and ADMIN_KEY not in body and "Bearer any" not in body


def test_live_views_are_bounded_and_built_at_most_once_a_second(gw):
    traffic(gw, 30, hostile=False)
    a = httpx.get(f"{gw}/console/api/requests", headers=ADMIN)
    b = httpx.get(f"{gw}/console/api/requests", headers=ADMIN)
    assert a.content == b.content, "a second look within the second gets the same answer, not a rebuild"
    timings = [dict(p.strip().split(";dur=") for p in r.headers["server-timing"].split(",")) for r in (a, b)]
    assert set(timings[0]) == {"build", "cpu"}, "each view says what building it cost, in wall and CPU time"
    assert timings[1] == {"build": "0.000", "cpu": "0.000"}, "the cached answer cost nothing to build"
    assert len(a.json()["rows"]) <= 100
    fleet = httpx.get(f"{gw}/console/api/fleet", headers=ADMIN).json()
    assert all(len(b["series"]) <= 120 for b in fleet["backends"])


def test_with_content_capture_on_both_json_and_streamed_answers_are_kept(gw):
    rows = httpx.get(f"{gw}/console/api/requests", headers=ADMIN).json()["rows"]
    for stream in (True, False):
        row = next(r for r in rows if r["stream"] is stream and r["backend"] and r["endpoint"] == "chat/completions")
        detail = httpx.get(f"{gw}/console/api/requests/{row['id']}", headers=ADMIN).json()
        assert detail["content"]["request"]["messages"][0]["role"] == "user"
        assert isinstance(detail["content"]["answer"], str) and detail["content"]["answer"], stream


def test_without_content_capture_no_text_is_kept_or_shown(tmp_path):
    from tests.console.browser import start_demo

    proc, base, _ = start_demo(tmp_path, capture_content=False)
    try:
        traffic(base, 4, hostile=False)
        rows = httpx.get(f"{base}/console/api/requests", headers=ADMIN).json()["rows"]
        detail = httpx.get(f"{base}/console/api/requests/{rows[0]['id']}", headers=ADMIN).json()
        assert "content" not in detail and detail["capture_content"] is False
        assert "tell me about gateways" not in httpx.get(f"{base}/console/api/requests", headers=ADMIN).text
        explained = httpx.post(f"{base}/console/api/explain", headers=ADMIN, json={"request_id": rows[0]["id"]}).json()
        assert "content capture is off" in explained["note"]
    finally:
        proc.stop()


def test_an_uploaded_workload_is_replayed_against_both_policies(gw):
    workload = "\n".join(f'{{"t": {i * 0.05:.2f}, "prompt_tokens": 50, "max_tokens": 8, "stream": {"true" if i % 2 else "false"}, '
                         f'"model": "llama-70b"}}' for i in range(12))
    change = {"patch": {"models": {"llama-70b": {"strategy": "least_inflight"}}}, "workload": workload}
    r = httpx.post(f"{gw}/console/api/whatif", headers=ADMIN, json=change)
    assert r.status_code == 202 and r.json()["requests"] == 12 and r.json()["source"] == "uploaded workload"
    import time

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job = httpx.get(f"{gw}/console/api/whatif", headers=ADMIN).json()
        if job["status"] != "running":
            break
        time.sleep(0.5)
    assert job["status"] == "done", job
    assert [row["policy"] for row in job["result"]["rows"]] == ["current", "candidate"]
    assert all(row["requests"] == 12 and row["errors"] == 0 for row in job["result"]["rows"])
    bad = httpx.post(f"{gw}/console/api/whatif", headers=ADMIN, json={**change, "workload": "not json"})
    assert bad.status_code == 400 and "line 1" in bad.json()["error"]["message"]


def test_requests_of_every_api_show_in_the_ring_with_their_api(gw):
    with httpx.Client(base_url=gw, timeout=30) as client:
        r = client.post("/v1/messages", json={"model": "llama-8b", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200, r.text
        r = client.post("/v1/responses", json={"model": "llama-8b", "max_output_tokens": 8, "input": "hello", "store": False})
        assert r.status_code == 200, r.text

    def newest() -> dict:  # the view is rebuilt at most once a second: until it has both
        rows = httpx.get(f"{gw}/console/api/requests", headers=ADMIN).json()["rows"]
        found = {r["endpoint"]: r for r in rows[:5]}
        return found if {"messages", "responses"} <= set(found) else {}

    by_api = wait_for(newest, timeout=10, what="both requests in the ring")
    assert by_api["messages"]["alias"] == "llama-8b" and by_api["messages"]["backend"] == "small"
    assert by_api["responses"]["alias"] == "llama-8b" and by_api["responses"]["backend"] == "small"
    for api in ("messages", "responses"):
        detail = httpx.get(f"{gw}/console/api/requests/{by_api[api]['id']}", headers=ADMIN).json()
        assert detail["request"]["endpoint"] == api and detail["attempts"], api
        explained = httpx.post(f"{gw}/console/api/explain", headers=ADMIN, json={"request_id": by_api[api]["id"]})
        assert explained.status_code == 200 and f"a /v1/{api} request" in explained.json()["note"], explained.text


def test_a_request_of_another_api_is_explained_as_a_chat_request_of_its_size(gw):
    # Embeddings stand in for any API whose body is not a chat body (Messages, Responses): the ring
    # names its API, and explain says what it did instead of failing on the body.
    rows = httpx.get(f"{gw}/console/api/requests", headers=ADMIN).json()["rows"]
    row = next(r for r in rows if r["endpoint"] == "embeddings")
    assert row["alias"] == "embed" and row["backend"] == "embed"
    r = httpx.post(f"{gw}/console/api/explain", headers=ADMIN, json={"request_id": row["id"]})
    assert r.status_code == 200, r.text
    assert "a /v1/embeddings request" in r.json()["note"] and r.json()["chain"][0]["choice"] == "embed"


def test_a_pasted_body_may_be_a_json_object_or_its_text_and_anything_else_is_refused_naming_the_field(gw):
    # A script posts the request as an object; the page's text box sends its text. Both explain the same;
    # anything else is a 400 that names `body`, not "request body is not valid JSON" as if the call itself were.
    pasted = {"model": "llama-8b", "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 16}
    answers = [httpx.post(f"{gw}/console/api/explain", headers=ADMIN, json={"body": body})
               for body in (pasted, json.dumps(pasted))]
    assert [r.status_code for r in answers] == [200, 200], [r.text for r in answers]
    as_object, as_text = (r.json() for r in answers)
    assert as_object["request"] == as_text["request"] == {"alias": "llama-8b", "stream": False,
                                                          "prompt_tokens_estimated": as_text["request"]["prompt_tokens_estimated"]}
    assert as_object["would_use"] == as_text["would_use"] == "llama-8b"
    for body, says in ((42, "not a number"), (["x"], "not an array"), (True, "not a boolean"),
                       ("{not json", "not valid JSON"), ("", "not valid JSON"), ("[1, 2]", "this text is an array")):
        r = httpx.post(f"{gw}/console/api/explain", headers=ADMIN, json={"body": body})
        error = r.json()["error"]
        assert (r.status_code, error["type"], error["param"]) == (400, "invalid_request_error", "body"), (body, r.text)
        assert error["message"].startswith("'body' ") and says in error["message"], (body, error["message"])
    # A fault inside the pasted request is named where it sits in this call (`body.model`), not as if the
    # explain call itself had a `model` field.
    for body, status, param in (({**pasted, "model": "no-such-model"}, 404, "body.model"),
                                ({"model": "llama-8b"}, 400, "body.messages")):
        r = httpx.post(f"{gw}/console/api/explain", headers=ADMIN, json={"body": body})
        assert (r.status_code, r.json()["error"]["param"]) == (status, param), r.text


def test_the_console_knows_up_front_where_the_config_cannot_be_written_and_the_server_refuses_a_write(tmp_path):
    # The policy view the what-if page reads says whether Apply can write the file, and why not; apply and
    # roll back are still refused on the server, in words, and nothing is written.
    from tests.console.browser import start_demo

    proc, base, path = start_demo(tmp_path, capture_content=False)
    client = httpx.Client(base_url=base, headers=ADMIN, timeout=30)
    change = {"patch": {"models": {"llama-70b": {"strategy": "round_robin"}}}}
    try:
        policy = client.get("/console/api/policy").json()
        assert (policy["writable"], policy["why_not_writable"]) == (True, None)
        before = path.read_text()
        for mode, folder_mode, reason in ((0o444, 0o755, f"the config file is read-only (mode 0444, {path})"),
                                          (0o644, 0o555, f"the folder {path.parent} is not writable (mode 0555)")):
            path.chmod(mode)
            path.parent.chmod(folder_mode)
            try:
                policy = client.get("/console/api/policy").json()
                applied = client.post("/console/api/apply", json=change)
                rolled_back = client.post("/console/api/rollback", json={})
            finally:
                path.chmod(0o644)
                path.parent.chmod(0o755)
            assert policy["writable"] is False and policy["why_not_writable"].startswith(reason), policy
            for r, what in ((applied, "not applied"), (rolled_back, "not rolled back")):
                assert r.status_code == 409 and r.json()["error"]["code"] == "config_read_only", r.text
                assert r.json()["error"]["message"].startswith(f"{what}: {reason}"), r.text
            assert path.read_text() == before and not list(path.parent.glob(".gateway.yaml.*"))
        r = client.post("/console/api/apply", json=change)
        assert r.status_code == 200 and r.json()["applied"], "writable again: applied"
    finally:
        proc.stop()


def test_a_gateway_started_without_a_config_file_says_why_it_cannot_apply():
    import asyncio

    from app.config import load_config
    from app.http.server import create_app
    from tests.support import ROOT

    async def policy() -> dict:
        front = create_app(load_config(ROOT / "config/demo.yaml"))  # an embedded app: no file behind it
        async with front.app.router.lifespan_context(front.app):
            # From this machine, where the demo admin key is accepted; no backend is needed to read the policy.
            transport = httpx.ASGITransport(front, client=("127.0.0.1", 50000))
            async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
                return (await client.get("/console/api/policy", headers=ADMIN)).json()

    answer = asyncio.run(policy())
    assert (answer["writable"], answer["why_not_writable"]) == (False, "this gateway was not started from a config file")


@pytest.mark.parametrize("method,path,status", [("POST", "/console/api/explain", 400),  # a body it refuses
                                                 ("GET", "/console/api/no-such-view", 404),
                                                 ("PUT", "/console/api/policy", 405)])
def test_its_errors_carry_the_headers_its_pages_do(gw, method, path, status):
    # Not sniffed, not stored, not framed: an error page is a page of the console's too.
    r = httpx.request(method, gw + path, headers=ADMIN, json={"body": 42} if method == "POST" else None)
    assert r.status_code == status, r.text
    assert r.json()["error"]["message"]
    assert r.headers["x-content-type-options"] == "nosniff" and r.headers["cache-control"] == "no-store"
    assert r.headers["x-frame-options"] == "DENY"
