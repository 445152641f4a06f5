"""Remote data and WebDataset red-teamed a second time, on real servers on 127.0.0.1 (the hostile HTTP
server, Python's file server, moto's S3 server): a server that states no version of its files (no ETag,
no Last-Modified), brace patterns as ``braceexpand`` (what WebDataset uses) expands them, a cache folder
that cannot be written, credentials kept out of the files the cache writes, labels that mix indices and
names, an HTML page served in place of a tar or a manifest, S3 credentials and endpoints in
``storage_options`` (a missing bucket, access denied), two processes indexing one set of tars, a server
that states no size (compressed in transit, no Content-Length), an object store's folder given as a tar,
a cache too small for one tar, long non-ASCII file names, and samples grouped as WebDataset groups them."""

from __future__ import annotations

import logging
import tarfile
from pathlib import Path

import pytest
from hostile_servers import HostileServer
from servers import s3  # noqa: F401 -- a fixture
from wds_helpers import add, png, tar_bytes

import gpupipe
from gpupipe.remote import Retry, ShardCache, expand_braces
from gpupipe.remote.fetch import CacheError, RemoteDenied, RemoteMissing

pytest.importorskip("aiohttp")
QUICK = Retry(attempts=2, backoff=0.05, timeout=5, deadline=60)
SECRET = "Sup3rSecr3tValue"


@pytest.fixture
def hostile():
    server = HostileServer()
    yield server
    server.stop()


# -- 1. a server that states no version: a replaced tar is never served from the cache -----------------


def test_a_tar_replaced_on_a_server_without_etag_or_last_modified_gives_the_new_labels(hostile, tmp_path):
    hostile.serve("/d.tar", tar_bytes([0, 1, 2, 3]), etag=False)
    first = gpupipe.WebDataset(hostile.url + "/d.tar", cache_dir=tmp_path / "cache", retry=QUICK)
    assert first.labels.tolist() == [0, 1, 2, 3]
    hostile.serve("/d.tar", tar_bytes([3, 2, 1, 0]), etag=False)  # the same size, nothing says it changed
    second = gpupipe.WebDataset(hostile.url + "/d.tar", cache_dir=tmp_path / "cache", retry=QUICK)
    assert second.labels.tolist() == [3, 2, 1, 0]
    assert hostile.gets("/d.tar") == 2


def test_an_unversioned_file_is_fetched_once_by_caches_made_together_and_again_by_a_later_one(hostile, tmp_path):
    old, new = b"a" * 1000, b"b" * 1000
    hostile.serve("/f.bin", old, etag=False)
    ranks = [ShardCache(tmp_path / "cache", 1 << 20, QUICK) for _ in range(2)]  # two ranks' sources, built together
    for cache in ranks:
        pin = cache.get(hostile.url + "/f.bin", size=1000)
        assert Path(pin.path).read_bytes() == old
        pin.release()
    assert hostile.gets("/f.bin") == 1  # one download for the node
    hostile.serve("/f.bin", new, etag=False)
    later = ShardCache(tmp_path / "cache", 1 << 20, QUICK)  # a new source: nothing tells it the copy is current
    pin = later.get(hostile.url + "/f.bin", size=1000)
    assert Path(pin.path).read_bytes() == new
    pin.release()
    assert hostile.gets("/f.bin") == 2


def test_an_unversioned_file_in_use_by_another_process_is_taken_as_it_is_not_waited_for(hostile, tmp_path,
                                                                                         monkeypatch):
    """A rank that builds its source later than another, which reads (pins) the file meanwhile: waiting
    for that reader to let go could wait for ever (it may wait on this rank at a collective)."""
    import threading

    from gpupipe.remote import cache as cache_module

    monkeypatch.setattr(cache_module, "IN_USE_WAIT", 0.5)
    hostile.serve("/f.bin", b"a" * 1000, etag=False)
    early = ShardCache(tmp_path / "cache", 1 << 20, QUICK)
    held = early.get(hostile.url + "/f.bin", size=1000)  # read by the early rank, and held
    late = ShardCache(tmp_path / "cache", 1 << 20, QUICK)  # made after that download
    got = []
    thread = threading.Thread(target=lambda: got.append(late.get(hostile.url + "/f.bin", size=1000)), daemon=True)
    thread.start()
    thread.join(timeout=20)
    try:
        assert got, "the late rank waited for the early rank's pin"
        assert Path(got[0].path).read_bytes() == b"a" * 1000 and hostile.gets("/f.bin") == 1
    finally:
        held.release()
        thread.join(timeout=20)
        for pin in got:
            pin.release()


def test_ranks_starting_together_over_a_stale_unversioned_copy_fetch_it_once_and_read_the_new_one(hostile, tmp_path):
    """Ranks looking at the file at once hold its lock for a moment: not readers whose copy is taken."""
    import threading

    hostile.serve("/f.bin", b"a" * 1000, etag=False)
    ShardCache(tmp_path / "cache", 1 << 20, QUICK).get(hostile.url + "/f.bin", size=1000).release()  # a past job
    hostile.serve("/f.bin", b"b" * 1000, etag=False)
    ranks = [ShardCache(tmp_path / "cache", 1 << 20, QUICK) for _ in range(4)]
    start, got = threading.Barrier(len(ranks)), []

    def rank(cache):
        start.wait()
        pin = cache.get(hostile.url + "/f.bin", size=1000)
        got.append(Path(pin.path).read_bytes())
        pin.release()

    threads = [threading.Thread(target=rank, args=(cache,)) for cache in ranks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert got == [b"b" * 1000] * len(ranks)
    assert hostile.gets("/f.bin") == 2  # the past job's download and one for the four ranks


# -- 2. brace patterns expand as braceexpand (WebDataset) expands them --------------------------------


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("s-{0..10}.tar", [f"s-{i}.tar" for i in range(11)]),  # "0" is no zero padding
        ("s-{1..010}.tar", [f"s-{i:03d}.tar" for i in range(1, 11)]),  # a padded upper bound pads
        ("s-{08..10}.tar", ["s-08.tar", "s-09.tar", "s-10.tar"]),
        ("s-{-01..1}.tar", ["s--01.tar", "s-000.tar", "s-001.tar"]),
        ("s-{a,b{1,2}}.tar", ["s-a.tar", "s-b1.tar", "s-b2.tar"]),  # nested: no name twice
        ("{x,{y,z}}-{0..1}.tar", ["x-0.tar", "x-1.tar", "y-0.tar", "y-1.tar", "z-0.tar", "z-1.tar"]),
        ("s-{0..6..3}.tar", ["s-0.tar", "s-3.tar", "s-6.tar"]),  # a step
        ("s-{a..c}.tar", ["s-a.tar", "s-b.tar", "s-c.tar"]),  # letters
        ("s-{x}.tar", ["s-{x}.tar"]),  # neither a list nor a range: kept as written
        ("s-{}.tar", ["s-{}.tar"]),
    ],
)
def test_brace_patterns_expand_as_braceexpand_does(pattern, expected):
    assert expand_braces(pattern) == expected


@pytest.mark.parametrize("pattern", ["s-{0..3.tar", "s-0..3}.tar", "s-{a,{b}.tar"])
def test_unbalanced_braces_are_an_error_naming_the_pattern(pattern):
    with pytest.raises(ValueError, match="unbalanced braces"):
        expand_braces(pattern)


def test_a_nested_pattern_reads_each_tar_once(tmp_path):
    for name, labels in (("a", [0, 1]), ("b1", [1, 0]), ("b2", [1, 1])):
        (tmp_path / f"s-{name}.tar").write_bytes(tar_bytes(labels))
    source = gpupipe.WebDataset(str(tmp_path / "s-{a,b{1,2}}.tar"))
    assert source.labels.tolist() == [0, 1, 1, 0, 1, 1]


# -- 3. a cache folder that cannot be written: a CacheError naming it, never a bare OSError ------------


def test_a_cache_file_that_cannot_be_made_is_a_cache_error_naming_the_folder(hostile, tmp_path):
    hostile.serve("/d.tar", tar_bytes([0, 1]))
    cache = ShardCache(tmp_path / "cache", 1 << 20, QUICK)
    url = hostile.url + "/d.tar"
    Path(cache.path(url) + ".lock").mkdir()  # what a read-only disk or a foreign file there does: open() fails
    with pytest.raises(CacheError, match=str(tmp_path / "cache")) as caught:
        cache.get(url)
    assert not isinstance(caught.value, OSError)


# -- 4. credentials are never written into the cache's files ------------------------------------------


def test_a_urls_credentials_are_not_written_into_the_kept_index(hostile, tmp_path):
    hostile.serve("/c.tar", tar_bytes([0, 1, 1]))
    url = hostile.url.replace("http://", f"http://user:{SECRET}@") + f"/c.tar?X-Amz-Signature={SECRET}"
    source = gpupipe.WebDataset(url, cache_dir=tmp_path / "cache", retry=QUICK)
    assert source.labels.tolist() == [0, 1, 1]
    holding = [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert holding == []
    again = gpupipe.WebDataset(url, cache_dir=tmp_path / "cache", retry=QUICK)  # the kept index is used
    assert again.labels.tolist() == [0, 1, 1]
    assert hostile.gets("/c.tar") == 1


# -- 5. labels that mix indices and names: the error names one of each --------------------------------


def test_labels_mixing_indices_and_names_name_a_sample_of_each(tmp_path):
    (tmp_path / "m.tar").write_bytes(tar_bytes([1, "n01440764", 2]))
    with pytest.raises(ValueError, match=r"mix class indices and class names") as caught:
        gpupipe.WebDataset(str(tmp_path / "m.tar"))
    assert "m.tar#0001.png" in str(caught.value) and "'n01440764'" in str(caught.value)
    assert "m.tar#0000.png" in str(caught.value)


# -- 6. a server that answers 200 with an HTML page -----------------------------------------------------


def test_an_html_page_served_for_a_tar_is_named_as_such(hostile, tmp_path):
    page = b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body>Please sign in</body></html>\n"
    hostile.serve("/d.tar", page)
    with pytest.raises(ValueError, match=r"an HTML page, not a tar") as caught:
        gpupipe.WebDataset(hostile.url + "/d.tar", cache_dir=tmp_path / "cache", retry=QUICK)
    assert "/d.tar" in str(caught.value)


def test_an_html_page_served_for_a_manifest_is_named_as_such(hostile, tmp_path):
    hostile.serve("/p/manifest.json", b"<!doctype html><html><body>Not signed in</body></html>")
    with pytest.raises(ValueError, match=r"/p/manifest.json is an HTML page, not a manifest"):
        gpupipe.Shards(hostile.url + "/p", cache_dir=tmp_path / "cache", retry=QUICK)


# -- 7. S3: credentials and endpoint in storage_options; a missing bucket named, no secret shown ------


def s3_options(s3) -> dict:  # noqa: F811
    return {"key": "testing", "secret": SECRET, "endpoint_url": s3.endpoint}


@pytest.fixture
def no_s3_env(s3, monkeypatch):  # noqa: F811
    """Nothing of the S3 server in the environment: what reaches it comes from storage_options."""
    for name in s3.env:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    yield
    s3fs.S3FileSystem.clear_instance_cache()


def test_s3_credentials_and_endpoint_from_storage_options_read_tars(s3, no_s3_env, tmp_path):  # noqa: F811
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3_options(s3))
    fs.mkdir("opts")
    fs.pipe("opts/wds/shard 0.tar", tar_bytes([2, 0, 1]))
    source = gpupipe.WebDataset("s3://opts/wds/shard 0.tar", cache_dir=tmp_path / "cache",
                                storage_options=s3_options(s3), retry=QUICK)
    assert source.labels.tolist() == [2, 0, 1]


def test_a_pack_in_a_missing_bucket_is_named_and_no_secret_shown(s3, no_s3_env, tmp_path, caplog):  # noqa: F811
    caplog.set_level(logging.DEBUG, logger="gpupipe")
    with pytest.raises(ValueError) as caught:
        gpupipe.Shards("s3://no-such-bucket/pack", cache_dir=tmp_path / "cache", storage_options=s3_options(s3),
                       retry=QUICK)
    message = str(caught.value)
    assert "s3://no-such-bucket/pack" in message and "bucket does not exist" in message
    assert SECRET not in message and SECRET not in caplog.text
    with pytest.raises(RemoteMissing) as missing:
        gpupipe.WebDataset("s3://no-such-bucket/x.tar", cache_dir=tmp_path / "cache",
                           storage_options=s3_options(s3), retry=QUICK)
    assert "s3://no-such-bucket/x.tar" in str(missing.value) and SECRET not in str(missing.value)


# -- 8. two processes building one WebDataset into one cache at once ----------------------------------

#: Run in a subprocess: the WebDataset at argv[1] through the cache at argv[2]; prints its labels as JSON.
BUILDER = """
import json, sys
import gpupipe
from gpupipe.remote import Retry
source = gpupipe.WebDataset(sys.argv[1], cache_dir=sys.argv[2], retry=Retry(attempts=2, backoff=0.05, timeout=5))
print(json.dumps(source.labels.tolist()))
"""


@pytest.mark.slow
def test_two_processes_index_the_same_remote_tars_into_one_cache_once(tmp_path):
    import json
    import subprocess
    import sys

    from servers import FolderServer

    served = tmp_path / "served"
    served.mkdir()
    expected = []
    for t in range(3):
        labels = [(t + i) % 3 for i in range(6)]
        (served / f"s-{t}.tar").write_bytes(tar_bytes(labels))
        expected += labels
    server = FolderServer(served, rate=100_000)  # slow enough that the two builds overlap
    try:
        script = tmp_path / "build.py"
        script.write_text(BUILDER)
        args = [sys.executable, str(script), server.url + "/s-{0..2}.tar", str(tmp_path / "cache")]
        procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        for proc in procs:
            out, err = proc.communicate(timeout=240)
            assert proc.returncode == 0 and "Traceback" not in err, err[-3000:]
            assert json.loads(out.strip().splitlines()[-1]) == expected
        assert dict(server.tar_gets()) == {f"/s-{t}.tar": 1 for t in range(3)}, "each tar fetched once per node"
        left = [p.name for p in (tmp_path / "cache").rglob("*") if ".part-" in p.name or ".tmp" in p.name]
        assert left == []
    finally:
        server.stop()


# -- 9. a server that states no size: compressed in transit, or no Content-Length -----------------------


def test_a_tar_compressed_in_transit_is_read_whole(hostile, tmp_path):
    """``Content-Encoding: gzip`` whatever the client asks (a static site serving a pre-compressed
    file): HEAD states no true size; the tar is downloaded (inflated) to learn it, once."""
    import gzip

    data = tar_bytes([2, 1, 0, 1])
    body = gzip.compress(data)

    def route(h, head):
        h.send_response(200)
        h.send_header("Content-Encoding", "gzip")
        h.send_header("Content-Length", str(len(body)))
        h.send_header("ETag", '"v1"')
        h.end_headers()
        if not head:
            h.wfile.write(body)

    hostile.routes["/z.tar"] = route
    for downloads in (1, 0):  # the second build reads the kept index and the cached tar
        source = gpupipe.WebDataset(hostile.url + "/z.tar", cache_dir=tmp_path / "cache", retry=QUICK)
        assert source.labels.tolist() == [2, 1, 0, 1]
        assert source.store.sizes == [len(data)]
        assert [bytes(source.read_bytes(i)) for i in range(4)] == [png(10 * i) for i in range(4)]
        assert source.store.cache.downloads == downloads


def test_a_tar_without_content_length_is_read_whole(hostile, tmp_path):
    hostile.no_length("/n.tar", tar_bytes([0, 2, 1]))  # no size, no version: fetched for each new source
    source = gpupipe.WebDataset(hostile.url + "/n.tar", cache_dir=tmp_path / "cache", retry=QUICK)
    assert source.labels.tolist() == [0, 2, 1]


def test_a_folder_url_on_s3_is_named_as_a_folder(s3, tmp_path):  # noqa: F811
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.mkdir("folders")
    fs.pipe("folders/wds/s-0.tar", tar_bytes([0, 1]))
    for url in ("s3://folders/wds/", "s3://folders/wds"):
        with pytest.raises(gpupipe.Error, match=rf"{url} is a folder"):
            gpupipe.WebDataset(url, cache_dir=tmp_path / "cache", retry=QUICK)


# -- 10. a cache too small for one tar: refused before anything is downloaded ---------------------------


def test_a_cache_limit_below_one_tar_is_refused_before_any_download(hostile, tmp_path):
    for t in range(3):
        hostile.serve(f"/s-{t}.tar", tar_bytes([0, 1, 2]))
    with pytest.raises(ValueError, match=r"cache_limit 4,000 bytes cannot hold one shard \(\d+(,\d+)* bytes\)"):
        gpupipe.WebDataset(hostile.url + "/s-{0..2}.tar", cache_dir=tmp_path / "cache", cache_limit=4000,
                           retry=QUICK)
    assert [hostile.gets(f"/s-{t}.tar") for t in range(3)] == [0, 0, 0]


# -- 11. a long non-ASCII file name: the cache's file names stay within the file system's 255 bytes ----


def test_a_long_non_ascii_tar_name_is_cached(hostile, tmp_path):
    name = "数据集分片" * 16 + ".tar"  # 81 characters, 243 bytes in UTF-8
    from urllib.parse import quote

    hostile.serve("/" + quote(name), tar_bytes([1, 0]))
    source = gpupipe.WebDataset(f"{hostile.url}/{name}", cache_dir=tmp_path / "cache", retry=QUICK)
    assert source.labels.tolist() == [1, 0]
    assert max(len(p.name.encode()) for p in (tmp_path / "cache").iterdir()) <= 255


def test_s3_access_denied_names_the_url_and_never_the_secret(s3, tmp_path, monkeypatch, caplog):  # noqa: F811
    import fsspec
    import moto.settings
    import s3fs

    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.mkdir("denied")
    fs.pipe("denied/x.tar", tar_bytes([0]))
    fs.pipe("denied/p/manifest.json", b"{}")
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)  # moto checks credentials from now on
    s3fs.S3FileSystem.clear_instance_cache()
    caplog.set_level(logging.DEBUG, logger="gpupipe")
    options = {"key": "AKIAEXAMPLEWRONG", "secret": SECRET}
    try:
        for build, url in ((gpupipe.WebDataset, "s3://denied/x.tar"), (gpupipe.Shards, "s3://denied/p")):
            with pytest.raises(RemoteDenied, match="access denied") as caught:
                build(url, cache_dir=tmp_path / "cache", storage_options=options, retry=QUICK)
            assert url in str(caught.value) and SECRET not in str(caught.value)
        assert SECRET not in caplog.text
    finally:
        s3fs.S3FileSystem.clear_instance_cache()


# -- 12. samples as WebDataset groups them (regression: what a user of the webdataset library expects) ---


def test_members_group_into_samples_as_webdataset_groups_them(tmp_path):
    with tarfile.open(tmp_path / "s-0.tar", "w") as tar:
        add(tar, "a.JPG", png(10))  # upper-case extensions match (webdataset lower-cases them too)
        add(tar, "a.CLS", b" 1 \n")  # white space around the label is dropped
        add(tar, "sub/dir/b.png", png(20))  # the key keeps its folders: sub/dir/b
        add(tar, "sub/dir/b.cls", b"2")
        add(tar, "c.png", png(30))  # two images: the first of image='jpg;jpeg;png;webp' present
        add(tar, "c.jpg", png(40))
        add(tar, "c.cls", b"0")
        add(tar, "d.v2.png", png(50))  # key d, extension v2.png: no image
        add(tar, "d.cls", b"0")
        add(tar, "e.png", png(60))  # split across two tars: both halves are problems
    with tarfile.open(tmp_path / "s-1.tar", "w") as tar:
        add(tar, "e.cls", b"1")
        add(tar, "f.png", png(70))
        add(tar, "f.cls", b"2")
    source = gpupipe.WebDataset(str(tmp_path / "s-{0..1}.tar"))
    assert [n.split("#", 1)[1] for n in source.names] == ["a.JPG", "sub/dir/b.png", "c.jpg", "f.png"]
    assert source.labels.tolist() == [1, 2, 0, 2]
    problems = {p.path.split("#", 1)[1]: p.reason for p in source.problems}
    assert set(problems) == {"d", "e"} and len(source.problems) == 3
    assert "'d.v2.png' is key 'd' with extension 'v2.png'" in problems["d"]
    assert sorted(p.reason for p in source.problems if p.path.endswith("#e")) == [
        "no .cls member for the label", "no image member (.jpg, .jpeg, .png, .webp)"]


# -- 13. no credentials at all: said at once, with what to set (not retried) --------------------------


def test_s3_without_credentials_fails_at_once_and_says_what_to_set(s3, tmp_path, monkeypatch, caplog):  # noqa: F811
    import s3fs

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    s3fs.S3FileSystem.clear_instance_cache()
    caplog.set_level(logging.DEBUG, logger="gpupipe")
    patient = Retry(attempts=5, backoff=0.05, timeout=5, deadline=60)
    try:
        for build, url in ((gpupipe.Shards, "s3://nocreds/p"), (gpupipe.WebDataset, "s3://nocreds/x.tar")):
            with pytest.raises(RemoteDenied, match="no credentials") as caught:
                build(url, cache_dir=tmp_path / "cache", retry=patient)
            message = str(caught.value)
            assert url in message and "AWS_ACCESS_KEY_ID" in message and "'anon': True" in message
        assert "retry" not in caplog.text  # not retried: no credential appears by waiting
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
