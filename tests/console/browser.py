"""The console's test bench: the demo gateway (config/demo.yaml on free ports) in a child process,
some traffic through it, and Debian's headless Chromium driven over WebDriver (selenium with the
system chromedriver; no browser is downloaded). bench/console_screenshots.py uses the same pieces."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import yaml

from tests.support import ROOT, Process, free_port

ADMIN_KEY = "demo-admin"  # config/demo.yaml's admin key
HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script> & "quotes"'


TRACE_URL = "http://127.0.0.1:16686/trace/{trace_id}"  # Jaeger's trace page: the console links ids there


def demo_config(tmp: Path, capture_content: bool = True, traced: bool = False) -> tuple[Path, int]:
    """config/demo.yaml as shipped, on free ports (so tests run beside a real demo), in `tmp`."""
    data = yaml.safe_load((ROOT / "config/demo.yaml").read_text())
    port = free_port()
    data["server"]["port"] = port
    for name, sim in data["simulator"]["backends"].items():
        sim["port"] = free_port()
        data["backends"][name]["base_url"] = f"http://127.0.0.1:{sim['port']}/v1"
    tracing = data.setdefault("telemetry", {}).setdefault("tracing", {})
    if capture_content:
        tracing["capture_content"] = True
    if traced:
        # Spans written to the gateway's own log (no collector to run): every request gets a trace id.
        tracing.update(enabled=True, exporter="console", sample_ratio=1.0, trace_url=TRACE_URL)
    path = tmp / "gateway.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, port


def start_demo(tmp: Path, capture_content: bool = True, traced: bool = False) -> tuple[Process, str, Path]:
    path, port = demo_config(tmp, capture_content, traced)
    proc = Process(["serve", "--config", str(path)], tmp / "gateway.log")
    proc.wait_listening(port)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the simulated fleet starts beside the gateway
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return proc, base, path


def traffic(base: str, n: int = 24, hostile: bool = True) -> None:
    """A mix of JSON and streamed calls on both chat aliases (one with markup and script in its prompt, the
    last), and some embeddings."""
    with httpx.Client(timeout=30) as client:
        for i in range(n):
            content = HOSTILE if hostile and i == n - 1 else f"question {i % 7}: " + "tell me about gateways " * (1 + i % 5)
            body = {"model": "llama-70b" if i % 4 else "llama-8b", "max_tokens": 8 + i % 12, "stream": i % 2 == 0,
                    "messages": [{"role": "user", "content": content}]}
            if i % 3 == 0 and not (hostile and i == n - 1):
                # Deterministic, the same each time, room to finish (a cut answer is not stored): cache hits.
                body.update(temperature=0, model="llama-70b", max_tokens=300, messages=[{"role": "user", "content": "What is a gateway?"}])
            r = client.post(f"{base}/v1/chat/completions", json=body, headers={"authorization": "Bearer any"})
            assert r.status_code == 200, r.text
            if i % 8 == 4:  # another API in the ring, and data on the embedding backend's card
                r = client.post(f"{base}/v1/embeddings", json={"model": "embed", "input": f"gateways {i}"},
                                headers={"authorization": "Bearer any"})
                assert r.status_code == 200, r.text


def browser_paths() -> tuple[str | None, str | None]:
    return shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")


def ensure_browser() -> tuple[str, str] | str:
    """The browser and driver paths, installing them with scripts/chromium if missing; else why not."""
    browser, driver = browser_paths()
    if browser and driver:
        return browser, driver
    run = subprocess.run([str(ROOT / "scripts/chromium")], check=False, capture_output=True, text=True, timeout=900)
    browser, driver = browser_paths()
    if browser and driver:
        return browser, driver
    return f"Chromium could not be installed (scripts/chromium: {run.stderr.strip()[-300:]})"


def chrome(browser: str, driver: str, width: int = 1400, height: int = 1000):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", f"--window-size={width},{height}",
                "--hide-scrollbars"):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(driver, env={**os.environ}), options=opts)


def sign_in(drv, base: str, key: str = ADMIN_KEY) -> None:
    from selenium.webdriver.common.by import By

    drv.get(f"{base}/console")
    drv.find_element(By.ID, "key").send_keys(key)
    drv.find_element(By.CSS_SELECTOR, "#login button").click()


def wait_for(fn, timeout: float = 60.0, what: str = "condition"):
    """Poll `fn` until it returns something true. Generous by default: six engineers' tests share two
    cores here, and a page that redraws every 3 s may need a few rounds (never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            value = fn()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - an element not there yet; try again
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}" + (f" (last error: {last})" if last else ""))
