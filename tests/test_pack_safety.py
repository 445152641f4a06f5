"""The packer under concurrent runs, a full disk and a folder packed into itself."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpupipe.pack import PackError, pack, verify
from gpupipe.pack.journal import DstLock
from helpers import flat_folder, make_image_folder


def cli(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "gpupipe.pack", *map(str, args)], capture_output=True, text=True,
                          **kwargs)


def test_a_second_packer_on_the_same_folder_fails_fast(tmp_path):
    src = flat_folder(tmp_path / "src", 6)
    dst = tmp_path / "dst"
    dst.mkdir()
    with DstLock(dst):
        started = time.perf_counter()
        proc = cli(src, dst, "-q")
        assert time.perf_counter() - started < 60
    assert proc.returncode == 2
    assert f"another pack is writing into {dst} (process {os.getpid()})" in proc.stderr
    assert not (dst / "manifest.json").exists()


@pytest.mark.slow
def test_two_packers_started_together_leave_one_sound_folder(tmp_path):
    src = tmp_path / "src"
    make_image_folder(src, {"a": 40, "b": 40}, sizes=(60, 90))
    dst = tmp_path / "dst"
    runs = [subprocess.Popen([sys.executable, "-m", "gpupipe.pack", str(src), str(dst), "-q", "--workers", "1",
                              "--shard-size", "64KB"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    results = [(run.wait(timeout=300), run.stderr.read()) for run in runs]
    codes = sorted(code for code, _ in results)
    assert codes in ([0, 2], [0, 0]), results  # the second either lost the race for the lock or resumed after
    for code, err in results:
        assert code == 0 or "another pack is writing into" in err, err
    assert verify(dst) == []


def test_a_full_disk_gives_one_clear_error_and_leaves_no_temporary_file(tmp_path):
    src = tmp_path / "src"
    make_image_folder(src, {"a": 12}, sizes=(120, 160))
    dst = tmp_path / "dst"
    # RLIMIT_FSIZE makes the kernel refuse writes past 40 KB (EFBIG), as a full disk refuses them (ENOSPC).
    limit = ("import resource, signal, runpy, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
             "resource.setrlimit(resource.RLIMIT_FSIZE, (40000, 40000)); "
             f"sys.argv = ['gpupipe.pack', {str(src)!r}, {str(dst)!r}, '-q', '--workers', '1']; "
             "runpy.run_module('gpupipe.pack', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", limit], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: cannot write into {dst}: File too large")
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert not list(dst.glob("*.tmp")) and not (dst / "manifest.json").exists()
    assert cli(src, dst, "-q").returncode == 0, "a rerun with room finishes the pack"
    assert verify(dst) == []


def test_packing_into_a_folder_inside_the_source_is_refused(tmp_path):
    src = flat_folder(tmp_path / "src", 4)
    with pytest.raises(ValueError, match="lies inside the input"):
        pack(src, src / "packed", workers=1, progress=False)
    with pytest.raises(ValueError, match="lies inside the input"):
        pack(src, src, workers=1, progress=False)
    proc = cli(src, src / "class_0" / "out", "-q")
    assert proc.returncode == 2 and "lies inside the input" in proc.stderr
    assert not (src / "packed").exists()


def test_a_journal_that_cannot_be_read_is_a_clear_error(tmp_path):
    src = flat_folder(tmp_path / "src", 4)
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / ".pack-journal.json").write_text("{not json")
    with pytest.raises(PackError, match="is unreadable"):
        pack(src, dst, workers=1, progress=False)


def test_verify_refuses_a_manifest_listing_a_shard_that_is_not_there(tmp_path):
    src = flat_folder(tmp_path / "src", 4)
    dst = tmp_path / "dst"
    pack(src, dst, workers=1, progress=False)
    (dst / "shard-000000.tar").unlink()
    problems = verify(dst)
    assert problems == ["shard-000000.tar: missing"]
    assert Path(dst / "manifest.json").is_file()
