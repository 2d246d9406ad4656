"""The console's what-if, run in its own process: replay one workload through each policy file with
app.tools.whatif and write the comparison as JSON.

    python -m app.tools.whatif_job WORKLOAD.jsonl OUT.json POLICY.yaml [POLICY.yaml ...]
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import orjson

from app.tools.whatif import compare, read_workload, replay


def main(argv: list[str]) -> int:
    workload_path, out, *policies = argv
    workload = read_workload(workload_path)

    async def run():
        return [await replay(p, workload) for p in policies]

    runs = asyncio.run(run())
    result = compare(runs)
    columns = ["policy", "requests", "errors", "ttft_p50_ms", "ttft_p99_ms", "e2e_p50_ms", "e2e_p95_ms", "e2e_p99_ms"]
    rows = [dict(zip(columns, row)) for row in result.rows]
    Path(out).write_bytes(orjson.dumps({"rows": rows, "series": result.series, "requests": len(workload),
                                        "source": "measured by the replaying client, against simulated backends"}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
