"""Remote data that cannot escape its prefix, flood the disk or memory, hang, go stale, leak
credentials or lose a live download: against real servers on 127.0.0.1 (a hostile HTTP server,
Python's file server, moto's S3 server)."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

import pytest

import gpupipe
from gpupipe.shards import format as shardfmt
from gpupipe.remote import RemoteError, RemoteMissing, Retry, ShardCache, download, read_small
from gpupipe.remote import urls
from gpupipe.remote.urls import join
from helpers import rewrite_manifest
from hostile_servers import HostileServer
from servers import FolderServer, small_pack

pytest.importorskip("aiohttp")
QUICK = Retry(attempts=2, backoff=0.05, timeout=5, deadline=30)
SECRET = "hunter2"


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return small_pack(tmp_path_factory.mktemp("hardening"), 24, shard_size=16 * 1024)


@pytest.fixture
def hostile():
    server = HostileServer()
    yield server
    server.stop()


def serve_pack(server: HostileServer, packed: Path, prefix: str = "/pack") -> str:
    for path in packed.iterdir():
        if path.is_file():
            server.serve(f"{prefix}/{path.name}", path.read_bytes())
    return server.url + prefix


def first_tar(packed: Path) -> Path:
    return packed / json.loads((packed / shardfmt.MANIFEST).read_text())["shards"][0]["name"]


# -- 1. names that leave the pack, however they are written -----------------------------------

ESCAPES = ["%2e%2e/outside/shard-000000.tar", "%2E%2E/outside/shard-000000.tar", "%252e%252e/outside/x.tar",
           "..%2foutside%2fx.tar", "sub%2f..%2f..%2foutside.tar", "a%5c..%5c..%5coutside.tar", "/outside/x.tar",
           "%2foutside/x.tar", "http://127.0.0.2/x.tar", "//127.0.0.2/x.tar", "x.tar?y=1", "x.tar%3fy=1",
           "C:\\x.tar", "./x.tar", "a//x.tar", "%00x.tar", "~/x.tar"]


@pytest.mark.parametrize("base", ["http://h/pack", "https://user:pw@h:8/a/pack/", "s3://bucket/pack",
                                  "gs://bucket/deep/pack", "/data/pack"])
@pytest.mark.parametrize("name", ESCAPES)
def test_no_encoding_of_a_name_leaves_the_prefix(base, name):
    with pytest.raises(ValueError, match="does not stay inside it") as info:
        join(base, name)
    assert "pw" not in str(info.value)


def test_names_that_stay_inside_are_joined():
    assert join("s3://b/p", "shard-000001.tar") == "s3://b/p/shard-000001.tar"
    assert join("http://h/p/", "sub/shard-r0001-000000.idx") == "http://h/p/sub/shard-r0001-000000.idx"


@pytest.mark.parametrize("name", ["%2e%2e/outside/shard-000000.tar", "%252e%252e/outside/shard-000000.tar"])
def test_a_manifest_naming_a_shard_outside_the_pack_is_refused_over_http(packed, tmp_path, hostile, name):
    url = serve_pack(hostile, packed)
    hostile.serve("/outside/shard-000000.tar", first_tar(packed).read_bytes())
    edited = tmp_path / "edited"
    edited.mkdir()
    for path in packed.iterdir():
        (edited / path.name).write_bytes(path.read_bytes())
    rewrite_manifest(edited, lambda m: m["shards"][0].update(name=name))
    hostile.serve("/pack/manifest.json", (edited / shardfmt.MANIFEST).read_bytes())
    with pytest.raises(ValueError, match=r"pack/manifest.json: shards\[0\].name .* leaves the pack"):
        source = gpupipe.Shards(url, cache_dir=tmp_path / "cache", retry=QUICK)
        source.hold([0]).release()
    assert not [p for _, p, _ in hostile.requests if "outside" in p], "nothing outside the pack was asked for"


def test_a_local_manifest_naming_an_encoded_escape_is_refused(packed, tmp_path):
    edited = tmp_path / "edited"
    edited.mkdir()
    for path in packed.iterdir():
        (edited / path.name).write_bytes(path.read_bytes())
    rewrite_manifest(edited, lambda m: m["shards"][0].update(index="%2e%2e/x.idx"))
    with pytest.raises(ValueError, match=r"manifest.json: shards\[0\].index '%2e%2e/x.idx' leaves the packed folder"):
        gpupipe.Shards(edited)


# -- 2, 4, 5. byte caps and deadlines ---------------------------------------------------------


class DiskWatch:
    """Samples the bytes in a folder every millisecond; ``peak`` is the most seen."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.peak, self.running = folder, 0, True
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while self.running:
            total = 0
            if self.folder.exists():
                for entry in os.scandir(self.folder):
                    try:
                        total += entry.stat().st_size if entry.is_file() else 0
                    except FileNotFoundError:
                        pass
            self.peak = max(self.peak, total)
            time.sleep(0.001)

    def stop(self) -> int:
        self.running = False
        self.thread.join()
        return self.peak


def test_a_shard_larger_than_its_manifest_size_is_never_written_past_it(packed, tmp_path, hostile):
    url = serve_pack(hostile, packed)
    tar = first_tar(packed)
    hostile.oversize(f"/pack/{tar.name}", tar.read_bytes(), extra=48 << 20)
    source = gpupipe.Shards(url, cache_dir=tmp_path / "cache", retry=QUICK)
    indexes = sum(p.stat().st_size for p in (tmp_path / "cache").iterdir())
    watch = DiskWatch(tmp_path / "cache")
    try:
        with pytest.raises(RemoteError, match=rf"{tar.name}: the server sends more than the {tar.stat().st_size:,} bytes"):
            source.hold([0])
    finally:
        peak = watch.stop()
    assert peak <= indexes + tar.stat().st_size + 4096, f"{peak:,} bytes were on disk"
    assert hostile.gets(f"/pack/{tar.name}") == 1, "a server sending too much is not asked again"


@pytest.mark.timeout(120)
def test_an_endless_manifest_without_content_length_fails_at_its_cap(hostile):
    hostile.endless("/pack/manifest.json", chunk=64 << 10, every=0.001)
    with pytest.raises(RemoteError, match="is larger than 1,048,576 bytes"):
        read_small(hostile.url + "/pack/manifest.json", QUICK, max_bytes=1 << 20)


@pytest.mark.timeout(120)
def test_an_endless_manifest_fails_within_the_deadline(hostile, tmp_path):
    hostile.endless("/pack/manifest.json")
    started = time.monotonic()
    with pytest.raises(RemoteError, match=r"manifest.json failed: not done within the deadline of 3 s"):
        gpupipe.Shards(hostile.url + "/pack", cache_dir=tmp_path, retry=Retry(attempts=3, timeout=2, deadline=3))
    assert time.monotonic() - started < 60  # a hang guard, not a speed claim


@pytest.mark.timeout(120)
def test_a_slow_drip_fails_within_the_deadline(hostile, tmp_path):
    hostile.drip("/slow.tar", b"x" * 4096, every=0.3)
    with pytest.raises(RemoteError, match="deadline of 2 s"):
        download(hostile.url + "/slow.tar", str(tmp_path / "slow.tar"), Retry(attempts=1, timeout=2, deadline=2),
                 size=4096)
    assert not (tmp_path / "slow.tar").exists(), "the partial download is removed"


@pytest.mark.timeout(120)
def test_an_index_without_content_length_is_capped_by_the_manifest(packed, tmp_path, hostile):
    url = serve_pack(hostile, packed)
    shard = json.loads((packed / shardfmt.MANIFEST).read_text())["shards"][0]
    hostile.endless(f"/pack/{shard['index']}", chunk=64 << 10, every=0.001)
    cap = 4096 * (shard["samples"] + 1)
    with pytest.raises(RemoteError, match=f"more than the {cap:,} bytes expected"):
        gpupipe.Shards(url, cache_dir=tmp_path / "cache", retry=QUICK)


# -- 6. credentials --------------------------------------------------------------------------


def test_credentials_never_reach_a_message_or_a_log_line(hostile, tmp_path, caplog):
    hostile.status("/pack", 500)
    base = hostile.url.replace("http://", f"http://bob:{SECRET}@")
    url = base + "/pack?X-Amz-Signature=SIGSECRET&X-Amz-Credential=CREDSECRET&sig=S1&token=T1&key=K1&ok=1"
    with caplog.at_level(logging.DEBUG, logger="gpupipe"), pytest.raises(RemoteError) as info:
        download(url, str(tmp_path / "x"), QUICK)
    text = str(info.value) + "\n".join(r.getMessage() for r in caplog.records)
    for secret in (SECRET, "SIGSECRET", "CREDSECRET", "=S1", "=T1", "=K1"):
        assert secret not in text, text
    assert "bob" not in text and "ok=1" in text and caplog.records, "the rest of the URL is kept"
    with pytest.raises(ValueError) as info:
        gpupipe.Shards(base + "/nothing", cache_dir=tmp_path, retry=QUICK)
    assert SECRET not in str(info.value) and "***@" in str(info.value)


def test_redact_covers_signed_urls_and_userinfo():
    text = urls.redact("s3://AKIA:wJalr@b/k https://h/x?X-Goog-Signature=abc&X-Amz-Security-Token=t&a=b#f")
    assert text == "s3://***@b/k https://h/x?X-Goog-Signature=***&X-Amz-Security-Token=***&a=b#f"


def test_a_redirect_to_another_host_forwards_no_credentials(hostile, tmp_path):
    other = HostileServer()
    try:
        other.serve("/x.tar", b"y" * 1000)
        hostile.redirect("/x.tar", other.url + "/x.tar")
        url = hostile.url.replace("http://", f"http://bob:{SECRET}@") + "/x.tar"
        download(url, str(tmp_path / "x.tar"), QUICK, size=1000)
        assert (tmp_path / "x.tar").read_bytes() == b"y" * 1000
        sent = [h for _, _, h in hostile.requests]
        assert any("Authorization" in h for h in sent), "the first host got the credentials"
        assert not any("Authorization" in h for _, _, h in other.requests), "the other host got none"
    finally:
        other.stop()


# -- statuses, Retry-After, drops, jitter ----------------------------------------------------


@pytest.mark.parametrize("code,error,asked", [(403, "access denied", 1), (401, "access denied", 1),
                                               (404, "not found", 1), (500, "failed after 3 attempts", 3),
                                               (503, "failed after 3 attempts", 3)])
def test_statuses_are_retried_or_not_as_they_deserve(hostile, tmp_path, code, error, asked):
    hostile.status("/x.tar", code)
    with pytest.raises(RemoteError, match=error) as info:
        download(hostile.url + "/x.tar", str(tmp_path / "x"), Retry(attempts=3, backoff=0.01, timeout=5))
    assert isinstance(info.value, RemoteMissing) == (code == 404)
    assert hostile.gets("/x.tar") == asked


@pytest.mark.parametrize("retry_after", [None, "1"])
def test_a_503_then_the_file_with_or_without_retry_after(hostile, tmp_path, monkeypatch, retry_after):
    from gpupipe.remote import fetch

    pauses = []
    monkeypatch.setattr(fetch.time, "sleep", pauses.append)
    hostile.status("/x.tar", 503, times=2, retry_after=retry_after, then=b"z" * 100)
    download(hostile.url + "/x.tar", str(tmp_path / "x"), Retry(attempts=3, backoff=0.2, timeout=5), size=100)
    assert (tmp_path / "x").read_bytes() == b"z" * 100
    if retry_after:
        assert pauses == [1.0, 1.0], "the server's Retry-After is kept"
    else:
        assert len(pauses) == 2 and 0 <= pauses[0] <= 0.2 and 0 <= pauses[1] <= 0.4


def test_backoff_is_full_jitter_capped():
    import random

    from gpupipe.remote.fetch import MAX_BACKOFF, _pause

    random.seed(0)
    draws = [_pause(0.5, 3, None, 1e9) for _ in range(500)]
    assert all(0 <= d <= 4.0 for d in draws) and min(draws) < 0.4 and max(draws) > 3.6
    assert _pause(0.5, 30, None, 1e9) <= MAX_BACKOFF and _pause(0.5, 2, 999.0, 5.0) == 5.0


@pytest.mark.parametrize("kwargs", [dict(deadline=0), dict(deadline=float("inf")), dict(attempts=True),
                                    dict(timeout=float("nan"))])
def test_retry_refuses_nonsense(kwargs):
    with pytest.raises(ValueError, match="Retry"):
        Retry(**kwargs)


def test_a_connection_dropped_mid_body_is_retried(hostile, tmp_path):
    hostile.drop("/x.tar", b"q" * 100_000, times=1)
    download(hostile.url + "/x.tar", str(tmp_path / "x"), QUICK, size=100_000)
    assert (tmp_path / "x").read_bytes() == b"q" * 100_000 and hostile.gets("/x.tar") == 2
    hostile.drop("/y.tar", b"q" * 100_000)
    with pytest.raises(RemoteError, match="failed after 2 attempts"):
        download(hostile.url + "/y.tar", str(tmp_path / "y"), QUICK, size=100_000)


def test_a_shard_replaced_on_the_server_is_refused_not_read(packed, tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    for path in packed.iterdir():
        (served / path.name).write_bytes(path.read_bytes())
    server = FolderServer(served)
    try:
        source = gpupipe.Shards(server.url, cache_dir=tmp_path / "cache", retry=QUICK)
        tar = served / first_tar(packed).name
        data = bytearray(tar.read_bytes())
        data[700] ^= 0xFF  # same size, other bytes: replaced mid-epoch
        tar.write_bytes(bytes(data))
        with pytest.raises(RemoteError, match="sha256 differs from the manifest's"):
            source.hold([0])
    finally:
        server.stop()


# -- 7. partial downloads and local errors ---------------------------------------------------


class _ForeignPids:
    """``os`` as seen from another PID namespace: this process's id means nothing there."""

    def __getattr__(self, name):
        return getattr(os, name)

    @staticmethod
    def getpid() -> int:
        return 4_000_000


def test_a_live_partial_download_of_another_container_is_never_removed(hostile, tmp_path, monkeypatch):
    from gpupipe.remote import cache as cache_module

    monkeypatch.setattr(cache_module, "os", _ForeignPids())
    slow, other = b"s" * (64 << 10), b"o" * (64 << 10)
    hostile.drip("/slow.tar", slow, chunk=8 << 10, every=0.15)
    hostile.serve("/other.tar", other)
    first = ShardCache(tmp_path, limit=100 << 10, retry=QUICK)
    result = {}
    thread = threading.Thread(target=lambda: result.update(
        pin=_catch(lambda: first.get(hostile.url + "/slow.tar", size=len(slow)))))
    thread.start()
    while not list(tmp_path.glob("*.part-*")):
        time.sleep(0.01)
    second = ShardCache(tmp_path, limit=100 << 10, retry=QUICK)  # another container, same folder
    second.get(hostile.url + "/other.tar", size=len(other)).release()
    thread.join()
    assert not isinstance(result["pin"], BaseException), result["pin"]
    assert Path(result["pin"].path).read_bytes() == slow
    result["pin"].release()


def _catch(action):
    try:
        return action()
    except BaseException as err:  # noqa: BLE001 -- handed to the test
        return err


def test_a_partial_file_removed_locally_is_not_blamed_on_the_server(hostile, tmp_path):
    data = b"s" * (32 << 10)
    hostile.drip("/slow.tar", data, chunk=4 << 10, every=0.1)
    cache = ShardCache(tmp_path, limit=1 << 20, retry=QUICK)
    result = {}
    thread = threading.Thread(target=lambda: result.update(
        err=_catch(lambda: cache.get(hostile.url + "/slow.tar", size=len(data)))))
    thread.start()
    while not (parts := list(tmp_path.glob("*.part-*"))):
        time.sleep(0.01)
    parts[0].unlink()  # someone removes it by hand
    thread.join()
    assert isinstance(result["err"], RemoteError) and not isinstance(result["err"], RemoteMissing), result["err"]
    assert "removed" in str(result["err"])


def test_a_part_nobody_holds_is_cleaned_up(hostile, tmp_path):
    left = tmp_path / f"{'ab' * 12}-x.tar.part-123-456"  # a name the cache gives (24 hex digits)
    left.write_bytes(b"x" * 1000)
    hostile.serve("/x.tar", b"y" * 10)
    ShardCache(tmp_path, limit=1 << 20, retry=QUICK).get(hostile.url + "/x.tar", size=10).release()
    assert not left.exists()
