"""The progress rule: nothing for short work; past DELAY_S a bar on a terminal, log lines elsewhere."""

import io
import logging

import pytest

from gpupipe import progress
from gpupipe.progress import Progress


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class Terminal(io.StringIO):
    def isatty(self):
        return True


def run(stream, durations, total=10, unit="file"):
    clock, log = Clock(), logging.getLogger("test-progress")
    with Progress("scan", total=total, unit=unit, logger=log, stream=stream, clock=clock) as p:
        for at in durations:
            clock.now = at
            p.update(1)
    return p


def test_short_work_shows_nothing_on_a_terminal_or_in_the_log(caplog):
    terminal = Terminal()
    with caplog.at_level(logging.INFO, logger="test-progress"):
        run(terminal, [0.1 * i for i in range(10)])
        run(io.StringIO(), [0.1 * i for i in range(10)])
    assert terminal.getvalue() == "" and caplog.records == []


def test_long_work_on_a_terminal_gets_a_bar_and_no_log_line(caplog):
    terminal = Terminal()
    with caplog.at_level(logging.INFO, logger="test-progress"):
        p = run(terminal, [float(i) for i in range(10)])
    assert "scan" in terminal.getvalue() and "10/10" in terminal.getvalue()
    assert caplog.records == [] and p.mode == "closed"


def test_long_work_elsewhere_logs_count_rate_and_time_left(caplog):
    not_a_terminal = io.StringIO()
    with caplog.at_level(logging.INFO, logger="test-progress"):
        run(not_a_terminal, [2.0 * i for i in range(1, 11)])  # 10 files over 20 s
    lines = [r.getMessage() for r in caplog.records]
    assert not_a_terminal.getvalue() == "", "no bar where nobody watches"
    assert lines[0] == "scan: 2/10 files, 0.5 files/s, about 16 s left", lines
    assert len(lines) == 3, "one at DELAY_S, one LOG_EVERY_S later, one at the end"
    assert lines[-1] == "scan: 10/10 files, 0.5 files/s, about 0 s left (done in 20 s)"


def test_bytes_are_shown_scaled():
    p = Progress("download", total=10 * 2**20, unit="B", clock=Clock())
    p.done = 3 * 2**20
    p.clock.now = 2.0
    assert p.line() == "download: 3.0 MiB/10.0 MiB, 1.5 MiB/s, about 5 s left"


@pytest.mark.parametrize("stream, expected", [(Terminal(), True), (io.StringIO(), False), (None, False)])
def test_what_counts_as_a_terminal(stream, expected):
    assert progress.is_terminal(stream) is expected


@pytest.fixture
def always(monkeypatch):
    """Progress from the first unit, a log line for every update (stderr is not a terminal under pytest)."""
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    monkeypatch.setattr(progress, "LOG_EVERY_S", 0.0)


def test_the_cold_scan_reports_progress(always, caplog, image_folder):
    from gpupipe.sources import scan

    paths = [str(p) for p in sorted(image_folder.rglob("*.jpg"))] * 120  # 2,160: the parallel path's size
    with caplog.at_level(logging.INFO, logger="gpupipe.scan"):
        result = scan.scan(paths, max_pixels=10**8, max_file_size=10**9, cache_dir=None, workers=1)
    assert result.bad == {}
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("scan: ")]
    assert len(lines) >= 3 and lines[-1].startswith("scan: 2,160/2,160 files") and "done in" in lines[-1]


def test_pack_verify_reports_progress(always, caplog, image_folder, tmp_path):
    from gpupipe.pack import PackSettings, pack, verify

    dst = tmp_path / "packed"
    pack(image_folder, dst, PackSettings(shard_size=16 * 1024), workers=1, progress=False)
    with caplog.at_level(logging.INFO, logger="gpupipe.pack"):
        assert verify(dst) == []
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("verify: ")]
    shards = len(list(dst.glob("*.tar")))
    assert shards > 1 and lines[-1].startswith(f"verify: {shards}/{shards} shards")


def test_webdataset_indexing_reports_progress(always, caplog, tmp_path):
    import io as _io
    import tarfile

    import gpupipe
    from helpers import textured_image, write_image
    import numpy as np

    tars = []
    for t in range(3):
        path = tmp_path / f"shard-{t}.tar"
        with tarfile.open(path, "w") as tar:
            for k in range(2):
                img = write_image(tmp_path / "x.jpg", textured_image(np.random.default_rng(k), 16, 16)).read_bytes()
                for name, data in ((f"s{t}{k}.jpg", img), (f"s{t}{k}.cls", b"1")):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, _io.BytesIO(data))
        tars.append(str(path))
    with caplog.at_level(logging.INFO, logger="gpupipe.sources"):
        source = gpupipe.sources.WebDataset(tars, cache_dir=tmp_path / "cache")
    assert len(source) == 6
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("WebDataset index: ")]
    assert lines[-1].startswith("WebDataset index: 3/3 tars")


def test_a_download_reports_progress_in_bytes(always, caplog, tmp_path):
    from servers import FolderServer

    from gpupipe.remote.fetch import Retry, download

    served = tmp_path / "served"
    served.mkdir()
    (served / "big.bin").write_bytes(bytes(range(256)) * 4096)  # 1 MiB
    srv = FolderServer(served)
    try:
        with caplog.at_level(logging.INFO, logger="gpupipe.remote"):
            download(f"{srv.url}/big.bin", str(tmp_path / "got.bin"), Retry(), size=2**20)
    finally:
        srv.stop()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("download big.bin: ")]
    assert lines and lines[-1].startswith("download big.bin: 1.0 MiB/1.0 MiB") and "done in" in lines[-1]
