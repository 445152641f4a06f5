"""Remote data red-teamed a tenth time, on real servers on 127.0.0.1 (Python's HTTP server, the hostile HTTP
server, moto's S3 server): names a server folds into ``..`` (fullwidth and leader dots), a brace pattern that
leaves its folder, a file replaced within the second of its ``Last-Modified`` (Python's file server states no
ETag; nginx's ETag is that second and the size), and secrets in the exception chain, in a password holding
``@``, in a fragment, in a brace pattern's error and in the packer's output."""

from __future__ import annotations

import email.utils
import json
import os
import re
import time
from pathlib import Path

import pytest
from helpers import rewrite_manifest
from hostile_servers import HostileServer
from servers import FolderServer, s3, small_pack  # noqa: F401 -- s3: a fixture
from wds_helpers import tar_bytes

import gpupipe
from gpupipe.remote import RemoteError, Retry
from gpupipe.remote.urls import join, redact
from gpupipe.shards import format as shardfmt

pytest.importorskip("aiohttp")
QUICK = Retry(attempts=2, backoff=0.01, timeout=5, deadline=30)
SECRET = "Sup3rSecr3tValue"


@pytest.fixture
def hostile():
    server = HostileServer()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return small_pack(tmp_path_factory.mktemp("remote10"), 12, shard_size=8 * 1024)


def everything_said(err: BaseException) -> str:
    """The text of ``err`` and of every exception chained to it (cause and context), with their arguments."""
    out, seen, todo = [], set(), [err]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        out.append(f"{type(e).__name__}: {e} {e.args!r}")
        todo += [e.__cause__, e.__context__]
    return "\n".join(out)


# -- 1. names that a server folds into ".." ---------------------------------------------------------------

FOLDED = ["\uff0e\uff0e/secret.tar", "\u2025/secret.tar", "\u2024\u2024/secret.tar", "\uff0e\uff0e\uff0fsecret.tar"]


@pytest.mark.parametrize("base", ["https://host/pack", "s3://bucket/pack", "gs://bucket/pack"])
@pytest.mark.parametrize("name", FOLDED + ["a/\uff0e/b.tar", "a\uff3cb.tar", "%EF%BC%8E%EF%BC%8E/secret.tar"])
def test_names_that_fold_to_dots_or_slashes_do_not_stay_inside(base, name):
    """Fullwidth dots (U+FF0E), the two-dot leader (U+2025), a fullwidth solidus or reverse solidus, written or
    percent-encoded: NFKC folds them into ``..``, ``/`` and ``\\`` (they were joined to the pack's URL)."""
    with pytest.raises(ValueError, match="does not stay inside"):
        join(base, name)


def test_names_with_other_letters_still_join():
    assert join("https://host/pack", "caf\u00e9-\u00bd.tar") == "https://host/pack/caf\u00e9-\u00bd.tar"


@pytest.mark.parametrize("name", FOLDED[:2])
def test_a_manifest_naming_a_folded_escape_is_refused_before_any_shard_is_asked_for(packed, hostile, tmp_path, name):
    served = tmp_path / "served"
    served.mkdir()
    for path in packed.iterdir():
        (served / path.name).write_bytes(path.read_bytes())
    rewrite_manifest(served, lambda m: m["shards"][0].update(name=name))
    hostile.serve("/pack/manifest.json", (served / "manifest.json").read_bytes())
    with pytest.raises(ValueError, match=r"shards\[0\]\.name .* leaves the pack"):
        gpupipe.Shards(hostile.url + "/pack", cache_dir=tmp_path / "cache", retry=QUICK)
    assert [p for m, p, _ in hostile.requests] == ["/pack/manifest.json"]


def test_a_folded_escape_in_a_manifest_on_s3_is_refused(packed, s3, tmp_path):  # noqa: F811 -- a fixture
    served = tmp_path / "served"
    served.mkdir()
    for path in packed.iterdir():
        (served / path.name).write_bytes(path.read_bytes())
    rewrite_manifest(served, lambda m: m["shards"][0].update(index="\uff0e\uff0e/other/" + m["shards"][0]["index"]))
    url = s3.upload(served, "bucket10", "pack")
    with pytest.raises(ValueError, match=r"shards\[0\]\.index .* leaves the pack"):
        gpupipe.Shards(url, cache_dir=tmp_path / "cache", retry=QUICK)


@pytest.mark.parametrize(
    "pattern",
    ["{base}/data/{{a,../other}}/x.tar", "{base}/data/{{a,%2e%2e}}/x.tar", "{base}/data/s-{{0..1}}/{{.,../..}}/x.tar"],
)
def test_a_brace_pattern_that_leaves_its_folder_is_refused_naming_it(hostile, tmp_path, pattern):
    """The folder a pattern is written in (before its first brace) holds every tar it names: an expansion with
    ``..`` (written or encoded) that leaves it is refused before anything is asked for."""
    url = pattern.format(base=hostile.url)
    with pytest.raises(ValueError, match="leaves the folder"):
        gpupipe.WebDataset(url + f"?token={SECRET}", cache_dir=tmp_path / "cache", retry=QUICK)
    assert hostile.requests == []


# -- 3. a file replaced within the second of its Last-Modified --------------------------------------------


def _replace(path: Path, data: bytes) -> None:
    new = path.with_name(path.name + ".new")
    new.write_bytes(data)
    os.replace(new, path)


def test_a_tar_replaced_in_the_same_second_on_a_server_stating_only_last_modified_gives_the_new_labels(tmp_path):
    """Python's file server states a Last-Modified (whole seconds) and no ETag: a tar replaced by one of the same
    size within that second kept its version, and the cached tar and kept index gave the old labels."""
    served = tmp_path / "served"
    served.mkdir()
    (served / "a.tar").write_bytes(tar_bytes([0, 1, 2]))
    server = FolderServer(served)
    try:
        first = gpupipe.WebDataset(server.url + "/a.tar", cache_dir=tmp_path / "cache", retry=QUICK)
        assert first.labels.tolist() == [0, 1, 2]
        first.store.close()  # the run that read it has ended (a copy still read is another case: test_redteam_remote3)
        _replace(served / "a.tar", tar_bytes([2, 2, 0]))
        again = gpupipe.WebDataset(server.url + "/a.tar", cache_dir=tmp_path / "cache", retry=QUICK)
        assert again.labels.tolist() == [2, 2, 0]
        assert server.tar_gets()["/a.tar"] == 2
    finally:
        server.stop()


def test_a_shard_of_a_pack_without_checksums_replaced_in_the_same_second_is_fetched_again(packed, tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    for path in packed.iterdir():
        (served / path.name).write_bytes(path.read_bytes())
    rewrite_manifest(served, lambda m: [s.pop("sha256", None) for s in m["shards"]])
    name = json.loads((served / shardfmt.MANIFEST).read_text())["shards"][0]["name"]
    server = FolderServer(served)
    try:
        first = gpupipe.Shards(server.url, cache_dir=tmp_path / "cache", retry=QUICK)
        first.hold([0]).release()
        first.store.close()
        data = bytearray((served / name).read_bytes())
        data[-1100] ^= 0xFF  # same size, other bytes
        _replace(served / name, bytes(data))
        again = gpupipe.Shards(server.url, cache_dir=tmp_path / "cache", retry=QUICK)
        again.hold([0]).release()
        assert Path(again.store.cache.path(f"{server.url}/{name}")).read_bytes() == bytes(data)
        assert server.tar_gets()[f"/{name}"] == 2
    finally:
        server.stop()


def _timed(server: HostileServer, path: str, data: bytes, modified: float, etag: str | None) -> None:
    """``data`` with a Last-Modified of ``modified`` (seconds) and ``etag`` (``"nginx"``: nginx's, that second and
    the size in hex; ``None``: none)."""
    tag = f'"{int(modified):x}-{len(data):x}"' if etag == "nginx" else etag

    def route(h, head):
        h.send_response(200)
        h.send_header("Last-Modified", email.utils.formatdate(modified, usegmt=True))
        h.send_header("Content-Length", str(len(data)))
        if tag:
            h.send_header("ETag", tag)
        h.end_headers()
        if not head:
            h.wfile.write(data)

    server.routes[path] = route


@pytest.mark.parametrize("etag", ["nginx", None, 'W/"weak"'])
def test_a_tar_replaced_in_the_same_second_with_a_time_etag_gives_the_new_labels(hostile, tmp_path, etag):
    """nginx's ETag is the file's modification second and its size: a tar of the same size written in the same
    second has the same ETag (as a weak ETag may): the new tar's labels, not the cached ones."""
    now = time.time()
    _timed(hostile, "/a.tar", tar_bytes([0, 1, 2]), now, etag)
    first = gpupipe.WebDataset(hostile.url + "/a.tar", cache_dir=tmp_path / "cache", retry=QUICK)
    assert first.labels.tolist() == [0, 1, 2]
    first.store.close()
    _timed(hostile, "/a.tar", tar_bytes([1, 1, 0]), now, etag)
    again = gpupipe.WebDataset(hostile.url + "/a.tar", cache_dir=tmp_path / "cache", retry=QUICK)
    assert again.labels.tolist() == [1, 1, 0]
    assert hostile.gets("/a.tar") == 2


def test_an_old_last_modified_or_a_content_etag_is_a_version_and_the_cache_is_used(hostile, tmp_path):
    """What still tells a file apart keeps the cache: a Last-Modified older than a few seconds, a content ETag."""
    data = tar_bytes([0, 1])
    _timed(hostile, "/old.tar", data, time.time() - 3600, None)
    _timed(hostile, "/hashed.tar", data, time.time(), '"0123456789abcdef"')
    for path in ("/old.tar", "/hashed.tar"):
        for _ in range(2):
            source = gpupipe.WebDataset(hostile.url + path, cache_dir=tmp_path / "cache", retry=QUICK)
            assert source.labels.tolist() == [0, 1]
        assert hostile.gets(path) == 1, path


def test_what_tells_a_file_apart():
    from gpupipe.remote.causes import tells_apart

    now = time.time()
    fresh, old = email.utils.formatdate(now, usegmt=True), email.utils.formatdate(now - 60, usegmt=True)
    assert not tells_apart({"Last-Modified": fresh}, 10)
    assert tells_apart({"Last-Modified": old}, 10)
    assert not tells_apart({"Last-Modified": fresh, "ETag": f'"{int(now):x}-a"'}, 10)
    assert tells_apart({"Last-Modified": fresh, "ETag": f'"{int(now):x}-b"'}, 10), "not this file's size"
    assert tells_apart({"Last-Modified": fresh, "ETag": '"d41d8cd98f00b204e9800998ecf8427e"'}, 10)
    assert tells_apart({"LastModified": "not a date", "ETag": ""}, 10), "unreadable: as the server states it"
    assert tells_apart({"updated": "2020-01-01T00:00:00Z"}, 10) and tells_apart({"generation": "7"}, 10)


# -- 6. secrets: the exception chain, passwords holding "@", fragments, patterns, the packer's output ------


@pytest.mark.parametrize("status", [404, 401, 500])
@pytest.mark.parametrize("where", ["query", "password"])
def test_no_secret_anywhere_in_the_exception_chain(hostile, tmp_path, status, where):
    """The error names the URL redacted; the client's own exception (``FileNotFoundError(url)``, aiohttp's
    ``ClientResponseError``) named it whole and was the error's ``__context__``."""
    hostile.status("/a.tar", status)
    url = (
        f"{hostile.url}/a.tar?token={SECRET}"
        if where == "query"
        else hostile.url.replace("http://", f"http://u:{SECRET}@") + "/a.tar"
    )
    with pytest.raises(RemoteError) as info:
        gpupipe.WebDataset(url, cache_dir=tmp_path / "cache", retry=QUICK)
    assert "a.tar" in str(info.value) and SECRET not in everything_said(info.value)


def test_no_secret_in_the_chain_of_a_missing_manifest(hostile, tmp_path):
    url = hostile.url.replace("http://", f"http://u:{SECRET}@") + "/pack"
    with pytest.raises(ValueError, match="not a gpupipe pack") as info:
        gpupipe.Shards(url, cache_dir=tmp_path / "cache", retry=QUICK)
    assert SECRET not in everything_said(info.value)


def test_no_secret_in_the_chain_on_s3(s3, tmp_path):  # noqa: F811 -- a fixture
    url = f"s3://no-such-bucket-10/a.tar?X-Amz-Signature={SECRET}"
    with pytest.raises(RemoteError) as info:
        gpupipe.WebDataset(url, cache_dir=tmp_path / "cache", retry=QUICK)
    assert SECRET not in everything_said(info.value)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"http://user:p@ss{SECRET}@host/x.tar", "http://***@host/x.tar"),
        (f"https://host/x.tar#access_token={SECRET}&state=1", "https://host/x.tar#access_token=***&state=1"),
        (
            f"failed: 's3://k:{SECRET}@bucket/x' (mail me@example.com)",
            "failed: 's3://***@bucket/x' (mail me@example.com)",
        ),
    ],
)
def test_redact_takes_a_password_holding_at_and_a_token_in_a_fragment(text, shown):
    assert redact(text) == shown


def test_a_malformed_pattern_names_it_redacted(tmp_path):
    with pytest.raises(ValueError, match="unbalanced") as info:
        gpupipe.WebDataset(f"https://host/s-{{0..3.tar?sig={SECRET}", cache_dir=tmp_path / "cache")
    assert SECRET not in everything_said(info.value)


@pytest.mark.parametrize("damaged", [False, True])
def test_the_packers_verify_of_a_url_with_a_password_prints_it_redacted(packed, tmp_path, capsys, damaged):
    """``--verify https://user:password@host/pack``: its verdict and each ``FAIL`` line named the URL whole."""
    served = tmp_path / "served"
    served.mkdir()
    for path in packed.iterdir():
        (served / path.name).write_bytes(path.read_bytes())
    if damaged:
        shard = served / json.loads((served / shardfmt.MANIFEST).read_text())["shards"][0]["name"]
        data = bytearray(shard.read_bytes())
        data[-1100] ^= 0xFF
        shard.write_bytes(bytes(data))
    server = FolderServer(served)
    try:
        from gpupipe.pack.__main__ import main

        url = server.url.replace("http://", f"http://reader:{SECRET}@")
        assert main(["--verify", url]) == int(damaged)
        done = capsys.readouterr()
        assert ("FAIL" in done.out) == damaged and redact(url) in done.out
        assert SECRET not in done.out + done.err
    finally:
        server.stop()


# -- 7. a process of another container stopped while it holds a lock of the shared cache ------------------


def _held_by_a_stopped_process(path: str):
    """``path`` locked exclusively, as by a downloader whose container was paused (``docker pause``): the lock
    stays held and nothing ever releases it. Returns the descriptor (closed by the caller)."""
    from gpupipe import fileio

    fd = fileio.open_lock(path)
    fileio.lock(fd)
    return fd


def _in_a_thread(call, seconds: float = 60):
    """``call()``'s result or exception, from a daemon thread: a hang fails the test instead of the suite."""
    import threading

    out: dict = {}

    def run():
        try:
            out["value"] = call()
        except BaseException as err:  # noqa: BLE001 -- handed to the test
            out["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "still waiting: no deadline on the lock"
    return out


@pytest.mark.parametrize("which", ["file", "eviction"])
def test_a_lock_held_by_a_stopped_process_is_given_up_after_the_deadline_naming_the_cache(hostile, tmp_path, which):
    """A download's lock (or the cache's eviction lock) held by a process that never lets go (a paused container):
    every other process waited for ever; now a ``CacheError`` after ``Retry.deadline`` naming the cache folder."""
    from gpupipe import fileio
    from gpupipe.remote import ShardCache
    from gpupipe.remote.fetch import CacheError

    data = tar_bytes([0, 1])
    hostile.serve("/a.tar", data)
    cache = ShardCache(tmp_path / "cache", 1 << 20, Retry(attempts=1, backoff=0, timeout=2, deadline=1))
    url = hostile.url + "/a.tar"
    held = cache.path(url) + ".lock" if which == "file" else str(cache.folder / ".evict.lock")
    fd = _held_by_a_stopped_process(held)
    try:
        out = _in_a_thread(lambda: cache.get(url, size=len(data), version="v1"))
    finally:
        fileio.close_lock(fd)
    assert isinstance(out.get("error"), CacheError), out
    assert str(cache.folder) in str(out["error"]) and "Retry.deadline" in str(out["error"])
    pin = cache.get(url, size=len(data), version="v1")  # let go: read as usual
    assert Path(pin.path).read_bytes() == data
    pin.release()


def test_debug_lines_of_an_s3_read_show_no_signature_or_key_id(s3, tmp_path, caplog):  # noqa: F811 -- a fixture
    """botocore's DEBUG line of each request shows its headers: the ``Authorization`` header (the key id and the
    request's signature) came out whole."""
    import logging

    folder = tmp_path / "up"
    folder.mkdir()
    (folder / "a.tar").write_bytes(tar_bytes([0, 1]))
    url = s3.upload(folder, "bucket10b", "wds") + "/a.tar"
    caplog.set_level(logging.DEBUG)
    options = {"key": "AKIDREDTEAM10", "secret": SECRET}
    source = gpupipe.WebDataset(url, cache_dir=tmp_path / "cache", retry=QUICK, storage_options=options)
    assert source.labels.tolist() == [0, 1]
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert "Authorization" in said, "botocore's request lines were seen"
    assert "AKIDREDTEAM10" not in said and SECRET not in said and "Signature=" not in said
    assert "Signature:" in said and not re.search(r"Signature:\s*[0-9a-f]{16}", said), "the signer's line, redacted"


@pytest.mark.parametrize(
    "line",
    [
        "headers={'Authorization': b'AWS4-HMAC-SHA256 Credential=AKID/x, Signature=" + SECRET + "'}",
        "Authorization: Bearer " + SECRET,
        "{'headers': {'Authorization': 'Bearer " + SECRET + "'}}",
        "{'X-Amz-Security-Token': '" + SECRET + "'}",
    ],
)
def test_redact_takes_credential_headers(line):
    assert SECRET not in redact(line) and "***" in redact(line)


# -- 4./5. no Content-Length and a slow drip on every kind of read: one deadline per download ----------------


def _drip_without_length(server: HostileServer, path: str, data: bytes) -> None:
    """``data`` with no Content-Length, a byte every 0.2 s."""
    import time as clock

    def route(h, head):
        h.send_response(200)
        h.end_headers()
        for k in range(0 if head else len(data)):
            h.wfile.write(data[k : k + 1])
            h.wfile.flush()
            clock.sleep(0.2)

    server.routes[path] = route


@pytest.mark.parametrize(
    ("what", "length"),
    [("manifest", False), ("index", False), ("shard", False), ("webdataset tar", False)],
)
def test_a_slow_drip_on_each_kind_of_read_ends_at_the_deadline(packed, hostile, tmp_path, what, length):
    """A server that sends a byte now and then (each read within ``Retry.timeout``), with or without a
    Content-Length: every kind of download ends at ``Retry.deadline`` with a ``RemoteError`` naming the file."""
    manifest = json.loads((packed / shardfmt.MANIFEST).read_text())
    first = manifest["shards"][0]
    slow = {"manifest": shardfmt.MANIFEST, "index": first["index"], "shard": first["name"], "webdataset tar": "w.tar"}
    files = {p.name: p.read_bytes() for p in packed.iterdir()} | {"w.tar": tar_bytes([0, 1])}
    for name, data in files.items():
        if name != slow[what]:
            hostile.serve(f"/pack/{name}", data)
        elif length:
            hostile.drip(f"/pack/{name}", data, chunk=1, every=0.2)
        else:
            _drip_without_length(hostile, f"/pack/{name}", data)
    retry = Retry(attempts=2, backoff=0, timeout=5, deadline=2.5)
    with pytest.raises(RemoteError, match=r"Retry\.deadline.*still under way") as info:
        if what == "webdataset tar":
            gpupipe.WebDataset(hostile.url + "/pack/w.tar", cache_dir=tmp_path / "cache", retry=retry)
        else:
            gpupipe.Shards(hostile.url + "/pack", cache_dir=tmp_path / "cache", retry=retry).hold([0])
    assert slow[what] in str(info.value)
    assert not [p for p in (tmp_path / "cache").rglob("*") if ".part-" in p.name], "no partial file left"


def test_a_manifest_without_content_length_cut_once_is_read_again(packed, hostile, tmp_path):
    """A body that ends with its connection looks whole: a manifest cut so (no Content-Length) was refused as
    "not valid JSON" at once, where the next read gives it whole."""
    left = [1]

    def cut_once(h, head):
        data = (packed / shardfmt.MANIFEST).read_bytes()
        h.send_response(200)
        h.end_headers()
        if not head:
            with hostile.lock:
                cut, left[0] = left[0] > 0, left[0] - 1
            h.wfile.write(data[: len(data) // 2] if cut else data)

    for path in packed.iterdir():
        hostile.serve(f"/pack/{path.name}", path.read_bytes())
    hostile.routes["/pack/manifest.json"] = cut_once
    source = gpupipe.Shards(hostile.url + "/pack", cache_dir=tmp_path / "cache", retry=QUICK)
    assert source.labels.tolist() == gpupipe.Shards(packed).labels.tolist()
    assert hostile.gets("/pack/manifest.json") == 2


def test_a_local_tar_replaced_with_its_size_and_modification_time_kept_gives_the_new_labels(tmp_path):
    """A tar replaced by one of the same size whose modification time was kept (``cp -p``, ``rsync -t``, archives
    with fixed times) was read with the kept index of the old one: the old labels with the new images."""
    tar = tmp_path / "a.tar"
    tar.write_bytes(tar_bytes([0, 1, 2]))
    first = gpupipe.WebDataset(tar, cache_dir=tmp_path / "cache")
    assert first.labels.tolist() == [0, 1, 2]
    st = tar.stat()
    _replace(tar, tar_bytes([2, 2, 1]))
    os.utime(tar, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (tar.stat().st_size, tar.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    assert gpupipe.WebDataset(tar, cache_dir=tmp_path / "cache").labels.tolist() == [2, 2, 1]


@pytest.mark.parametrize("fault", ["oversized shard", "endless index", "broken manifest"])
def test_verify_of_a_remote_pack_reads_no_more_than_the_manifest_says_and_names_no_secret(
    packed, hostile, tmp_path, capsys, fault
):
    """``--verify URL`` downloaded each shard and index with the 1 GiB cap of a file of unknown size (a shard
    larger than its manifest size was read whole), and named a broken manifest with the URL's password."""
    from gpupipe.pack.__main__ import main

    first = json.loads((packed / shardfmt.MANIFEST).read_text())["shards"][0]
    for path in packed.iterdir():
        hostile.serve(f"/pack/{path.name}", path.read_bytes())
    if fault == "oversized shard":
        hostile.oversize(f"/pack/{first['name']}", (packed / first["name"]).read_bytes(), 8 << 20)
    elif fault == "endless index":
        hostile.endless(f"/pack/{first['index']}")
    else:
        hostile.serve("/pack/manifest.json", b'{"version": 2, "shards": [')
    url = hostile.url.replace("http://", f"http://u:{SECRET}@") + "/pack"
    assert main(["--verify", url]) == 1
    out = capsys.readouterr()
    assert SECRET not in out.out + out.err
    fail = [line for line in out.out.splitlines() if line.startswith("FAIL")]
    named = {"oversized shard": first["name"], "endless index": first["index"], "broken manifest": "manifest.json"}
    assert len(fail) == 1 and named[fault] in fail[0], out.out
    if fault != "broken manifest":
        assert "more than the" in fail[0] and "the rest was not read" in fail[0], fail[0]
