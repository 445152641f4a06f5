"""The remote path red-teamed on real servers on 127.0.0.1 (Python's HTTP server, the hostile HTTP
server, moto's S3 server), adding what ``test_remote_hardening.py`` does not already try: two
processes downloading one pack into one cache at once, a cache on a full disk, a shard replaced on
the server (S3, and a pack without checksums), credentials in a header on a redirect, statuses
with Retry-After beyond 503 and on S3, a drop mid-body while reading a manifest. No GCS emulator
runs here: ``gs://`` URLs are tried where no server is needed (names, redaction)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import rewrite_manifest
from hostile_servers import HostileServer
from servers import FolderServer, s3, small_pack  # noqa: F401 -- s3: a fixture

import gpupipe
from gpupipe.remote import RemoteError, RemoteMissing, Retry, download, read_small, remote_info
from gpupipe.remote.fetch import CacheError
from gpupipe.remote.urls import join, redact
from gpupipe.shards import format as shardfmt

pytest.importorskip("aiohttp")
QUICK = Retry(attempts=2, backoff=0.05, timeout=5, deadline=60)
TESTS = str(Path(__file__).parent)

#: Run in a subprocess: every sample of the pack at argv[1] read through the cache at argv[2], printed
#: as JSON ``{"ids": [...], "labels": [...]}`` (or ``{"error": type, "message": ..., "internal": ...}``
#: for a gpupipe error: ``internal`` says whether a cause from inside the library is chained to it).
READER = textwrap.dedent(f"""
    import json, resource, signal, sys
    sys.path.insert(0, {TESTS!r})
    import gpupipe
    from gpupipe.remote import Retry
    from helpers import read_ids_and_labels
    if len(sys.argv) > 3:  # a disk that takes no more than argv[3] bytes per file
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[3]), int(sys.argv[3])))
    try:
        src = gpupipe.Shards(sys.argv[1], cache_dir=sys.argv[2],
                             retry=Retry(attempts=2, backoff=0.05, timeout=5, deadline=60))
        print(json.dumps(read_ids_and_labels(src)))
    except gpupipe.Error as err:
        internal = err.__cause__ is not None or (err.__context__ is not None and not err.__suppress_context__)
        print(json.dumps({{"error": type(err).__name__, "message": str(err), "internal": internal}}))
""")


def reader(tmp_path: Path, url: str, cache: Path, fsize: int | None = None) -> subprocess.Popen:
    script = tmp_path / "reader.py"
    script.write_text(READER)
    args = [sys.executable, str(script), url, str(cache)] + ([str(fsize)] if fsize else [])
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})


def result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, out[-2000:] + err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def leftovers(cache: Path) -> list:
    return sorted(p.name for p in cache.iterdir() if ".part-" in p.name or ".ok." in p.name)


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return small_pack(tmp_path_factory.mktemp("redteam"), 48, shard_size=24 * 1024)


@pytest.fixture(scope="module")
def local(packed):
    """``{"ids", "labels"}`` of the local pack, in order."""
    from helpers import read_ids_and_labels

    return read_ids_and_labels(packed)


@pytest.fixture
def hostile():
    server = HostileServer()
    yield server
    server.stop()


def tars(packed: Path) -> list:
    return [s["name"] for s in json.loads((packed / shardfmt.MANIFEST).read_text())["shards"]]


# -- (a) two processes, one cache folder, one pack, at once ---------------------------------


@pytest.mark.slow
def test_two_processes_sharing_one_cache_download_one_pack_at_once(packed, local, tmp_path):
    server = FolderServer(packed, rate=200_000)  # slow enough that the two downloads overlap
    try:
        cache = tmp_path / "cache"
        procs = [reader(tmp_path, server.url, cache) for _ in range(2)]
        got = [result(p) for p in procs]
        assert got == [local, local] and sorted(local["ids"]) == list(range(48))
        assert leftovers(cache) == [], "no partial file left"
        assert set(server.tar_gets()) == {f"/{n}" for n in tars(packed)}
        assert set(server.tar_gets().values()) == {1}, f"each shard fetched once per node: {server.tar_gets()}"
    finally:
        server.stop()


# -- (b) a cache on a full disk ---------------------------------------------------------------


@pytest.mark.slow
def test_a_cache_on_a_full_disk_fails_clearly_and_leaves_nothing_trusted(packed, local, tmp_path):
    server = FolderServer(packed)
    try:
        cache = tmp_path / "cache"
        full = result(reader(tmp_path, server.url, cache, fsize=4096))  # every shard is larger
        assert full.get("error") == "CacheError", full
        assert str(cache) in full["message"] and "this machine" in full["message"], full
        assert not full["internal"], "no chained traceback from inside the library"
        assert leftovers(cache) == [], "no partial download left"
        assert not any(p.name.endswith(".tar") for p in cache.iterdir()), "no truncated shard under its name"
        assert result(reader(tmp_path, server.url, cache)) == local, "a later run with room reads the right samples"
    finally:
        server.stop()


def test_a_download_that_cannot_be_written_is_a_cache_error_naming_the_file(hostile, tmp_path):
    hostile.serve("/x.tar", b"x" * 1000)
    dst = tmp_path / "no-such-folder" / "x.tar"
    with pytest.raises(CacheError, match="no-such-folder") as info:
        download(hostile.url + "/x.tar", str(dst), QUICK, size=1000)
    assert isinstance(info.value, RemoteError) and not isinstance(info.value, RemoteMissing)
    assert info.value.__cause__ is None and hostile.gets("/x.tar") == 0, "the disk's fault: not retried"


# -- (c) a shard replaced on the server ------------------------------------------------------


def test_a_shard_replaced_on_s3_with_the_same_size_is_refused(packed, s3, tmp_path):  # noqa: F811
    url = s3.upload(packed, "redteam", "pack")
    source = gpupipe.Shards(url, cache_dir=tmp_path / "cache", retry=QUICK)
    name = tars(packed)[0]
    data = bytearray((packed / name).read_bytes())
    data[700] ^= 0xFF  # same size, other bytes
    import fsspec

    fsspec.filesystem("s3", skip_instance_cache=True).pipe_file(f"redteam/pack/{name}", bytes(data))
    with pytest.raises(RemoteError, match="sha256 differs from the manifest's"):
        source.hold([0])
    assert leftovers(tmp_path / "cache") == []


def test_without_checksums_a_replaced_shard_is_fetched_again_not_served_stale(packed, tmp_path, hostile):
    """A pack whose manifest has no sha256: the cache is keyed by the server's version (ETag), so the
    cached copy of a replaced shard is not trusted: the new bytes are read, as a fresh cache would."""
    served = tmp_path / "served"
    served.mkdir()
    for path in packed.iterdir():
        (served / path.name).write_bytes(path.read_bytes())
    rewrite_manifest(served, lambda m: [s.pop("sha256", None) for s in m["shards"]])
    for path in served.iterdir():
        hostile.serve(f"/pack/{path.name}", path.read_bytes())
    url = hostile.url + "/pack"
    name = tars(served)[0]
    first = gpupipe.Shards(url, cache_dir=tmp_path / "cache", retry=QUICK)
    first.hold([0]).release()
    cached = first.store.cache.path(f"{url}/{name}")
    assert Path(cached).read_bytes() == (served / name).read_bytes()
    data = bytearray((served / name).read_bytes())
    data[-1100] ^= 0xFF  # same size, other bytes, a new ETag
    hostile.serve(f"/pack/{name}", bytes(data))
    again = gpupipe.Shards(url, cache_dir=tmp_path / "cache", retry=QUICK)
    again.hold([0]).release()
    assert Path(again.store.cache.path(f"{url}/{name}")).read_bytes() == bytes(data), "the new bytes, not the stale"
    assert hostile.gets(f"/pack/{name}") == 2


# -- (d) credentials in headers, and redirects to another host --------------------------------


def test_headers_in_storage_options_reach_the_server_on_a_streamed_download(hostile, tmp_path):
    """fsspec's streamed HTTP file drops the file system's request options: a token given as a header
    was never sent (a 401/403 from a server that needs it)."""
    hostile.serve("/x.tar", b"y" * 1000)
    options = {"headers": {"Authorization": "Bearer TOKEN123"}}
    download(hostile.url + "/x.tar", str(tmp_path / "x.tar"), QUICK, size=1000, storage_options=options)
    assert read_small(hostile.url + "/x.tar", QUICK, options) == b"y" * 1000
    assert remote_info(hostile.url + "/x.tar", QUICK, options)["size"] == 1000
    assert [(m, h.get("Authorization")) for m, _, h in hostile.requests] == [
        ("GET", "Bearer TOKEN123"), ("GET", "Bearer TOKEN123"), ("HEAD", "Bearer TOKEN123")]


def test_a_redirect_to_another_host_forwards_no_authorization_header(hostile, tmp_path):
    other = HostileServer()
    try:
        other.serve("/x.tar", b"y" * 1000)
        hostile.redirect("/x.tar", other.url + "/x.tar")
        options = {"headers": {"Authorization": "Bearer TOKEN123", "X-Keep": "1"}}
        download(hostile.url + "/x.tar", str(tmp_path / "x.tar"), QUICK, size=1000, storage_options=options)
        assert (tmp_path / "x.tar").read_bytes() == b"y" * 1000
        assert any(h.get("Authorization") == "Bearer TOKEN123" for _, _, h in hostile.requests)
        assert other.requests and not any("Authorization" in h for _, _, h in other.requests)
    finally:
        other.stop()


# -- (e) statuses, Retry-After and drops not tried elsewhere ---------------------------------


@pytest.mark.parametrize("code", [429, 500, 502])
def test_a_retry_after_is_kept_on_every_retried_status(hostile, tmp_path, monkeypatch, code):
    from gpupipe.remote import fetch

    pauses = []
    monkeypatch.setattr(fetch.time, "sleep", pauses.append)
    hostile.status("/x.tar", code, times=1, retry_after="2", then=b"z" * 100)
    download(hostile.url + "/x.tar", str(tmp_path / "x"), Retry(attempts=3, backoff=0.2, timeout=5), size=100)
    assert (tmp_path / "x").read_bytes() == b"z" * 100 and pauses == [2.0]


@pytest.mark.parametrize("code", [403, 404])
def test_a_retry_after_does_not_make_a_refusal_retried(hostile, tmp_path, code):
    hostile.status("/x.tar", code, retry_after="1")
    with pytest.raises(RemoteError, match="access denied" if code == 403 else "not found"):
        download(hostile.url + "/x.tar", str(tmp_path / "x"), Retry(attempts=3, backoff=0.01, timeout=5))
    assert hostile.gets("/x.tar") == 1 and not (tmp_path / "x").exists()


def test_a_manifest_dropped_mid_body_is_read_again_whole(hostile):
    data = json.dumps({"pad": "m" * 50_000}).encode()
    hostile.drop("/manifest.json", data, times=1)
    assert read_small(hostile.url + "/manifest.json", QUICK) == data and hostile.gets("/manifest.json") == 2


def test_a_shard_missing_on_s3_is_named_and_not_retried(packed, s3, tmp_path):  # noqa: F811
    url = s3.upload(packed, "redteam", "gone")
    source = gpupipe.Shards(url, cache_dir=tmp_path / "cache", retry=Retry(attempts=3, backoff=0.01, timeout=5))
    import fsspec

    fsspec.filesystem("s3", skip_instance_cache=True).rm_file(f"redteam/gone/{tars(packed)[0]}")
    with pytest.raises(RemoteMissing, match=f"{url}/{tars(packed)[0]}"):
        source.hold([0])


# -- (f) gs:// without a server: names and redaction -----------------------------------------


@pytest.mark.parametrize("name", ["%2e%2e/other-pack/shard-000000.tar", "..%2f..%2fx.tar", "gs://evil/x.tar"])
def test_gs_names_outside_the_pack_are_refused_and_the_url_redacted(name):
    base = "gs://bucket/pack?X-Goog-Signature=SIGSECRET&X-Goog-Credential=CREDSECRET"
    with pytest.raises(ValueError, match="does not stay inside it") as info:
        join(base, name)
    assert "SIGSECRET" not in str(info.value) and "CREDSECRET" not in str(info.value)
    assert join("gs://bucket/pack", "shard-000001.tar") == "gs://bucket/pack/shard-000001.tar"
    assert redact("gs://bucket/a.tar?X-Goog-Signature=S&alt=media") == "gs://bucket/a.tar?X-Goog-Signature=***&alt=media"


# -- more: a downloader killed, redirect loops, compressed bombs --------------------------------


def test_a_downloader_killed_mid_download_leaves_nothing_that_blocks_or_is_trusted(hostile, tmp_path):
    """A process killed (SIGKILL) while it downloads into the shared cache: its lock dies with it, the
    next process fetches the file whole and its partial file is removed."""
    data = bytes(range(256)) * 256
    hostile.drip("/slow.tar", data, chunk=4 << 10, every=0.2)
    script = tmp_path / "get.py"
    script.write_text(textwrap.dedent(f"""
        from gpupipe.remote import Retry, ShardCache
        ShardCache({str(tmp_path / 'cache')!r}, limit=1 << 20, retry=Retry(attempts=1, timeout=5)).get(
            {hostile.url + '/slow.tar'!r}, size={len(data)})
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(3000):
            if (tmp_path / "cache").is_dir() and any(".part-" in p.name for p in (tmp_path / "cache").iterdir()):
                break
            assert proc.poll() is None
            time.sleep(0.01)
    finally:
        proc.kill()
        proc.wait()
    assert leftovers(tmp_path / "cache"), "the killed process left its partial file"
    hostile.serve("/slow.tar", data)
    from gpupipe.remote import ShardCache

    pin = ShardCache(tmp_path / "cache", limit=1 << 20, retry=QUICK).get(hostile.url + "/slow.tar", size=len(data))
    try:
        assert Path(pin.path).read_bytes() == data and leftovers(tmp_path / "cache") == []
    finally:
        pin.release()


def test_a_redirect_loop_is_a_named_error_not_a_hang(hostile, tmp_path):
    hostile.redirect("/x.tar", hostile.url + "/x.tar")
    with pytest.raises(RemoteError, match="x.tar"):
        download(hostile.url + "/x.tar", str(tmp_path / "x"), QUICK, size=10)
    assert not (tmp_path / "x").exists()


def test_a_compressed_body_is_capped_after_decompression(hostile, tmp_path):
    """A 10 KB gzip body that inflates to 64 MB (``Content-Encoding: gzip``): the cap counts the
    inflated bytes, so neither memory nor the disk takes more than the cap."""
    import gzip

    bomb = gzip.compress(b"\0" * (64 << 20))

    def route(h, head):
        h.send_response(200)
        h.send_header("Content-Encoding", "gzip")
        h.send_header("Content-Length", str(len(bomb)))
        h.end_headers()
        if not head:
            h.wfile.write(bomb)

    hostile.routes["/manifest.json"] = route
    hostile.routes["/x.tar"] = route
    with pytest.raises(RemoteError, match="larger than 1,048,576 bytes"):
        read_small(hostile.url + "/manifest.json", QUICK, max_bytes=1 << 20)
    with pytest.raises(RemoteError, match="more than the 4,096 bytes expected"):
        download(hostile.url + "/x.tar", str(tmp_path / "x"), QUICK, size=4096)
    assert not (tmp_path / "x").exists()


def test_a_webdataset_index_that_cannot_be_kept_is_warned_about_and_not_left_half_written(tmp_path):
    """The kept WebDataset index on a full disk (``RLIMIT_FSIZE`` of 100 bytes in a subprocess): the tar
    is read all the same, with a warning naming the index; no half-written file is left behind."""
    import io
    import tarfile

    from PIL import Image

    with tarfile.open(tmp_path / "data.tar", "w") as tar:
        for i in range(6):
            png = io.BytesIO()
            Image.new("RGB", (8, 8), (i, i, i)).save(png, "PNG")
            for name, data in ((f"{i:04d}.png", png.getvalue()), (f"{i:04d}.cls", str(i % 3).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    script = tmp_path / "wds.py"
    script.write_text(textwrap.dedent(f"""
        import json, logging, resource, signal
        logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))
        import gpupipe
        src = gpupipe.WebDataset({str(tmp_path / 'data.tar')!r}, cache_dir={str(tmp_path / 'cache')!r})
        print(json.dumps(src.labels.tolist()))
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [0, 1, 2, 0, 1, 2]
    assert "could not keep the WebDataset index" in proc.stderr and str(tmp_path / "cache") in proc.stderr
    assert [p.name for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []


@pytest.mark.parametrize("kind", ["pack", "webdataset"])
def test_a_cache_dir_that_is_a_file_is_a_named_error(packed, tmp_path, kind):
    (tmp_path / "a-file").write_text("x")
    server = FolderServer(packed)
    try:
        for bad in (tmp_path / "a-file", tmp_path / "a-file" / "sub"):
            with pytest.raises(CacheError, match="cache_dir") as info:
                if kind == "pack":
                    gpupipe.Shards(server.url, cache_dir=bad, retry=QUICK)
                else:
                    gpupipe.WebDataset(f"{server.url}/{tars(packed)[0]}", cache_dir=bad, retry=QUICK)
            assert str(bad) in str(info.value) and info.value.__cause__ is None
    finally:
        server.stop()
