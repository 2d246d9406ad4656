"""Photograph every console page as an operator sees it: the demo gateway (config/demo.yaml on free
ports), some traffic, Debian's headless Chromium (scripts/chromium installs it).

    .venv/bin/python bench/console_screenshots.py --out /tmp/console-shots

Writes OUT/fleet.png, requests.png, requests-hostile-prompt.png, explain.png, cache.png, whatif.png,
whatif-applied.png, signed-out.png and prints their paths.
Bounded: 60 requests, one what-if replay of them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.console.browser import chrome, ensure_browser, sign_in, start_demo, traffic, wait_for


def shoot(drv, out: Path, name: str) -> Path:
    """The whole page, not the window: the viewport is set to the page's height (a window's size
    includes the browser's own frame, which cut the bottom off)."""
    height = drv.execute_script("return Math.max(document.documentElement.scrollHeight, document.body.scrollHeight, 900)")
    drv.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 1400, "height": min(height, 4000), "deviceScaleFactor": 1,
                                                               "mobile": False})
    drv.execute_async_script("requestAnimationFrame(() => requestAnimationFrame(arguments[0]))")  # laid out and painted
    png = out / f"{name}.png"
    drv.save_screenshot(str(png))
    drv.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return png


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="console-shots")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    found = ensure_browser()
    if isinstance(found, str):
        sys.exit(found)
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select

    with tempfile.TemporaryDirectory() as tmp:
        proc, base, _ = start_demo(Path(tmp))
        drv = chrome(*found)
        try:
            with httpx.Client(base_url=base, timeout=30) as client:  # the other APIs, so the ring shows them too
                client.post("/v1/messages", json={"model": "llama-8b", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
                client.post("/v1/responses", json={"model": "llama-8b", "max_output_tokens": 8, "input": "hello", "store": False})
            traffic(base, 60)
            sign_in(drv, base)
            wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, ".card.backend svg.chart circle"), what="fleet charts")
            time.sleep(3.5)  # one live refresh
            shots = [shoot(drv, out, "fleet")]
            drv.get(f"{base}/console#requests")
            wait_for(lambda: next(r for r in drv.find_elements(By.CSS_SELECTOR, "#requests-table tr.pick")[1:]
                                  if " big-" in r.text).click() or True, what="a proxied request's row")
            wait_for(lambda: drv.find_element(By.CSS_SELECTOR, "#request-detail svg.waterfall"), what="waterfall")
            shots.append(shoot(drv, out, "requests"))
            drv.get(f"{base}/console#requests")
            wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, "#requests-table tr.pick")[0].click() or True, what="rows")
            wait_for(lambda: drv.find_element(By.CSS_SELECTOR, "#request-detail pre.prompt"), what="hostile prompt")
            shots.append(shoot(drv, out, "requests-hostile-prompt"))
            drv.get(f"{base}/console#explain")
            wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, "#explain-pick option"), what="pick list")
            drv.find_element(By.ID, "explain-recent").click()
            wait_for(lambda: drv.find_element(By.CSS_SELECTOR, "#explain-out table.explain"), what="explain")
            shots.append(shoot(drv, out, "explain"))
            drv.get(f"{base}/console#cache")
            wait_for(lambda: drv.find_element(By.CSS_SELECTOR, "#tenants-table tr td"), what="tenants")
            shots.append(shoot(drv, out, "cache"))
            drv.get(f"{base}/console#whatif")
            Select(wait_for(lambda: drv.find_element(By.ID, "wi-alias"))).select_by_value("llama-70b")
            Select(drv.find_element(By.ID, "wi-strategy")).select_by_value("round_robin")
            drv.find_element(By.ID, "wi-run").click()
            wait_for(lambda: drv.find_element(By.CSS_SELECTOR, "#whatif-out table.whatif"), timeout=240, what="what-if")
            shots.append(shoot(drv, out, "whatif"))
            drv.find_element(By.ID, "wi-apply").click()
            wait_for(lambda: drv.switch_to.alert, what="the confirmation").accept()
            wait_for(lambda: "applied" in drv.find_element(By.ID, "wi-status").text, what="applied")
            shots.append(shoot(drv, out, "whatif-applied"))
            drv.find_element(By.ID, "wi-rollback").click()
            wait_for(lambda: drv.switch_to.alert, what="the confirmation").accept()
            wait_for(lambda: "rolled back" in drv.find_element(By.ID, "wi-status").text, what="rolled back")
            drv.delete_all_cookies()
            drv.get(f"{base}/console")
            shots.append(shoot(drv, out, "signed-out"))
        finally:
            drv.quit()
            proc.stop()
    for s in shots:
        print(s)


if __name__ == "__main__":
    main()
