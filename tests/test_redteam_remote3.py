"""Remote data red-teamed a third time, on real servers on 127.0.0.1 (the hostile HTTP server, Python's file
server): a server silent before its first byte or answering 503 (the error says so, not "file not found"), a
Retry-After given as a date, credentials in the bench's report and log, signed URLs re-signed (one download,
the secret in no file name), and remote packs with the newer features (multi-label targets, resume, weighted
draws) giving what the local pack gives."""

from __future__ import annotations

import email.utils
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from hostile_servers import HostileServer
from servers import FolderServer, stall
from wds_helpers import tar_bytes

import gpupipe
from gpupipe.remote import RemoteError, Retry, ShardCache, remote_info
from gpupipe.remote.fetch import CacheError
from gpupipe.remote.urls import redact

pytest.importorskip("aiohttp")
QUICK = Retry(attempts=2, backoff=0.05, timeout=5, deadline=60)
SECRET = "Sup3rSecr3tValue"
PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]


@pytest.fixture
def hostile():
    server = HostileServer()
    yield server
    server.stop()


def in_subprocess(tmp_path: Path, body: str, timeout: float = 60) -> dict:
    """Runs ``body`` (which sets ``result``) in a fresh interpreter killed after ``timeout`` s: a hang fails
    the test instead of stalling the suite."""
    script = tmp_path / "case.py"
    script.write_text("import json, time\n" + textwrap.dedent(body) + "\nprint('RESULT' + json.dumps(result))\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT") :])


# -- 1. a silent server and a 503: the error says what happened ----------------------------------------


@pytest.mark.parametrize("what", ["asking about", "downloading", "reading"])
def test_a_server_silent_before_its_first_byte_fails_in_time_naming_the_time_out(hostile, tmp_path, what):
    """No byte for longer than ``Retry.timeout``: each attempt ends after it, and the error names the time-out
    (it said ``FileNotFoundError: <url>`` or ``FSTimeoutError:`` with no words)."""
    data = tar_bytes([0, 1])
    stall(hostile, "/slow.tar", data, seconds=30, head=what == "asking about")
    url = hostile.url + "/slow.tar"
    call = {
        "asking about": f"remote_info({url!r}, retry)",
        "downloading": f"ShardCache({str(tmp_path / 'cache')!r}, 1 << 20, retry).get({url!r}, size={len(data)})",
        "reading": f"read_small({url!r}, retry)",
    }[what]
    got = in_subprocess(
        tmp_path,
        f"""
        from gpupipe.remote import Retry, ShardCache, read_small, remote_info
        retry = Retry(attempts=2, backoff=0.0, timeout=1, deadline=30)
        started = time.monotonic()
        try:
            {call}
            result = {{"error": None}}
        except Exception as err:
            result = {{"error": type(err).__name__, "message": str(err), "s": time.monotonic() - started}}
        """,
    )
    assert got["error"] == "RemoteError", got
    assert got["s"] < 15, got
    assert f"{what} {url}" in got["message"] and "no answer within the 1 s time-out (Retry.timeout" in got["message"]
    assert "FileNotFoundError" not in got["message"]


def test_a_503_when_asking_about_a_file_is_named_as_a_503(hostile):
    hostile.status("/busy.tar", 503)
    url = hostile.url + "/busy.tar"
    with pytest.raises(RemoteError) as caught:
        remote_info(url, QUICK)
    message = str(caught.value)
    assert f"asking about {url} failed after 2 attempts" in message and "503" in message
    assert "FileNotFoundError" not in message


def test_a_retry_after_given_as_a_date_is_waited_for(hostile, tmp_path, monkeypatch):
    """RFC 9110 lets Retry-After be a date: the next attempt waits until then (it retried at once)."""
    data = tar_bytes([1, 0])
    pauses: list = []
    monkeypatch.setattr("gpupipe.remote.fetch.time.sleep", pauses.append)
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    hostile.status("/later.tar", 429, times=1, retry_after=when, then=data)
    pin = ShardCache(tmp_path / "cache", 1 << 20, Retry(attempts=2, backoff=0.0, timeout=5)).get(
        hostile.url + "/later.tar", size=len(data), sha256=None, version="v"
    )
    pin.release()
    assert len(pauses) == 1 and 25 <= pauses[0] <= 31, pauses
    past = email.utils.formatdate(time.time() - 60, usegmt=True)
    hostile.status("/past.tar", 503, times=1, retry_after=past, then=data)
    pauses.clear()
    ShardCache(tmp_path / "cache2", 1 << 20, Retry(attempts=2, backoff=0.0, timeout=5)).get(
        hostile.url + "/past.tar", size=len(data), version="v", pin=False
    )
    assert pauses == [0.0]


# -- 2. credentials: never in the bench's report or log ------------------------------------------------


def bench(tmp_path: Path, data: str, *extra: str) -> subprocess.CompletedProcess:
    args = [
        "--data",
        data,
        "--no-train",
        "--backends",
        "torchvision",
        "--quick",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--batch-size",
        "4",
        "--image-size",
        "32",
        "--out",
        str(tmp_path / "out"),
        "--cache-dir",
        str(tmp_path / "cache"),
        *extra,
    ]
    return subprocess.run([sys.executable, "-m", "gpupipe.bench", *args], capture_output=True, text=True, timeout=240)


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    from servers import small_pack

    return small_pack(tmp_path_factory.mktemp("remote3"), 24, shard_size=16 * 1024)


@pytest.mark.slow
def test_the_bench_on_a_url_with_a_password_writes_and_logs_it_redacted(packed, tmp_path):
    """``--data https://user:password@host/pack``: bench.json's settings and the log name the URL with its
    password replaced by ``***`` (both showed it)."""
    server = FolderServer(packed)
    try:
        url = server.url.replace("http://", f"http://reader:{SECRET}@")
        done = bench(tmp_path, url)
        assert done.returncode == 0, done.stderr[-3000:]
        assert SECRET not in done.stdout + done.stderr
        report = json.loads((tmp_path / "out" / "bench.json").read_text())
        assert report["settings"]["data"] == redact(url) == server.url.replace("http://", "http://***@")
        assert [p.name for p in (tmp_path / "out").iterdir() if SECRET.encode() in p.read_bytes()] == []
        refused = bench(tmp_path, url + "/nothing-here")
        assert refused.returncode != 0 and "nothing-here" in refused.stderr
        assert SECRET not in refused.stdout + refused.stderr
    finally:
        server.stop()


# -- 3. signed URLs: re-signed, read from the cache; the secret decides no file name -----------------------


def signed(url: str, signature: str, date: str) -> str:
    return (
        f"{url}?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAEXAMPLE%2F{date[:8]}%2Fus-east-1%2Fs3"
        f"%2Faws4_request&X-Amz-Date={date}&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
        f"&X-Amz-Signature={signature}"
    )


def test_a_re_signed_url_is_read_from_the_cache_and_its_index_kept(hostile, tmp_path):
    """A presigned URL signed again (new signature, date, credential scope) names the same object: the
    cached tar and its kept index serve it (each signing downloaded and indexed the tar again, and the
    cache's file names were digests of the secrets)."""
    hostile.serve("/p.tar", tar_bytes([2, 0, 1]))
    first = signed(hostile.url + "/p.tar", SECRET, "20261206T050000Z")
    again = signed(hostile.url.replace("http://", f"http://user:{SECRET}@") + "/p.tar", "0ther", "20261207T050000Z")
    for url in (first, again):
        source = gpupipe.WebDataset(url, cache_dir=tmp_path / "cache", retry=QUICK)
        assert source.labels.tolist() == [2, 0, 1]
    assert hostile.gets("/p.tar") == 1
    cache = ShardCache(tmp_path / "cache", 1 << 20)
    assert cache.path(first) == cache.path(again) == cache.path(hostile.url + "/p.tar")
    assert not any(SECRET in p.name for p in (tmp_path / "cache").rglob("*"))


def test_a_query_that_selects_another_object_keeps_its_own_cache_entry(hostile, tmp_path):
    """``?versionId=`` (S3), ``?generation=`` (GCS) or any parameter that is not a signature's selects an
    object: the cache keeps one entry per value, and the signing parameters beside them do not merge them."""
    cache = ShardCache(tmp_path / "cache", 1 << 20)
    base = hostile.url + "/v.tar"
    paths = {
        cache.path(signed(base, s, "20261206T050000Z").replace("?X-Amz-A", f"?versionId={v}&X-Amz-A"))
        for v in ("1", "2")
        for s in ("a", "b")
    }
    assert len(paths) == 2
    assert len({cache.path(f"{base}?generation=1"), cache.path(f"{base}?generation=2"), cache.path(base)}) == 3


# -- 4. remote packs with the newer features: what the local pack gives -----------------------------------

TAGS = [["cat"], ["cat", "dog"], ["bird"], ["dog", "bird"], ["dog"]]


@pytest.fixture(scope="module")
def tagged_pack(tmp_path_factory):
    """A multi-label pack of 20 images in 3 tars, served over HTTP."""
    from helpers import flat_folder

    from gpupipe.pack import PackSettings, pack

    root = tmp_path_factory.mktemp("tagged")
    flat_folder(root / "imgs", 20, classes=1)
    listing = root / "tags.txt"
    listing.write_text("".join(f"imgs/class_0/s{i:04d}.png {','.join(TAGS[i % 5])}\n" for i in range(20)))
    pack(gpupipe.FileList(listing), root / "packed", PackSettings(shard_size=24 * 1024), workers=1, progress=False)
    assert len(list((root / "packed").glob("*.tar"))) >= 2
    server = FolderServer(root / "packed")
    yield root / "packed", server
    server.stop()


def batches(source, backend: str, state=None, take=None):
    loader = gpupipe.loader(source, PIPELINE, batch_size=3, backend=backend, num_threads=1, seed=5, device="cpu")
    if state is not None:
        loader.load_state_dict(state)
    out = []
    for images, targets in loader:
        out.append((images.clone(), targets.clone()))
        if take is not None and len(out) == take:
            return out, loader.state_dict()
    return out, None


def same(a, b) -> bool:
    return len(a) == len(b) > 0 and all(torch.equal(x, z) and torch.equal(y, w) for (x, y), (z, w) in zip(a, b))


def test_a_remote_multi_label_pack_gives_and_resumes_the_local_batches(tagged_pack, tmp_path):
    """Multi-hot targets, the order, and a resume mid-epoch (from the remote loader's state, and from the
    local loader's: the same dataset) are the local pack's, over a URL with a password (torchvision: remote
    and local packs agree on DALI in ``test_remote``, multi-label packs in ``test_multilabel``; a DALI build
    for this tiny pack costs seconds)."""
    backend = "torchvision"
    packed, server = tagged_pack
    url = server.url.replace("http://", f"http://reader:{SECRET}@")
    remote = gpupipe.Shards(url, cache_dir=tmp_path / "cache", retry=QUICK)
    assert remote.kind is gpupipe.TargetKind.MULTI_LABEL and remote.classes == gpupipe.Shards(packed).classes
    local, _ = batches(packed, backend)
    assert local[0][1].dtype == torch.float32 and local[0][1].shape == (3, 3)
    got, _ = batches(remote, backend)
    assert same(got, local)
    head, state = batches(remote, backend, take=2)
    assert same(head, local[:2]) and SECRET not in json.dumps(state) + repr(remote)
    rest, _ = batches(gpupipe.Shards(url, cache_dir=tmp_path / "cache", retry=QUICK), backend, state)
    assert same(rest, local[2:])
    _, local_state = batches(packed, backend, take=2)
    rest, _ = batches(remote, backend, local_state)
    assert same(rest, local[2:])


def test_weighted_draws_over_a_remote_pack_are_refused_naming_weights(tagged_pack, tmp_path):
    packed, server = tagged_pack
    remote = gpupipe.Shards(server.url, cache_dir=tmp_path / "cache", retry=QUICK)
    with pytest.raises(ValueError, match=r"weights=: .*Shards reads tars"):
        gpupipe.loader(remote, PIPELINE, weights=[1.0] * len(remote), batch_size=3, device="cpu")


# -- 5. a cache on a read-only file system: its copies used, a missing one a named error -------------------


def read_only(folder: Path, code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``code`` run by Python with ``folder`` mounted read-only (a private mount namespace: ``unshare -m``)."""
    shell = (
        f'mount --bind "{folder}" "{folder}" && mount -o remount,bind,ro "{folder}" && exec "{sys.executable}" -c "$0"'
    )
    return subprocess.run(["unshare", "-m", "sh", "-c", shell, code], capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_a_filled_cache_on_a_read_only_file_system_is_read_and_a_missing_file_named(packed, tmp_path):
    """A cache filled beforehand and then mounted read-only (a shared, pre-filled cache): its checked copies
    are read as they are (every read failed: "cannot write in the cache"); a file it lacks is a CacheError
    naming the folder and saying it is read-only."""
    probe = read_only(tmp_path, "pass")
    if probe.returncode != 0:
        pytest.skip(f"no read-only bind mounts here: {probe.stderr.strip()[-200:]}")
    server = FolderServer(packed)
    try:
        cache = tmp_path / "cache"
        labels = [
            int(v)
            for _, y in gpupipe.loader(
                gpupipe.Shards(server.url, cache_dir=cache, retry=QUICK),
                PIPELINE,
                batch_size=4,
                backend="torchvision",
                seed=2,
            )
            for v in y
        ]
        fetched = dict(server.tar_gets())
        code = f"""
import json, gpupipe
from gpupipe.remote import Retry, ShardCache
pipeline = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]
loader = gpupipe.loader(gpupipe.Shards({server.url!r}, cache_dir={str(cache)!r}), pipeline, batch_size=4,
                        backend="torchvision", seed=2)
result = {{"labels": [int(v) for _, y in loader for v in y]}}
try:
    ShardCache({str(cache)!r}, 1 << 20, Retry(attempts=1)).get({server.url + "/manifest.json"!r}, version="x")
except Exception as err:
    result["error"] = [type(err).__name__, str(err)]
print("RESULT" + json.dumps(result))
"""
        done = read_only(cache, code)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
        assert lines, done.stderr[-3000:]
        got = json.loads(lines[-1][len("RESULT") :])
        assert got["labels"] == labels and len(labels) == 24
        assert dict(server.tar_gets()) == fetched, "no tar fetched again"
        assert got["error"][0] == "CacheError" and str(cache) in got["error"][1] and "read-only" in got["error"][1]
    finally:
        server.stop()


def test_a_partial_file_removed_before_the_download_opens_it_is_not_renamed_into_place(hostile, tmp_path, monkeypatch):
    """The part file is removed (by hand, or by a cleaner) between its making and the download's first
    write: the download makes a new one that no lock holds, which another process may remove as left over;
    it is not taken for the locked one (it was renamed into place, or the test that removed it mid-download
    failed one time in four under load)."""
    import gpupipe.remote.cache as cache_module

    real = cache_module.download

    def removed_first(url, dst, *args, **kwargs):
        Path(dst).unlink()
        return real(url, dst, *args, **kwargs)

    monkeypatch.setattr(cache_module, "download", removed_first)
    hostile.serve("/r.tar", b"r" * 1000)
    cache = ShardCache(tmp_path / "cache", 1 << 20, QUICK)
    with pytest.raises(CacheError, match="was removed from the cache while"):
        cache.get(hostile.url + "/r.tar", size=1000)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir() if ".part-" in p.name or p.suffix == ".tar") == []


# -- 6. a copy of another version held by another process: said, then given up on, never waited on for ever --


def test_a_changed_file_whose_old_copy_another_process_reads_is_waited_for_in_words_and_in_time(
    hostile, tmp_path, monkeypatch, caplog
):
    """A tar replaced on the server while another process (a job left running, a notebook) still reads the
    old cached copy: the new job cannot replace it under that reader. It waited for ever without a word; it
    now warns after ``IN_USE_WAIT`` s naming the URL, and gives up after ``Retry.deadline`` with a
    ``CacheError`` saying what holds it. Once the reader lets go, the new copy is fetched and read."""
    import hashlib
    import logging
    import threading

    monkeypatch.setattr("gpupipe.remote.cache.IN_USE_WAIT", 0.3)
    old, new = b"o" * 4096, b"n" * 4096
    hostile.serve("/x.tar", old)
    url = hostile.url + "/x.tar"
    reader = ShardCache(tmp_path / "cache", 1 << 20, QUICK).get(url, size=4096, sha256=hashlib.sha256(old).hexdigest())
    hostile.serve("/x.tar", new)
    later = ShardCache(tmp_path / "cache", 1 << 20, Retry(attempts=1, timeout=5, deadline=1.5))
    outcome: dict = {}

    def fetch() -> None:
        try:
            outcome["pin"] = later.get(url, size=4096, sha256=hashlib.sha256(new).hexdigest())
        except Exception as err:  # noqa: BLE001 -- handed to the test
            outcome["error"] = err

    with caplog.at_level(logging.WARNING, logger="gpupipe.remote"):
        started = time.monotonic()
        thread = threading.Thread(target=fetch, daemon=True)
        thread.start()
        thread.join(20)
    assert not thread.is_alive(), "waited for ever"
    assert 1.4 < time.monotonic() - started < 10
    assert isinstance(outcome.get("error"), CacheError), outcome
    assert redact(url) in str(outcome["error"]) and "another process" in str(outcome["error"])
    assert "Retry.deadline" in str(outcome["error"])
    assert any(url in r.getMessage() and "another process" in r.getMessage() for r in caplog.records)
    assert Path(reader.path).read_bytes() == old, "the reader's copy was left alone"
    reader.release()
    pin = later.get(url, size=4096, sha256=hashlib.sha256(new).hexdigest())
    try:
        assert Path(pin.path).read_bytes() == new
    finally:
        pin.release()


# -- 7. two torchrun ranks filling one cache at once from a server that answers 503 first -----------------


@pytest.mark.slow
def test_two_ranks_filling_one_cache_from_a_busy_server_read_the_local_batches(packed, tmp_path):
    """Real torchrun (2 ranks, gloo), one cache folder, every tar answered 503 (``Retry-After: 1``) at its
    first GET: each rank reads exactly the local pack's batches for its rank, each tar is downloaded once
    for the node (one 503, one 200), and no partial file is left."""
    from helpers import two_ranks

    server = FolderServer(packed)
    tars = sorted(p.name for p in packed.glob("*.tar"))
    server.unavailable.update({f"/{name}": 1 for name in tars})
    try:
        ranks = two_ranks(
            tmp_path,
            f"""
from gpupipe.remote import Retry
pipeline = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]
def read(source):
    loader = gpupipe.loader(source, pipeline, batch_size=4, backend="torchvision", num_threads=1, seed=4)
    return [[sample_ids(x), y.tolist()] for x, y in loader]
retry = Retry(attempts=3, backoff=0.05, timeout=10)
remote = gpupipe.Shards({server.url!r}, cache_dir={str(tmp_path / "cache")!r}, retry=retry)
result = {{"remote": read(remote), "local": read({str(packed)!r})}}
""",
        )
    finally:
        server.stop()
    for rank in ranks:
        assert rank["remote"] == rank["local"] and len(rank["local"]) > 0
    ids = sorted(i for rank in ranks for ids, _ in rank["local"] for i in ids)
    assert ids == list(range(24))
    assert dict(server.tar_gets()) == {f"/{name}": 2 for name in tars}
    assert [p.name for p in (tmp_path / "cache").iterdir() if ".part-" in p.name] == []


def test_debug_logging_of_the_file_systems_shows_no_signature_or_password(hostile, tmp_path, caplog):
    """With DEBUG logging on (``logging.basicConfig(level=logging.DEBUG)`` while chasing a problem), fsspec's
    HTTP file system logged every URL whole, signature and password included."""
    import logging

    hostile.serve("/d.tar", tar_bytes([1, 2]))
    url = signed(hostile.url.replace("http://", f"http://user:{SECRET}@") + "/d.tar", SECRET, "20261206T050000Z")
    with caplog.at_level(logging.DEBUG):
        source = gpupipe.WebDataset(url, cache_dir=tmp_path / "cache", retry=QUICK)
    assert source.labels.tolist() == [1, 2]
    assert any("d.tar" in r.getMessage() for r in caplog.records if r.name.startswith("fsspec"))
    assert [r.getMessage() for r in caplog.records if SECRET in r.getMessage()] == []
    try:  # fsspec also logs the errors of its requests with their tracebacks
        raise ValueError(f"cannot read {url}")
    except ValueError as err:
        with caplog.at_level(logging.DEBUG):
            logging.getLogger("fsspec.http").debug("", exc_info=err)
    assert SECRET not in caplog.text and "X-Amz-Signature=***" in caplog.text


def test_a_tar_of_unstated_size_over_the_cache_limit_names_cache_limit(hostile, tmp_path):
    """A tar sent without Content-Length is read up to ``cache_limit``; past it the error said only "more than
    the 10,240 bytes expected", though nothing stated a size: it says so and names the limit that capped it."""
    data = tar_bytes([0, 1, 2, 0, 1, 2])
    hostile.no_length("/big.tar", data)
    with pytest.raises(RemoteError, match=r"10,240 bytes expected; it states no size.*cache_limit"):
        gpupipe.WebDataset(hostile.url + "/big.tar", cache_dir=tmp_path / "cache", cache_limit="10KB", retry=QUICK)
