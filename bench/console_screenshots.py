"""Photograph every console page as an operator sees it: the demo gateway (config/demo.yaml on free
ports), some traffic, Debian's headless Chromium (scripts/chromium installs it).

    .venv/bin/python bench/console_screenshots.py --out /tmp/console-shots

Writes OUT/fleet.png, requests.png, explain.png, cache.png, whatif.png and prints their paths.
Bounded: 60 requests, one what-if replay of them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.console.browser import chrome, ensure_browser, sign_in, start_demo, traffic, wait_for  # noqa: E402


def shoot(drv, out: Path, name: str) -> Path:
    height = drv.execute_script("return Math.max(document.body.scrollHeight, 900)")
    drv.set_window_size(1400, min(height + 40, 4000))
    time.sleep(0.3)
    png = out / f"{name}.png"
    drv.save_screenshot(str(png))
    drv.set_window_size(1400, 1000)
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
            traffic(base, 60)
            sign_in(drv, base)
            wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, ".card.backend svg.chart circle"), what="fleet charts")
            time.sleep(3.5)  # one live refresh
            shots = [shoot(drv, out, "fleet")]
            drv.get(f"{base}/console#requests")
            wait_for(lambda: drv.find_elements(By.CSS_SELECTOR, "#requests-table tr.pick")[3].click() or True, what="rows")
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
