"""A tiny HTTP proxy in front of the real Placement that can answer the
next requests with a 5xx instead of forwarding them: Placement's
behaviour stays real, the fault is injected on the wire."""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class FaultProxy:
    def __init__(self, target: str) -> None:
        self.target = urlsplit(target)
        self.fail_next = 0
        self.fail_status = 503
        # (body, content type) another server answers with in front of
        # Placement (a load balancer's HTML page, keystonemiddleware's
        # JSON); None: Placement's own JSON error
        self.fail_page: tuple[bytes, str] | None = None
        # paths always answered with fail_status (a policy that forbids)
        self.refuse: set[str] = set()
        self.forwarded = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                with proxy._lock:
                    fail = proxy.fail_next > 0
                    if fail:
                        proxy.fail_next -= 1
                    fail = fail or self.path in proxy.refuse
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if fail:
                    payload = b'{"errors": [{"status": 503, "title": "down"}]}'
                    kind = "application/json"
                    if proxy.fail_page is not None:
                        payload, kind = proxy.fail_page
                    self.send_response(proxy.fail_status)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection(
                    proxy.target.hostname, proxy.target.port, timeout=30
                )
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() != "host"
                }
                conn.request(
                    self.command, self.path, body=body, headers=headers
                )
                response = conn.getresponse()
                data = response.read()
                with proxy._lock:
                    proxy.forwarded += 1
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection"):
                        self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self._thread = threading.Thread(
            target=self.server.serve_forever, daemon=True
        )

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
