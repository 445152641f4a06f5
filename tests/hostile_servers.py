"""An HTTP server on 127.0.0.1 that misbehaves on purpose, route by route: bodies larger than said,
endless or dripping bodies, no Content-Length, redirects to another host, error statuses with and
without Retry-After, connections dropped mid-body, files replaced. Every request is logged (method,
path, headers) so tests can say what the client asked and sent."""

from __future__ import annotations

import hashlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, List, Optional, Tuple


class HostileServer:
    """Routes are set per path (``/name``); a path with no route is a 404.

    Attributes:
        url: the base URL.
        requests: ``(method, path, headers)`` of every request, in order.
    """

    def __init__(self) -> None:
        self.routes: Dict[str, Callable] = {}
        self.requests: List[Tuple[str, str, Dict[str, str]]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one response per connection: a body may end with the connection

            def log_message(self, *args) -> None:
                pass

            def handle_any(self, head: bool) -> None:
                path = self.path.split("?", 1)[0]
                with server.lock:
                    server.requests.append((self.command, self.path, dict(self.headers)))
                    route = server.routes.get(path)
                try:
                    if route is None:
                        self.send_error(404)
                    else:
                        route(self, head)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went away (it had enough)

            def do_GET(self) -> None:
                self.handle_any(False)

            def do_HEAD(self) -> None:
                self.handle_any(True)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def gets(self, path: str) -> int:
        """GET requests made for ``path``."""
        with self.lock:
            return sum(1 for m, p, _ in self.requests if m == "GET" and p.split("?", 1)[0] == path)

    # -- routes -------------------------------------------------------------------------

    def serve(self, path: str, data: bytes, *, etag: bool = True) -> None:
        """A well-behaved file (with an ETag of its content)."""

        def route(h, head):
            _headers(h, 200, len(data), _etag(data) if etag else None)
            if not head:
                h.wfile.write(data)

        self.routes[path] = route

    def oversize(self, path: str, data: bytes, extra: int) -> None:
        """``data`` followed by ``extra`` more bytes, all announced in Content-Length."""

        def route(h, head):
            _headers(h, 200, len(data) + extra, _etag(data))
            if not head:
                h.wfile.write(data)
                _junk(h, extra)

        self.routes[path] = route

    def endless(self, path: str, *, chunk: int = 16 << 10, every: float = 0.01) -> None:
        """A body without Content-Length that never ends (``chunk`` bytes every ``every`` seconds)."""

        def route(h, head):
            _headers(h, 200, None, None)
            while not head:
                h.wfile.write(b"x" * chunk)
                time.sleep(every)

        self.routes[path] = route

    def drip(self, path: str, data: bytes, *, chunk: int = 1, every: float = 0.2) -> None:
        """``data`` (Content-Length true), ``chunk`` bytes every ``every`` seconds."""

        def route(h, head):
            _headers(h, 200, len(data), _etag(data))
            for start in range(0, 0 if head else len(data), chunk):
                h.wfile.write(data[start : start + chunk])
                h.wfile.flush()
                time.sleep(every)

        self.routes[path] = route

    def no_length(self, path: str, data: bytes) -> None:
        """``data`` without Content-Length (the body ends with the connection)."""

        def route(h, head):
            _headers(h, 200, None, None)
            if not head:
                h.wfile.write(data)

        self.routes[path] = route

    def redirect(self, path: str, location: str) -> None:
        def route(h, head):
            h.send_response(302)
            h.send_header("Location", location)
            h.send_header("Content-Length", "0")
            h.end_headers()

        self.routes[path] = route

    def status(
        self, path: str, code: int, *, times: int = 1 << 30, retry_after: Optional[str] = None, then: bytes = b""
    ) -> None:
        """``code`` for the first ``times`` GETs (HEADs too), then ``then`` served well."""
        left = [times]

        def route(h, head):
            with self.lock:
                fail = left[0] > 0
                if fail and not head:
                    left[0] -= 1
            if fail:
                h.send_response(code)
                if retry_after is not None:
                    h.send_header("Retry-After", retry_after)
                h.send_header("Content-Length", "0")
                h.end_headers()
                return
            _headers(h, 200, len(then), _etag(then))
            if not head:
                h.wfile.write(then)

        self.routes[path] = route

    def drop(self, path: str, data: bytes, *, times: int = 1 << 30) -> None:
        """The first ``times`` GETs send half of ``data`` (Content-Length: all of it) and close."""
        left = [times]

        def route(h, head):
            _headers(h, 200, len(data), _etag(data))
            if head:
                return
            with self.lock:
                cut = left[0] > 0
                left[0] -= 1
            h.wfile.write(data[: len(data) // 2] if cut else data)

        self.routes[path] = route


def _etag(data: bytes) -> str:
    return '"' + hashlib.sha256(data).hexdigest()[:16] + '"'


def _headers(h, code: int, length: Optional[int], etag: Optional[str]) -> None:
    h.send_response(code)
    if length is not None:
        h.send_header("Content-Length", str(length))
    if etag:
        h.send_header("ETag", etag)
    h.end_headers()


def _junk(h, size: int) -> None:
    block = b"\0" * (1 << 16)
    while size > 0:
        h.wfile.write(block[: min(size, len(block))])
        size -= len(block)
