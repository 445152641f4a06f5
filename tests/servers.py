"""Real servers on 127.0.0.1 for the remote-data tests: Python's HTTP server over a folder (with a
request log and switchable faults) and moto's S3 server, with the fixtures and the small pack the
remote tests share (import them: ``from servers import s3``)."""

from __future__ import annotations

import functools
import logging
import os
import shutil
import socket
import threading
import time
from collections import Counter
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest


class FolderServer:
    """Serves ``root`` over HTTP on 127.0.0.1; counts GETs per path; can corrupt a file's next responses.

    Attributes:
        gets: ``Counter`` of request paths (``/name``).
        corrupt: paths whose next response has one byte flipped (each entry is used once).
        unavailable: ``Counter`` of paths whose next GETs are answered 503 with ``Retry-After: 1`` (as many
            as its count; HEADs too, uncounted).
        url: the server's base URL.

    Args:
        root: the folder served.
        rate: bytes per second per connection (``None``: as fast as the loopback goes); the
            benchmarks use it to stand in for a network link.
    """

    def __init__(self, root: Path, rate: float | None = None) -> None:
        self.gets: Counter = Counter()
        self.corrupt: set[str] = set()
        self.unavailable: Counter = Counter()
        self.lock = threading.Lock()
        server = self

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def copyfile(self, source, outputfile) -> None:
                if rate is None:
                    return shutil.copyfileobj(source, outputfile)
                started, sent = time.monotonic(), 0
                while chunk := source.read(64 * 1024):
                    outputfile.write(chunk)
                    sent += len(chunk)
                    time.sleep(max(0.0, started + sent / rate - time.monotonic()))

            def busy(self, count: bool) -> bool:
                """Answers 503 while ``unavailable`` holds the path."""
                with server.lock:
                    if server.unavailable[self.path] <= 0:
                        return False
                    server.unavailable[self.path] -= count
                self.send_response(503)
                self.send_header("Retry-After", "1")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return True

            def do_HEAD(self) -> None:
                if not self.busy(False):
                    super().do_HEAD()

            def do_GET(self) -> None:
                with server.lock:
                    server.gets[self.path] += 1
                if self.busy(True):
                    return
                with server.lock:
                    flip = self.path in server.corrupt
                    server.corrupt.discard(self.path)
                if not flip:
                    return super().do_GET()
                data = bytearray((Path(self.directory) / self.path.lstrip("/")).read_bytes())
                data[len(data) // 2] ^= 0xFF
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(bytes(data))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Stops serving: new connections are refused at once, also where a forked process (a DataLoader
        worker) holds a copy of the listening socket (closing only this process's copy left the port
        accepting connections that no one answered: each request then waited for its timeout)."""
        self.httpd.shutdown()
        try:
            self.httpd.socket.shutdown(socket.SHUT_RDWR)  # acts on the socket itself, in every process
        except OSError:
            pass  # not connected or already shut: nothing is listening
        self.httpd.server_close()

    def tar_gets(self) -> Counter:
        return Counter({p: n for p, n in self.gets.items() if p.endswith(".tar")})


class S3Server:
    """moto's S3 server on 127.0.0.1, with the environment set for botocore (``AWS_ENDPOINT_URL``)."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
        _forget_s3_file_systems()  # fsspec keeps S3 file systems per process: none may point at an old server

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self.env = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
        }
        self.saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)

    def upload(self, folder: Path, bucket: str, prefix: str) -> str:
        """Copies ``folder`` (flat) to ``s3://bucket/prefix``; returns that URL."""
        import fsspec

        fs = fsspec.filesystem("s3", skip_instance_cache=True)
        if not fs.exists(bucket):
            fs.mkdir(bucket)
        for path in sorted(Path(folder).iterdir()):
            if path.is_file() and not path.name.startswith("."):
                fs.put_file(str(path), f"{bucket}/{prefix}/{path.name}")
        return f"s3://{bucket}/{prefix}"

    def stop(self) -> None:
        self.server.stop()
        _forget_s3_file_systems()
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _forget_s3_file_systems() -> None:
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server for a test module (skipped without ``s3fs`` and ``moto``)."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    server = S3Server()
    yield server
    server.stop()


def stall(hostile, path: str, data: bytes, *, seconds: float, head: bool = False) -> None:
    """A route of ``hostile`` (a ``hostile_servers.HostileServer``) that sends nothing for ``seconds``
    before its status line: on GETs (``head=False``; HEADs answer at once) or on every request."""
    from hostile_servers import _etag, _headers

    def route(h, is_head):
        if head or not is_head:
            time.sleep(seconds)
        _headers(h, 200, len(data), _etag(data))
        if not is_head:
            h.wfile.write(data)

    hostile.routes[path] = route


def small_pack(root: Path, images: int, shard_size: int, size=(24, 32)) -> Path:
    """A packed folder ``root/packed`` of ``images`` flat PNGs in 3 classes (``helpers.flat_folder``)."""
    from helpers import flat_folder

    from gpupipe.pack import PackSettings, pack

    pack(
        flat_folder(root / "images", images, classes=3, size=size),
        root / "packed",
        PackSettings(shard_size=shard_size),
        workers=1,
        progress=False,
    )
    return root / "packed"
