"""The console as an operator sees it: the demo gateway, real traffic, Debian's headless Chromium.

Each test opens a page the way a person would (signed in with the demo's admin key) and asserts on
what is on the screen, not on the JSON behind it.
"""

from __future__ import annotations

import os
import re

import httpx
import pytest

from tests.console.browser import ADMIN_KEY, HOSTILE, chrome, ensure_browser, sign_in, start_demo, traffic, wait_for

By = pytest.importorskip("selenium.webdriver.common.by").By


@pytest.fixture(scope="module")
def browser_paths():
    found = ensure_browser()
    if isinstance(found, str):
        if os.environ.get("CI"):
            pytest.fail(found)  # CI installs it (scripts/test): a missing browser there is a failure
        pytest.skip(found)
    return found


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("console")
    proc, base, path = start_demo(tmp, traced=True)
    try:
        traffic(base)
        yield base, path
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def drv(browser_paths, demo):
    d = chrome(*browser_paths)
    try:
        sign_in(d, demo[0])
        wait_for(lambda: d.find_element(By.ID, "who").text.startswith("admin key"), what="signed in")
        yield d
    finally:
        d.quit()


def open_page(drv, base: str, page: str) -> None:
    drv.get(f"{base}/console#{page}")
    wait_for(lambda: drv.find_element(By.ID, f"page-{page}").is_displayed(), what=f"page {page}")


def test_a_page_without_the_key_is_refused(browser_paths, demo):
    d = chrome(*browser_paths)
    try:
        d.get(f"{demo[0]}/console")
        assert "An admin key of this gateway is required" in d.find_element(By.TAG_NAME, "body").text
        assert not d.find_elements(By.ID, "backends")
        sign_in(d, demo[0], key="not-the-key")
        wait_for(lambda: "not an admin key" in d.find_element(By.ID, "message").text, what="the refusal")
    finally:
        d.quit()
    assert httpx.get(f"{demo[0]}/console").status_code == 401


def test_fleet_shows_every_backend_with_charts_of_predicted_and_measured(drv, demo):
    open_page(drv, demo[0], "fleet")

    def check() -> bool:
        # The page redraws itself every few seconds: the whole check runs again on a stale element.
        cards = drv.find_elements(By.CSS_SELECTOR, ".card.backend")
        names = {c.find_element(By.CSS_SELECTOR, ".name").text for c in cards}
        assert names == {"big-a", "big-b", "small", "embed"}
        card = next(c for c in cards if c.find_element(By.CSS_SELECTOR, ".name").text == "big-b")
        assert "healthy" in card.text and "TPOT" in card.text and "prefix-cache accuracy" in card.text
        assert "median TTFT error" in card.text and "median E2E error" in card.text and "traffic share" in card.text
        charts = card.find_elements(By.CSS_SELECTOR, "svg.chart")
        assert len(charts) == 2
        assert all(int(c.get_attribute("data-points")) > 0 for c in charts), "both charts have data points"
        assert card.find_elements(By.CSS_SELECTOR, "svg.chart circle.pt")
        overhead = drv.find_element(By.ID, "overhead").text
        assert "gateway added p50" in overhead and "ms" in overhead
        return True

    wait_for(check, what="the fleet page")


def test_a_request_opens_into_its_waterfall_next_to_the_prediction(drv, demo):
    open_page(drv, demo[0], "requests")

    def check() -> bool:
        rows = drv.find_elements(By.CSS_SELECTOR, "#requests-table tr.pick")
        assert len(rows) >= 20
        assert {r.find_element(By.CSS_SELECTOR, "td.api").text for r in rows} == {"chat", "embeddings"}, "each row says its API"
        next(r for r in rows if "big-" in r.text).click()
        return True

    wait_for(check, what="request rows")

    def waterfall() -> bool:
        svg = drv.find_element(By.CSS_SELECTOR, "#request-detail svg.waterfall")
        stages = {r.get_attribute("data-name") for r in svg.find_elements(By.CSS_SELECTOR, "rect.stage")}
        assert "decode" in stages and ({"prefill", "queue_prefill"} & stages)
        assert svg.find_elements(By.CSS_SELECTOR, "rect.predicted"), "the prediction is drawn beside the stages"
        detail = drv.find_element(By.ID, "request-detail").text
        assert "predicted E2E" in detail and "trace id" in detail and "gateway added" in detail
        link = drv.find_element(By.CSS_SELECTOR, "#request-detail .trace a")
        assert re.fullmatch(r"http://127\.0\.0\.1:16686/trace/[0-9a-f]{32}", link.get_attribute("href")), "opens in Jaeger"
        assert link.text == link.get_attribute("href").rsplit("/", 1)[1]
        return True

    wait_for(waterfall, what="the waterfall")


def test_request_content_is_shown_as_text_never_run(drv, demo):
    open_page(drv, demo[0], "requests")
    # The newest request is the one with markup and script in its prompt.
    wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, "#requests-table tr.pick")[0].click() or True, what="request rows")

    def check() -> bool:
        prompt = drv.find_element(By.CSS_SELECTOR, "#request-detail pre.prompt")
        assert "<script>window.__pwned=2</script>" in prompt.text and '<img src=x onerror=' in prompt.text
        return True

    wait_for(check, what="the prompt, as text")
    assert not drv.find_elements(By.CSS_SELECTOR, "#request-detail img, #request-detail pre script")
    assert drv.execute_script("return window.__pwned === undefined")


def test_markup_in_a_pasted_body_comes_back_as_text_never_run(drv, demo):
    # The gateway's refusal names the unknown model, markup and all: the page shows it as text.
    open_page(drv, demo[0], "explain")
    box = drv.find_element(By.ID, "explain-body")
    box.clear()
    box.send_keys('{"model": "' + HOSTILE.replace('"', '\\"') + '", "messages": [{"role": "user", "content": "hi"}]}')
    drv.find_element(By.ID, "explain-paste").click()
    shown = wait_for(lambda: drv.find_element(By.CSS_SELECTOR, "#explain-out p.bad").text, what="the refusal")
    assert "<script>window.__pwned=2</script>" in shown and "<img src=x" in shown
    assert not drv.find_elements(By.CSS_SELECTOR, "#explain-out img, #explain-out script")
    assert drv.execute_script("return window.__pwned === undefined")


def test_route_explain_lists_every_candidate_and_the_winner(drv, demo):
    open_page(drv, demo[0], "explain")
    wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, "#explain-pick option"), what="recent requests to pick")
    drv.find_element(By.ID, "explain-recent").click()

    def picked() -> bool:
        table = drv.find_element(By.CSS_SELECTOR, "#explain-out table.explain")
        assert len(table.find_elements(By.CSS_SELECTOR, "tr")) >= 2
        assert "Winner:" in drv.find_element(By.ID, "explain-out").text
        return True

    wait_for(picked, what="the explain table of a recent request")
    box = drv.find_element(By.ID, "explain-body")
    box.clear()
    box.send_keys('{"model": "llama-70b", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 64}')
    drv.find_element(By.ID, "explain-paste").click()

    def pasted() -> bool:
        first = drv.find_element(By.CSS_SELECTOR, "#explain-out table.explain")
        assert "llama-70b" in drv.find_element(By.ID, "explain-out").text
        backends = {tr.find_elements(By.TAG_NAME, "td")[0].text for tr in first.find_elements(By.CSS_SELECTOR, "tr")[1:]}
        assert backends == {"big-a", "big-b"}
        assert first.find_elements(By.CSS_SELECTOR, "tr.winner")
        return True

    wait_for(pasted, what="the explain table of a pasted body")


def test_cache_and_tenants(drv, demo):
    open_page(drv, demo[0], "cache")

    def check() -> bool:
        text = drv.find_element(By.ID, "cache-out").text
        for figure in ("exact hit rate", "semantic hit rate", "guard rejections", "verifier rejections", "store errors"):
            assert figure in text
        tenants = drv.find_element(By.ID, "tenants-table").text
        assert "local" in tenants and "remaining" in tenants
        return True

    wait_for(check, what="cache and tenants")


def test_whatif_compares_policies_then_apply_takes_effect_and_rolls_back(drv, demo):
    base, path = demo
    open_page(drv, base, "whatif")
    from selenium.webdriver.support.select import Select

    Select(drv.find_element(By.ID, "wi-alias")).select_by_value("llama-70b")
    Select(drv.find_element(By.ID, "wi-strategy")).select_by_value("round_robin")
    drv.find_element(By.ID, "wi-run").click()
    table = wait_for(lambda: drv.find_element(By.CSS_SELECTOR, "#whatif-out table.whatif"), timeout=180, what="what-if table")
    # The what-if page does not redraw on a timer: these elements stay.
    policies = [tr.find_elements(By.TAG_NAME, "td")[0].text for tr in table.find_elements(By.CSS_SELECTOR, "tr:not(.delta)")[1:]]
    assert policies == ["current", "candidate"]
    assert "E2E p99" in table.text and "TTFT p50" in table.text
    delta = table.find_element(By.CSS_SELECTOR, "tr.delta").text
    assert "candidate vs current" in delta and "%" in delta
    bars = drv.find_element(By.CSS_SELECTOR, "#whatif-out svg.chart.bars")
    assert int(bars.get_attribute("data-points")) == 8, "TTFT and E2E p50/p99 for both policies, side by side"
    assert len(bars.find_elements(By.CSS_SELECTOR, "rect.bar")) == 8
    over_time = drv.find_element(By.CSS_SELECTOR, "#whatif-out svg.chart:not(.bars)")
    assert int(over_time.get_attribute("data-points")) > 0

    def strategy_now() -> str:
        r = httpx.post(f"{base}/admin/route/explain", headers={"authorization": f"Bearer {ADMIN_KEY}"},
                       json={"model": "llama-70b", "messages": [{"role": "user", "content": "hi"}]})
        return r.json()["chain"][0]["strategy"]

    before = strategy_now()
    assert before != "round_robin"
    drv.find_element(By.ID, "wi-apply").click()
    wait_for(lambda: drv.switch_to.alert, what="the confirmation").accept()
    wait_for(lambda: "applied" in drv.find_element(By.ID, "wi-status").text, what="applied")
    assert strategy_now() == "round_robin"
    assert "round_robin" in path.read_text()
    wait_for(lambda: "llama-70b: round_robin" in drv.find_element(By.ID, "whatif-hint").text, what="the running policy, changed")
    audit = drv.find_element(By.ID, "audit-table").text
    assert "apply" in audit and "admin key" in audit
    drv.find_element(By.ID, "wi-rollback").click()
    wait_for(lambda: drv.switch_to.alert, what="the confirmation").accept()
    wait_for(lambda: "rolled back" in drv.find_element(By.ID, "wi-status").text, what="rolled back")
    assert strategy_now() == before
    wait_for(lambda: f"llama-70b: {before}" in drv.find_element(By.ID, "whatif-hint").text, what="the running policy, back")
    assert "rollback" in drv.find_element(By.ID, "audit-table").text


def test_where_the_config_cannot_be_written_apply_is_not_offered_and_the_page_says_why(drv, demo):
    base, path = demo
    path.chmod(0o444)
    try:
        open_page(drv, base, "whatif")
        drv.refresh()  # a fresh page load, as an operator opening it (the page may have been open before)
        reason = wait_for(lambda: drv.find_element(By.ID, "wi-readonly"), what="the reason")
        wait_for(lambda: reason.is_displayed(), what="the reason, shown")
        assert reason.text == f"Apply and roll back are off: the config file is read-only (mode 0444, {path})."
        for button in ("wi-apply", "wi-rollback"):
            assert not drv.find_element(By.ID, button).is_enabled(), button
        assert drv.find_element(By.ID, "wi-run").is_enabled(), "a what-if only reads the file: still offered"
    finally:
        path.chmod(0o644)
    drv.refresh()
    wait_for(lambda: drv.find_element(By.ID, "wi-apply").is_enabled(), what="Apply, offered again")
    assert drv.find_element(By.ID, "wi-rollback").is_enabled() and not drv.find_element(By.ID, "wi-readonly").is_displayed()
