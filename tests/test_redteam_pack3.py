"""Red team, packing round 3: interruptions, failed writes, odd file names, settings out of range, and
packs altered after they were written (shards swapped, manifests whose counts disagree)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import make_image_folder, rewrite_manifest
from PIL import Image

from gpupipe.pack import ConvertSettings, PackError, PackSettings, pack, verify
from gpupipe.pack.__main__ import main
from gpupipe.pack.manifest import read_sources
from gpupipe.sources.shards import Shards

SMALL = PackSettings(shard_size=64 * 1024)


def _noise_folder(root: Path, count: int, side: int = 64) -> Path:
    """``count`` BMPs of noise (each re-encoded to a JPEG of a few KB) in one class."""
    (root / "a").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(count):
        Image.fromarray(rng.integers(0, 255, (side, side, 3), np.uint8)).save(root / "a" / f"{i}.bmp")
    return root


def _cli(*args, prelude: str = "", **kwargs) -> subprocess.CompletedProcess:
    code = f"{prelude}import runpy, sys; sys.argv = ['gpupipe.pack', *{list(map(str, args))!r}]; " + (
        "runpy.run_module('gpupipe.pack', run_name='__main__')"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, **kwargs)


# -- the reader side: a pack altered after it was written -------------------------------------------------------


def test_same_size_shards_swapped_in_a_pack_read_without_checksums_are_refused_naming_the_shard(tmp_path):
    # Was: tars are padded to 10 KiB records, so shards of one pack often have the same size; a pack over
    # 64 MiB is opened without hashing, and two swapped (or renamed) shards were read silently, every sample
    # with the label of another image.
    src = make_image_folder(tmp_path / "src", {"a": 30, "b": 30}, sizes=(40, 60))
    assert src
    dst = tmp_path / "dst"
    pack(tmp_path / "src", dst, SMALL, workers=1, progress=False)
    shards = json.loads((dst / "manifest.json").read_text())["shards"]
    by_size: dict[int, list[str]] = {}
    for shard in shards:
        by_size.setdefault(shard["bytes"], []).append(shard["name"])
    first, second = next(names for names in by_size.values() if len(names) > 1)[:2]
    os.replace(dst / first, tmp_path / "moved")
    os.replace(dst / second, dst / first)
    os.replace(tmp_path / "moved", dst / second)
    with pytest.raises(ValueError, match=rf"{first}.*not the shard packed"):
        Shards(dst, checksums=False)
    assert any(first in problem for problem in verify(dst))


def test_a_manifest_whose_totals_disagree_or_that_lists_a_shard_twice_is_refused(tmp_path):
    # Was: a shard dropped from (or repeated in) a re-signed manifest was read as a smaller (or doubled) pack.
    make_image_folder(tmp_path / "src", {"a": 20, "b": 20}, sizes=(40, 60))
    dst = tmp_path / "dst"
    pack(tmp_path / "src", dst, SMALL, workers=1, progress=False)
    original = (dst / "manifest.json").read_text()
    rewrite_manifest(dst, lambda m: m["shards"].pop())
    with pytest.raises(ValueError, match=r"manifest\.json: totals\.samples .* the shards list"):
        Shards(dst)
    (dst / "manifest.json").write_text(original)
    rewrite_manifest(dst, lambda m: m["shards"].append(m["shards"][0]))
    with pytest.raises(ValueError, match=r"shards\[\d+\]\.name 'shard-000000\.tar' is listed twice"):
        Shards(dst)


def test_reading_an_unfinished_pack_says_it_is_one_and_how_to_finish_it(tmp_path):
    # Was: "DST is not a packed folder: cannot read manifest.json (No such file or directory)".
    make_image_folder(tmp_path / "src", {"a": 3}, sizes=(40, 60))
    dst = tmp_path / "dst"
    pack(tmp_path / "src", dst, workers=1, progress=False)
    (dst / "manifest.json").unlink()  # as a run stopped before its manifest leaves it
    with pytest.raises(ValueError, match=r"an unfinished pack: .*run the same pack command again"):
        Shards(dst)


# -- odd file names --------------------------------------------------------------------------------------------

NAMES = [
    "new\nline.jpg",
    "tab\t.jpg",
    "back\\slash.jpg",
    "form\x0cfeed.jpg",
    "vt\x0b.jpg",
    "fs\x1c.jpg",
    "gs\x1d.jpg",
    "rs\x1e.jpg",
    "nel\x85.jpg",
    "ls\u2028.jpg",
    "ps\u2029.jpg",
    "cr\r.jpg",
    "\\x41.jpg",
    "\\\\n.jpg",
    "e\u0301.jpg",
    "\u00e9.jpg",
    "x" * 240 + ".jpg",
]


def test_sources_tsv_gives_back_every_file_name_even_ones_with_line_breaking_characters(tmp_path):
    # Was: a name holding \x0b, \x0c, \x1c-\x1e, \x85, \u2028 or \u2029 was written raw, and reading
    # sources.tsv (split into lines as Python's str.splitlines splits them) failed or mis-paired the files.
    make_image_folder(tmp_path / "src", {"a": 1}, sizes=(40, 60))
    folder = tmp_path / "src" / "a"
    for name in NAMES:
        shutil.copy(folder / "img_000.jpg", folder / name)
    odd_class = tmp_path / "src" / "cl\u2028ass"
    odd_class.mkdir()
    shutil.copy(folder / "img_000.jpg", odd_class / "z.jpg")
    raw = os.fsencode(folder) + b"/\xff\xfe.jpg"  # not UTF-8
    shutil.copy(folder / "img_000.jpg", raw)
    dst = tmp_path / "dst"
    pack(tmp_path / "src", dst, workers=1, progress=False)
    rows = read_sources(dst)
    expected = {str(folder / n) for n in [*NAMES, "img_000.jpg"]} | {str(odd_class / "z.jpg"), os.fsdecode(raw)}
    assert sorted(path for path, _ in rows.values()) == sorted(expected)
    assert len((dst / "sources.tsv").read_text(encoding="utf-8").splitlines()) == len(expected) + 1
    classes = json.loads((dst / "manifest.json").read_text())["classes"]
    assert {rows[k][0]: rows[k][1] for k in rows}[str(odd_class / "z.jpg")] == str(classes.index("cl\u2028ass"))


# -- settings --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings, fragment",
    [
        (lambda: ConvertSettings(max_size=0), r"ConvertSettings\.max_size must be an int >= 1, got 0"),
        (lambda: ConvertSettings(quality=101), r"ConvertSettings\.quality must be an int in 1\.\.100, got 101"),
        (lambda: ConvertSettings(max_pixels=0), r"ConvertSettings\.max_pixels must be an int >= 1, got 0"),
        (lambda: ConvertSettings(max_file_size=-1), r"ConvertSettings\.max_file_size must be an int >= 1, got -1"),
        (lambda: PackSettings(shard_size=0), r"PackSettings\.shard_size must be an int >= 1, got 0"),
    ],
)
def test_settings_out_of_range_are_refused_naming_the_field(settings, fragment):
    # Was: ConvertSettings(max_size=0) packed every image as 1x1 pixels; max_pixels=0 skipped every input.
    with pytest.raises(ValueError, match=fragment):
        settings()


@pytest.mark.parametrize("value", ["0", "-1"])
def test_max_pixels_below_one_is_refused_by_the_command(tmp_path, value, capsys):
    # Was: accepted, then every input skipped as "too many pixels: ... exceeds the 0 MP limit".
    make_image_folder(tmp_path / "src", {"a": 1}, sizes=(40, 60))
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path / "src"), str(tmp_path / "dst"), f"--max-pixels={value}"])
    assert exit_.value.code == 2
    assert f"--max-pixels must be >= 1, got {value}" in capsys.readouterr().err
    assert not (tmp_path / "dst").exists()


# -- failed writes and signals (subprocesses) ------------------------------------------------------------------


@pytest.mark.slow
def test_a_full_disk_while_writing_the_sources_names_the_file_and_leaves_no_temporary_file(tmp_path):
    # Was: "error: [Errno 27] File too large" (no file named), and sources.tsv.tmp left behind: the
    # journal, sources.tsv and manifest.json were written without the shards' care.
    folder = tmp_path / ("s" * 100) / ("c" * 100)
    folder.mkdir(parents=True)
    for i in range(300):  # sources.tsv: 300 lines of > 250 characters, more than the 70 KB each file may have
        Image.new("RGB", (8, 8), (i % 250, 9, 9)).save(folder / f"{i:04d}{'n' * 40}.png")
    dst = tmp_path / "dst"
    prelude = (
        "import resource, signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (70000, 70000)); "
    )
    proc = _cli(folder.parent, dst, "-q", "--workers", "1", "--shard-size", "64KB", prelude=prelude)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr == f"error: cannot write {dst / 'sources.tsv'}: File too large\n"
    assert sorted(p.name for p in dst.glob("*.tmp")) == [] and not (dst / "manifest.json").exists()
    assert _cli(folder.parent, dst, "-q", "--shard-size", "64KB").returncode == 0, "a rerun with room finishes"
    assert verify(dst) == [] and len(read_sources(dst)) == 300


@pytest.mark.slow
@pytest.mark.parametrize(
    "signum, status, said", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")], ids=["ctrl-c", "sigterm"]
)
def test_a_pack_stopped_mid_way_says_how_to_resume_in_one_line_and_the_rerun_finishes(tmp_path, signum, status, said):
    # Was: Ctrl-C printed a KeyboardInterrupt traceback from the packer and from every worker process; SIGTERM
    # (kill, a scheduler's time limit, docker stop) killed the packer with no word, its worker processes printed
    # a BrokenPipeError traceback each, and the unfinished shard's .tmp stayed.
    src = _noise_folder(tmp_path / "src", 400)
    dst = tmp_path / "dst"
    args = [sys.executable, "-m", "gpupipe.pack", str(src), str(dst), "-q", "--workers", "2", "--shard-size", "64KB"]
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)

    def a_shard_is_journaled() -> bool:  # a finished shard (not only its files): the rerun then resumes after it
        try:
            return bool(json.loads((dst / ".pack-journal.json").read_text())["shards"])
        except (OSError, ValueError, KeyError):
            return False

    deadline = time.monotonic() + 120
    while not a_shard_is_journaled() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    if proc.poll() is not None:
        pytest.skip("the pack finished before it could be stopped")
    proc.send_signal(signum)
    stderr = proc.communicate(timeout=120)[1]
    assert proc.returncode == status, stderr[-3000:]
    assert stderr == f"{said}: the finished shards are kept in {dst}; run the same command again to resume\n"
    assert not list(dst.glob("*.tmp")) and not (dst / "manifest.json").exists()
    rerun = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0 and "resumed after" in rerun.stdout, rerun.stderr[-3000:]
    assert verify(dst) == [] and len(Shards(dst)) == 400


def test_a_write_failing_inside_pack_is_a_pack_error_naming_the_file(tmp_path, monkeypatch):
    # Was: a raw OSError from the journal or manifest write (no PackError for gpupipe.pack.pack's callers).
    make_image_folder(tmp_path / "src", {"a": 2}, sizes=(40, 60))
    dst = tmp_path / "dst"
    (dst / "manifest.json.tmp").mkdir(parents=True)  # writing the manifest's temporary file fails
    with pytest.raises(PackError, match=r"cannot write .*manifest\.json: Is a directory"):
        pack(tmp_path / "src", dst, workers=1, progress=False)
    shutil.rmtree(dst / "manifest.json.tmp")
    pack(tmp_path / "src", dst, workers=1, progress=False)  # resumes: every shard was finished
    assert verify(dst) == []


def test_a_list_file_of_files_in_several_folders_packs_into_a_folder_beside_them(tmp_path):
    # Was: the "output inside the input" check took the files' common folder (here tmp_path; for files under
    # /data and /home: /) as the input, and refused every DST under it, though a list file is not walked.
    make_image_folder(tmp_path / "one", {"a": 1}, sizes=(40, 60))
    make_image_folder(tmp_path / "two", {"b": 1}, sizes=(40, 60))
    listing = tmp_path / "list.txt"
    listing.write_text(f"{tmp_path / 'one/a/img_000.jpg'} 0\n{tmp_path / 'two/b/img_000.jpg'} 1\n")
    summary = pack(listing, tmp_path / "packed", workers=1, progress=False)
    assert summary.packed == 2 and verify(tmp_path / "packed") == []
    with pytest.raises(ValueError, match=r"the output folder .*one.* lies inside the input"):
        pack(tmp_path / "one", tmp_path / "one" / "packed", workers=1, progress=False)  # a walked folder: refused
