"""Remote data red-teamed a fifth time, on real servers on 127.0.0.1: a tar whose server states no size
and closes the connection early (nothing tells the cut from the end), and tar URLs holding spaces and
non-ASCII letters over HTTP and S3."""

from __future__ import annotations

import pytest
from hostile_servers import HostileServer, _headers
from servers import FolderServer, s3  # noqa: F401 -- s3: a fixture
from wds_helpers import tar_bytes

import gpupipe
from gpupipe.remote import Retry

pytest.importorskip("aiohttp")
QUICK = Retry(attempts=3, backoff=0.05, timeout=5, deadline=60)
LABELS = [1, 0, 2, 1, 1, 0]


@pytest.fixture
def hostile():
    server = HostileServer()
    yield server
    server.stop()


def _cut_without_length(server: HostileServer, path: str, data: bytes, times: int) -> None:
    """The first ``times`` GETs send half of ``data`` with no Content-Length and close: a body that ends with
    its connection, which looks whole."""
    left = [times]

    def route(h, head):
        _headers(h, 200, None, None)
        if head:
            return
        with server.lock:
            cut = left[0] > 0
            left[0] -= 1
        h.wfile.write(data[: len(data) // 2] if cut else data)
        h.close_connection = True

    server.routes[path] = route


def test_a_tar_of_unstated_size_cut_once_is_fetched_again_and_read_whole(hostile, tmp_path):
    _cut_without_length(hostile, "/a.tar", tar_bytes(LABELS), times=1)
    source = gpupipe.WebDataset(f"{hostile.url}/a.tar", cache_dir=tmp_path / "cache", retry=QUICK)
    assert source.labels.tolist() == LABELS and source.problems == []
    assert hostile.gets("/a.tar") == 2


def test_a_tar_of_unstated_size_always_cut_is_a_problem_naming_it_never_half_the_samples_silently(hostile, tmp_path):
    _cut_without_length(hostile, "/a.tar", tar_bytes(LABELS), times=1 << 30)
    source = gpupipe.WebDataset(f"{hostile.url}/a.tar", cache_dir=tmp_path / "cache", retry=QUICK)
    read = source.labels.tolist()
    assert 0 < len(read) < len(LABELS) and read == LABELS[: len(read)], "the samples before the cut, no others"
    assert [(p.path, p.reason.split(" after ")[0]) for p in source.problems] == [
        (f"{hostile.url}/a.tar", "no end marker")
    ]
    assert hostile.gets("/a.tar") == 2, "fetched again once before it is taken as it is"


def test_tar_urls_with_spaces_and_non_ascii_letters_read_over_http(tmp_path):
    served = tmp_path / "served" / "my data"
    served.mkdir(parents=True)
    (served / "shard 0.tar").write_bytes(tar_bytes([1, 0, 2]))
    (served / "é+1.tar").write_bytes(tar_bytes([2, 2]))
    server = FolderServer(tmp_path / "served")
    try:
        for url, labels in [
            (f"{server.url}/my data/shard 0.tar", [1, 0, 2]),
            (f"{server.url}/my%20data/shard%200.tar", [1, 0, 2]),  # written encoded: not encoded again
            (f"{server.url}/my data/é+1.tar", [2, 2]),  # "+" is a plus in a path, not a space
        ]:
            source = gpupipe.WebDataset(url, cache_dir=tmp_path / "cache", retry=QUICK)
            assert source.labels.tolist() == labels, url
    finally:
        server.stop()


def test_s3_keys_with_spaces_and_non_ascii_letters_are_read_and_a_percent_is_part_of_the_key(s3, tmp_path):  # noqa: F811
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.mkdir("spaces")
    fs.pipe_file("spaces/my data/shard 0.tar", tar_bytes([1, 0, 2]))
    fs.pipe_file("spaces/my data/é+1.tar", tar_bytes([2, 2]))
    for url, labels in [("s3://spaces/my data/shard 0.tar", [1, 0, 2]), ("s3://spaces/my data/é+1.tar", [2, 2])]:
        assert gpupipe.WebDataset(url, cache_dir=tmp_path / "cache", retry=QUICK).labels.tolist() == labels
    with pytest.raises(gpupipe.remote.RemoteMissing, match="my%20data/shard%200.tar"):  # S3 keys are not URLs
        gpupipe.WebDataset("s3://spaces/my%20data/shard%200.tar", cache_dir=tmp_path / "cache", retry=QUICK)
