"""A real OTLP/HTTP trace receiver (tests, benchmarks): decodes protobuf exports, serves them back as JSON.

    python bench/otlp_receiver.py PORT
POST /v1/traces (application/x-protobuf) stores spans; GET /spans returns them; GET /healthz.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

SPANS: list[dict] = []
LOCK = threading.Lock()


def _value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        with LOCK:
            for rs in req.resource_spans:
                resource = {a.key: _value(a.value) for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        SPANS.append({
                            "name": s.name, "kind": s.kind, "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                            "parent_span_id": s.parent_span_id.hex(), "start": s.start_time_unix_nano, "end": s.end_time_unix_nano,
                            "attributes": {a.key: _value(a.value) for a in s.attributes},
                            "events": [e.name for e in s.events], "resource": resource,
                        })
        out = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_GET(self):
        with LOCK:
            data = json.dumps(SPANS if self.path == "/spans" else {"status": "ok"}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
