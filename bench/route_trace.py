"""Decision by decision: why a run of bench/prefix_routing.py placed each request where it did.

Joins a run's --dump (per request: when sent, which shared prompt, where, TTFT, cached tokens) with its
--trace spans (per request: every candidate's score, the pick's predicted queue and TTFT, the prefix the
router believed it held there) by request id, and prints each request in the order sent, tagged:

  first    the prompt's first cold prefill on any server (unavoidable)
  spill    a cold prefill on a server while another held the prompt (a placement's choice)
  evicted  a cold prefill where this server had held the prompt before (its cache dropped it)

then, per tag and for the warm requests, the median of predicted over measured TTFT: an over-predicted
home is what sends a prompt to the server that must prefill it cold.

    python -m bench.route_trace DUMP.json TRACE_DIR [--workload shared] [--label latency_aware] [--all]

Without --all only the tagged requests and the ones just before each spill on its prompt's home are listed.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

# A request served less than this share of its prompt from the server's cache prefilled it cold.
COLD_SHARE = 0.5


@dataclass
class Decision:
    """One request's route span and answering attempt, as the gateway traced them."""

    scores: dict[str, float]
    # Each ranked candidate's predicted TTFT and believed cached tokens (gateways from 2026-12-07 on).
    ttfts: dict[str, float] = field(default_factory=dict)
    held: dict[str, float] = field(default_factory=dict)
    predicted_queue_s: float | None = None
    predicted_ttft_s: float | None = None
    measured_ttft_s: float | None = None
    believed_tokens: float | None = None
    burst_wait_s: float | None = None


def spans(path: Path) -> list[dict]:
    """The JSON objects a console span exporter wrote to a log, skipping any other line."""
    text, out, at = path.read_text(errors="replace"), [], 0
    decoder = json.JSONDecoder()
    while (at := text.find("{\n", at)) != -1:
        try:
            obj, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            at += 2
            continue
        out.append(obj)
        at = end
    return out


def decisions(paths: list[Path]) -> dict[str, Decision]:
    """Per request id: its last route decision and its answering attempt's predicted and measured figures."""
    by_trace: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for p in paths:
        for s in spans(p):
            by_trace[s["context"]["trace_id"]][s["name"]].append(s)
    out: dict[str, Decision] = {}
    for named in by_trace.values():
        request = next((s for ss in named.values() for s in ss if "slipstream.request_id" in s["attributes"]), None)
        if request is None or not named.get("route"):
            continue
        route = named["route"][-1]["attributes"]
        # A candidate that could not take the request reads "name=full" (at its concurrency limit).
        scores = {k: float(v) if v[:1].isdigit() else math.inf
                  for k, _, v in (c.partition("=") for c in route["slipstream.route.candidates"])}
        d = Decision(scores, _named(route.get("slipstream.route.predicted_ttft_s", ())),
                     _named(route.get("slipstream.route.believed_cached_tokens", ())))
        chosen = route["slipstream.route.chosen"]
        for ss in named.values():
            for s in ss:
                a = s["attributes"]
                if a.get("slipstream.backend") == chosen and "slipstream.predicted.ttft_s" in a:
                    d.predicted_queue_s = a["slipstream.predicted.queue_s"]
                    d.predicted_ttft_s = a["slipstream.predicted.ttft_s"]
                    d.measured_ttft_s = a.get("slipstream.measured.ttft_s")
                    d.believed_tokens = a.get("slipstream.prefix.believed_tokens")
                    d.burst_wait_s = a.get("slipstream.prefix.burst_wait_s")
        out[request["attributes"]["slipstream.request_id"]] = d
    return out


def _named(items) -> dict[str, float]:
    return {k: float(v) for k, _, v in (c.partition("=") for c in items)}


def tag(requests: list[dict]) -> list[str]:
    """Each request's tag (in the order given, which is the order sent): first, spill, evicted or ''."""
    seen: dict[str, set[str]] = defaultdict(set)  # backend -> prompts it prefilled
    held: dict[str, set[str]] = defaultdict(set)  # prompt -> backends that prefilled it
    out = []
    for q in requests:
        cold = (q["cached"] or 0) < (q["prompt"] or 0) * COLD_SHARE
        t = ""
        if cold:
            t = "evicted" if q["key"] in seen[q["backend"]] else "spill" if held[q["key"]] else "first"
        seen[q["backend"]].add(q["key"])
        held[q["key"]].add(q["backend"])
        out.append(t)
    return out


def ratio(d: Decision | None) -> float | None:
    if d is None or not d.predicted_ttft_s or not d.measured_ttft_s:
        return None
    return d.predicted_ttft_s / d.measured_ttft_s


def line(q: dict, t: str, d: Decision | None) -> str:
    scores = " ".join(f"{k}={v:.2f}" + (f" (ttft {d.ttfts[k]:.2f}, held {d.held.get(k, 0):.0f})" if k in d.ttfts else "")
                      for k, v in sorted(d.scores.items())) if d else "?"
    pred = (f"pred q {d.predicted_queue_s:.2f} ttft {d.predicted_ttft_s:.2f}"
            if d and d.predicted_ttft_s is not None and d.predicted_queue_s is not None else "pred ?")
    held = f"believed {d.believed_tokens:.0f}" if d and d.believed_tokens is not None else ""
    burst = f"burst {d.burst_wait_s:.2f}" if d and d.burst_wait_s else ""
    return (f"  {q['sent']:7.2f} {q['key']:>4} -> {q['backend']:<8} {t:<7} ttft {q['ttft']:6.2f}  {pred}  "
            f"cached {q['cached']}/{q['prompt']} {held} {burst}  scores {scores}")


def report(run: dict, found: dict[str, Decision], everything: bool) -> None:
    requests = sorted(run["requests"], key=lambda q: q["sent"])
    tags = tag(requests)
    print(f"== {run['label']} repeat {run['repeat']}: {len(requests)} requests, "
          f"{sum(1 for r in requests if r.get('id') in found)} traced; "
          + ", ".join(f"{k} {tags.count(k)}" for k in ("first", "spill", "evicted")))
    last_on: dict[tuple[str, str], int] = {}  # (backend, prompt) -> index of the last request it served
    homes: dict[str, str] = {}
    for i, (q, t) in enumerate(zip(requests, tags, strict=True)):
        d = found.get(q.get("id") or "")
        if everything or t:
            if t == "spill" and not everything:
                # The prompt's home: where it was last served before this spill, and how that went.
                j = last_on.get((homes.get(q["key"], ""), q["key"]))
                if j is not None:
                    print("   home:" + line(requests[j], tags[j], found.get(requests[j].get("id") or ""))[1:])
            print(line(q, t, d))
        last_on[(q["backend"], q["key"])] = i
        if not t or t == "first":
            homes[q["key"]] = q["backend"]
    for name, picked in (("warm", [i for i, t in enumerate(tags) if not t]),
                         ("cold", [i for i, t in enumerate(tags) if t])):
        rs = [r for i in picked if (r := ratio(found.get(requests[i].get("id") or ""))) is not None]
        if rs:
            print(f"   {name}: predicted/measured TTFT median {statistics.median(rs):.2f}x over {len(rs)} "
                  f"(quartiles {statistics.quantiles(rs, n=4)[0]:.2f}-{statistics.quantiles(rs, n=4)[2]:.2f})"
                  if len(rs) > 1 else f"   {name}: predicted/measured TTFT {rs[0]:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dump")
    ap.add_argument("trace_dir")
    ap.add_argument("--workload", default="shared")
    ap.add_argument("--label", default="latency_aware")
    ap.add_argument("--all", action="store_true", help="every request, not only the tagged ones")
    args = ap.parse_args()
    runs = json.loads(Path(args.dump).read_text())[args.workload]
    for run in runs:
        if run["label"] != args.label:
            continue
        stem = f"{args.workload}-{run['label'].replace(' ', '_')}-r{run['repeat']}"
        report(run, decisions(sorted(Path(args.trace_dir).glob(f"{stem}-*.spans"))), args.all)


if __name__ == "__main__":
    main()
