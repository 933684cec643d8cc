"""A stack started with `nrt up` as a subprocess, and the processes below it (from /proc)."""

from __future__ import annotations

import http.server
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from nrt.entrypoints.stack import keys_file
from nrt.entrypoints.stack.endpoints import Endpoints
from nrt.testing.processes import alive, descendants
from nrt.testing.stacks import tiny_manifest

__all__ = ["STACK_ENV", "OtlpReceiver", "Stack", "alive", "descendants", "tiny_manifest"]

# where a stack's servers and gateway are; a stack started by `nrt up` is found without them
STACK_ENV = ("NRT_NATS_URL", "NRT_DATABASE_URL", "NRT_GATEWAY_URL")


@dataclass
class Stack:
    process: subprocess.Popen[bytes]
    endpoints: Endpoints
    data_dir: Path
    log: Path

    @property
    def url(self) -> str:
        return self.endpoints.gateway_url

    @property
    def keys(self) -> keys_file.StackKeys:
        """The API keys `nrt up` runs the stack with (from the keys file it writes)."""
        keys = keys_file.read(self.data_dir)
        assert keys is not None, f"nrt up wrote no keys file in {self.data_dir}"
        return keys

    def headers(self, admin: bool = False) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys.admin_key if admin else self.keys.api_key}"}


class OtlpReceiver:
    """Accepts OTLP/HTTP protobuf trace exports (``POST /v1/traces``) and keeps their spans."""

    def __init__(self) -> None:
        spans: list[tuple[str, Span]] = []  # (service.name, span)
        self.spans = spans

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest.FromString(body)
                for resource_spans in request.resource_spans:
                    attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                    for scope_spans in resource_spans.scope_spans:
                        spans.extend((attributes.get("service.name", ""), span) for span in scope_spans.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()
                self.wfile.write(ExportTraceServiceResponse().SerializeToString())

            def log_message(self, *_: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
