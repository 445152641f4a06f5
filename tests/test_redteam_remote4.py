"""Remote data red-teamed a fourth time, on real servers on 127.0.0.1 (the hostile HTTP server): a cache folder
that also holds other files (a project folder, a shared scratch folder), URLs whose names look like the cache's
own files (``train.part-0001.tar``, ``x.ok.tar``), a ``206 Partial Content`` answered to a request for a whole
file, and a shard of a pack without checksums replaced on the server mid-epoch."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import rewrite_manifest
from hostile_servers import HostileServer, _etag
from servers import s3, small_pack  # noqa: F401 -- s3: a fixture
from wds_helpers import tar_bytes

import gpupipe
from gpupipe.remote import RemoteError, Retry, ShardCache, read_small

pytest.importorskip("aiohttp")
QUICK = Retry(attempts=2, backoff=0.05, timeout=5, deadline=60)


@pytest.fixture
def hostile():
    server = HostileServer()
    yield server
    server.stop()


# -- 1. a cache folder that holds other files: the cache touches only what it made ---------------------


def _theirs(folder: Path) -> dict:
    """Files of another program, named as the cache names its own (a lock beside a file, a part file)."""
    files = {
        "Pipfile": b"[packages]\n",
        "Pipfile.lock": b"{}",
        "movie.mkv.part-01": b"m" * 3000,
        "2024-05-01-backup.tar.part-001": b"d" * 3000,
        "cafe-photo.jpg.part-7": b"c" * 3000,
        "backup.tar.ok": b"b" * 3000,
        "0123abcd-notes.txt": b"n" * 3000,
        "0123abcd-notes.txt.lock": b"",
    }
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return files


def test_a_cache_in_a_folder_of_other_files_never_removes_or_counts_them(hostile, tmp_path):
    theirs = _theirs(tmp_path / "shared")
    for k in range(4):
        hostile.serve(f"/f{k}.bin", bytes([k]) * 1000)
    cache = ShardCache(tmp_path / "shared", 2500, QUICK)
    assert cache.cached_bytes() == 0, "files the cache did not make are not its bytes"
    for k in range(4):  # more than the limit holds: the oldest cached files go
        cache.get(hostile.url + f"/f{k}.bin", size=1000).release()
    for name, data in theirs.items():
        assert (tmp_path / "shared" / name).read_bytes() == data, f"{name} removed or changed by the cache"
    assert cache.cached_bytes() <= 2500
    assert cache.is_cached(hostile.url + "/f3.bin", 1000)


@pytest.mark.parametrize(
    "name", ["train.part-0001.tar", "x.ok.tar", "shard.part-abc.tar", "data.ok", "y.lock", "z.part-0123456789abcdef"]
)
def test_a_url_named_like_a_cache_file_is_kept_while_read_and_evicted_after(hostile, tmp_path, name):
    data, other = tar_bytes([0, 1, 2]), b"o" * 3000
    hostile.serve("/" + name, data)
    hostile.serve("/other.bin", other)
    url = hostile.url + "/" + name
    cache = ShardCache(tmp_path / "cache", len(data) + len(other), QUICK)
    pin = cache.get(url, size=len(data))
    assert cache.cached_bytes() == len(data), "the cached file is counted"
    cache.get(hostile.url + "/other.bin", size=len(other)).release()  # makes room: must not touch a pinned file
    assert Path(pin.path).read_bytes() == data, "a file in use was removed"
    pin.release()
    assert cache.is_cached(url, len(data))
    assert hostile.gets("/" + name) == 1
    for k in range(2):  # room for others: the least recently used goes, within the limit
        hostile.serve(f"/more{k}.bin", bytes([k]) * len(data))
        cache.get(hostile.url + f"/more{k}.bin", size=len(data)).release()
    assert cache.cached_bytes() <= cache.limit
    assert not cache.is_cached(url, len(data)), "never evicted: the cache grows past its limit"


def test_a_webdataset_tar_named_like_a_part_file_reads_every_epoch_from_one_download(hostile, tmp_path):
    hostile.serve("/train.part-0001.tar", tar_bytes([0, 1, 2, 3]))
    hostile.serve("/train.part-0002.tar", tar_bytes([3, 2, 1, 0]))
    hostile.serve("/other.bin", b"o" * 100)
    url = hostile.url + "/train.part-{0001..0002}.tar"
    source = gpupipe.WebDataset(url, cache_dir=tmp_path / "cache", retry=QUICK)
    # another download into the cache (another job's) cleans up dead partial downloads: never these tars
    ShardCache(tmp_path / "cache", 1 << 20, QUICK).get(hostile.url + "/other.bin", size=100).release()
    loader = gpupipe.loader(
        source,
        [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")],
        batch_size=4,
        backend="torchvision",
        num_threads=1,
        shuffle=False,
    )
    for _ in range(2):
        assert [int(v) for _, targets in loader for v in targets] == [0, 1, 2, 3, 3, 2, 1, 0]
    assert [hostile.gets(f"/train.part-000{k}.tar") for k in (1, 2)] == [1, 1]


# -- 2. a 206 (part of the file) answered to a request for the whole file --------------------------------


def _partial(data: bytes, part: int, *, head_size: bool):
    """A route answering every GET (none asks for a range) with its first ``part`` bytes as a 206; HEADs
    state the whole size or nothing."""

    def route(h, head):
        h.send_response(200 if head else 206)
        if head and head_size:
            h.send_header("Content-Length", str(len(data)))
        if not head:
            h.send_header("Content-Length", str(part))
            h.send_header("Content-Range", f"bytes 0-{part - 1}/{len(data)}")
        h.end_headers()
        if not head:
            h.wfile.write(data[:part])

    return route


@pytest.mark.parametrize("head_size", [True, False])
def test_a_206_answer_for_a_whole_tar_is_refused_naming_the_url_and_the_status(hostile, tmp_path, head_size):
    data = tar_bytes([0, 1, 2, 3, 0, 1, 2, 3])
    part = len(data) // 2 // 512 * 512  # whole members: nothing but the status tells it is a part
    hostile.routes["/p.tar"] = _partial(data, part, head_size=head_size)
    url = hostile.url + "/p.tar"
    with pytest.raises(RemoteError) as caught:
        gpupipe.WebDataset(url, cache_dir=tmp_path / "cache", retry=QUICK)
    message = str(caught.value)
    assert url in message and "206" in message and f"bytes 0-{part - 1}/{len(data)}" in message, message
    assert not [p.name for p in (tmp_path / "cache").iterdir() if p.name.endswith(".tar")], "nothing cached"


def test_a_206_answer_for_a_manifest_is_refused_naming_the_url(hostile):
    hostile.routes["/m.json"] = _partial(b'{"version": 2, "shards": []}' * 10, 28, head_size=False)
    with pytest.raises(RemoteError, match=r"m\.json.*206 Partial Content"):
        read_small(hostile.url + "/m.json", QUICK)


# -- 3. a pack without checksums: a shard fetched again mid-epoch must be the one first read -------------


def test_a_shard_of_a_pack_without_checksums_replaced_mid_epoch_is_refused_not_mixed(hostile, tmp_path):
    packed = small_pack(tmp_path / "made", 24, shard_size=24 * 1024)
    manifest = rewrite_manifest(packed, lambda m: [s.pop("sha256", None) for s in m["shards"]])
    for path in packed.iterdir():
        hostile.serve(f"/pack/{path.name}", path.read_bytes())
    url = hostile.url + "/pack"
    source = gpupipe.Shards(url, cache_dir=tmp_path / "cache", retry=QUICK)
    source.hold([0]).release()  # the epoch reads shard 0 ...
    name = manifest["shards"][0]["name"]
    cached = Path(source.store.cache.path(f"{url}/{name}"))
    for path in (cached, Path(f"{cached}.ok")):  # ... then it is evicted (another job's room) ...
        path.unlink()
    data = bytearray((packed / name).read_bytes())
    data[-1100] ^= 0xFF  # ... and replaced on the server: the same size, a new ETag, other bytes
    hostile.serve(f"/pack/{name}", bytes(data))
    with pytest.raises(RemoteError, match=f"{name}.*sha256 differs") as caught:
        source.hold([0])  # fetched again later in the epoch: the index read at the start no longer holds
    assert "changed on the server" in str(caught.value)
    assert not cached.exists(), "the other version is not left under the name"
    again = gpupipe.Shards(url, cache_dir=tmp_path / "cache", retry=QUICK)  # a new source reads the new tar
    assert Path(again.hold([0]).pins[0].path).read_bytes() == bytes(data)


# -- 4. a CloudFront signed URL signed again names the same object ----------------------------------------


def test_a_cloudfront_url_signed_again_is_read_from_the_cache(hostile, tmp_path):
    """CloudFront signs with ``Expires``/``Policy``, ``Signature`` and ``Key-Pair-Id``: a custom policy changes
    with each signing (its expiry is inside), so each new signing downloaded and indexed the tar again."""
    hostile.serve("/cf.tar", tar_bytes([1, 2, 0]))
    url = hostile.url + "/cf.tar"
    signings = [
        f"{url}?Policy=eyJTdGF0ZW1lbnQiOlt7IlJlc291cmNlIjoi{k}In1dfQ__&Signature=c2ln{k}~&Key-Pair-Id=K2JCJMDEHXQW{k}"
        for k in ("AAA", "BBB")
    ]
    for signed_url in signings:
        source = gpupipe.WebDataset(signed_url, cache_dir=tmp_path / "cache", retry=QUICK)
        assert source.labels.tolist() == [1, 2, 0]
    assert hostile.gets("/cf.tar") == 1
    cache = ShardCache(tmp_path / "cache", 1 << 20)
    assert cache.path(signings[0]) == cache.path(signings[1]) == cache.path(url)
    assert cache.path(f"{url}?object=a") != cache.path(f"{url}?object=b"), "a parameter that selects is kept"


# -- 5. a folder of images on S3 given as a source ---------------------------------------------------------


def test_an_image_folder_on_s3_given_as_a_source_says_how_to_read_it(s3, tmp_path):  # noqa: F811
    from helpers import flat_folder

    images = flat_folder(tmp_path / "images", 6, classes=2)
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.mkdir("imagefolder")
    for path in sorted(images.rglob("*.png")):
        fs.put_file(str(path), f"imagefolder/train/{path.relative_to(images).as_posix()}")
    pipeline = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]
    with pytest.raises(ValueError) as caught:
        gpupipe.loader("s3://imagefolder/train", pipeline, batch_size=2, backend="torchvision")
    message = str(caught.value)
    assert "s3://imagefolder/train is not a gpupipe pack" in message
    assert "python -m gpupipe.pack" in message and "folder of image files" in message, message


# -- 6. a server whose HEAD says Content-Length: 0 (a HEAD handler that sends no body and says so) -----------


def test_a_head_that_says_zero_bytes_does_not_cap_the_tar_at_zero(hostile, tmp_path):
    data = tar_bytes([2, 0, 1])

    def route(h, head):
        h.send_response(200)
        h.send_header("Content-Length", "0" if head else str(len(data)))
        h.send_header("ETag", _etag(data))
        h.end_headers()
        if not head:
            h.wfile.write(data)

    hostile.routes["/z.tar"] = route
    hostile.serve("/empty.tar", b"")
    source = gpupipe.WebDataset(hostile.url + "/z.tar", cache_dir=tmp_path / "cache", retry=QUICK)
    assert source.labels.tolist() == [2, 0, 1]
    assert hostile.gets("/z.tar") == 1
    with pytest.raises(ValueError, match=r"empty\.tar.*not a readable tar after 0 members"):
        gpupipe.WebDataset(hostile.url + "/empty.tar", cache_dir=tmp_path / "cache", retry=QUICK)


# -- 7. a misspelt AWS_PROFILE: no credentials, said at once ---------------------------------------------------


def test_a_missing_aws_profile_is_refused_at_once_saying_what_to_set(s3, monkeypatch):  # noqa: F811
    import s3fs

    from gpupipe.remote.fetch import RemoteDenied

    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        with pytest.raises(RemoteDenied) as caught:
            gpupipe.WebDataset("s3://bkt/x.tar", retry=Retry(attempts=3, backoff=2, timeout=5, deadline=60))
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
    message = str(caught.value)
    assert "s3://bkt/x.tar" in message and "no-such-profile" in message and "AWS_PROFILE" in message, message


# -- 8. an endpoint the S3 client cannot use (AWS_ENDPOINT_URL without its scheme): said at once -------------


@pytest.mark.parametrize("endpoint", ["127.0.0.1:9000", "htp://127.0.0.1:9000"])
def test_an_unusable_endpoint_url_is_refused_at_once_naming_it(s3, monkeypatch, endpoint):  # noqa: F811
    import s3fs

    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        with pytest.raises(RemoteError) as caught:
            gpupipe.WebDataset("s3://bkt/x.tar", retry=Retry(attempts=3, backoff=2, timeout=5, deadline=60))
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
    message = str(caught.value)
    assert "s3://bkt/x.tar" in message and endpoint in message and "after 3 attempts" not in message, message
    assert "AWS_ENDPOINT_URL" in message and "http://" in message, message
