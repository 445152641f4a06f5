"""Red team: the packer, WebDataset tars and remote packs fed data gpupipe had not seen before."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from gpupipe.errors import SampleError
from gpupipe.pack import ConvertSettings, pack
from gpupipe.pack.convert import convert_image
from gpupipe.sources import FileList, ImageFolder, WebDataset
from gpupipe.sources.shards import Shards


def _png(size=(12, 10), value=90) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (value, value // 2, 30)).save(out, "PNG")
    return out.getvalue()


def _tar(path: Path, members) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_an_image_wider_than_jpeg_allows_is_skipped_and_named_not_a_failed_write(tmp_path):
    # Was: the JPEG encoder's OSError ended the whole pack with "cannot write into DST: broken data stream".
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    Image.new("RGB", (70_000, 2), (1, 2, 3)).save(src / "a" / "panorama.png")
    Image.new("RGB", (8, 6), (1, 2, 3)).save(src / "a" / "ok.png")
    summary = pack(src, tmp_path / "dst", workers=1, progress=False)
    assert (summary.packed, summary.skipped) == (1, 1)
    manifest = json.loads((tmp_path / "dst" / "manifest.json").read_text())
    [skipped] = manifest["skipped"]
    assert skipped["path"] == str(src / "a" / "panorama.png")
    assert "70000x2" in skipped["reason"] and "65500" in skipped["reason"]
    with pytest.raises(SampleError, match="panorama.png"):
        pack(src, tmp_path / "dst2", workers=1, progress=False, on_error="raise")


def test_a_wide_image_shrunk_by_max_size_under_the_jpeg_limit_is_packed():
    data = io.BytesIO()
    Image.new("RGB", (70_000, 200), (1, 2, 3)).save(data, "PNG")
    jpeg, before, after, copied = convert_image(data.getvalue(), ConvertSettings(max_size=100))
    assert (before, after, copied) == ((70_000, 200), (35_000, 100), False)
    assert Image.open(io.BytesIO(jpeg)).size == (35_000, 100)


_HUGE_LABEL = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
from gpupipe.sources import FileList, WebDataset
try:
    if sys.argv[1] == "wds":
        WebDataset(sys.argv[2], cache_dir=sys.argv[3])
    else:
        FileList(sys.argv[2])
except ValueError as err:
    print("ValueError:", err)
"""


@pytest.mark.parametrize("kind", ["wds", "list"])
def test_one_huge_integer_label_is_a_named_error_not_a_memory_blowup(tmp_path, kind):
    # Was: classes "0".."99999999999" were built as a list: MemoryError, or the OOM killer.
    if kind == "wds":
        members = [(f"s{i}.{ext}", data) for i, lbl in enumerate([b"0", b"1", b"99999999999"])
                   for ext, data in (("png", _png()), ("cls", lbl))]
        src = _tar(tmp_path / "w.tar", members)
    else:
        (tmp_path / "a.png").write_bytes(_png())
        (tmp_path / "b.png").write_bytes(_png())
        src = tmp_path / "list.txt"
        src.write_text("a.png 0\nb.png 99999999999\n")
    proc = subprocess.run([sys.executable, "-c", _HUGE_LABEL, kind, str(src), str(tmp_path / "cache")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ValueError:" in proc.stdout
    assert "99999999999" in proc.stdout and "classes=" in proc.stdout


def test_integer_labels_with_a_gap_still_name_every_class_up_to_the_largest(tmp_path):
    (tmp_path / "a.png").write_bytes(_png())
    (tmp_path / "b.png").write_bytes(_png())
    source = FileList([(tmp_path / "a.png", 0), (tmp_path / "b.png", 4)])
    assert source.classes == ["0", "1", "2", "3", "4"]


def test_a_pack_url_with_a_query_string_is_refused_saying_so(tmp_path):
    # Was: "the name 'manifest.json' does not stay inside it", blaming the name.
    with pytest.raises(ValueError, match=r"query string") as caught:
        Shards("http://127.0.0.1:9/pack?token=secret", cache_dir=tmp_path / "cache")
    assert "secret" not in str(caught.value)
    assert "storage_options" in str(caught.value)


def test_a_dotted_basename_in_a_tar_says_where_webdataset_splits_the_name(tmp_path):
    members = [("ok.png", _png()), ("ok.cls", b"0"), ("img.v2.png", _png()), ("img.v2.cls", b"1")]
    tar = _tar(tmp_path / "w.tar", members)
    source = WebDataset(str(tar), cache_dir=tmp_path / "cache")
    assert len(source) == 1
    [problem] = source.problems
    assert problem.path.endswith("#img")
    assert "img.v2.png" in problem.reason and "first dot" in problem.reason


def _folder_with_tiff(root: Path) -> Path:
    for cls in ("a", "b"):
        (root / cls).mkdir(parents=True)
        Image.new("RGB", (8, 6), (10, 20, 30)).save(root / cls / "one.png")
    Image.new("RGB", (8, 6), (10, 20, 30)).save(root / "a" / "scan.tif")
    Image.new("L", (8, 6), 40).save(root / "b" / "old.pgm")
    (root / "b" / "notes.txt").write_text("not an image")
    return root


def test_images_torchvision_would_read_are_listed_not_silently_dropped(tmp_path, caplog):
    # Was: .tif/.tiff/.ppm/.pgm files (torchvision's ImageFolder counts them) vanished without a word. They are
    # left out with a warning naming them, not refused: a folder with a stray scan loads as it did before.
    src = _folder_with_tiff(tmp_path / "src")
    with caplog.at_level("WARNING", logger="gpupipe.sources"):
        source = ImageFolder(src)
    assert len(source) == 2 and list(source.problems) == []
    assert source.left_out == [str(src / "a" / "scan.tif"), str(src / "b" / "old.pgm")]
    (record,) = [r for r in caplog.records if "left out" in r.getMessage()]
    assert "2 images" in record.getMessage() and "scan.tif" in record.getMessage()
    assert "python -m gpupipe.pack" in record.getMessage()
    assert ImageFolder(src, extensions=[".png"]).left_out == []  # a narrower choice is the user's


def test_the_packer_converts_every_image_torchvision_would_read(tmp_path):
    src = _folder_with_tiff(tmp_path / "src")
    summary = pack(src, tmp_path / "dst", workers=1, progress=False)
    assert (summary.packed, summary.skipped) == (4, 0)
    rows = (tmp_path / "dst" / "sources.tsv").read_text().splitlines()[1:]
    assert sorted((Path(r.split("\t")[1]).name, r.split("\t")[2]) for r in rows) == [
        ("old.pgm", "1"), ("one.png", "0"), ("one.png", "1"), ("scan.tif", "0")
    ]


def test_the_loader_reads_the_packed_tiff_with_its_pixels(tmp_path):
    import gpupipe
    from gpupipe.ops import Decode, Resize

    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    Image.new("RGB", (8, 6), (200, 100, 50)).save(src / "a" / "scan.tif")
    pack(src, tmp_path / "dst", workers=1, progress=False)
    pipeline = [Decode(), Resize(size=(6, 8))]
    [(images, labels)] = list(gpupipe.loader(tmp_path / "dst", pipeline, batch_size=1, backend="torchvision",
                                             device="cpu", num_threads=0, shuffle=False, dtype="uint8"))
    assert labels.tolist() == [0]
    assert np.abs(images[0].float().mean((1, 2)).numpy() - [200, 100, 50]).max() < 4


def _five_samples(path: Path) -> Path:
    members = [(f"s{i}.{ext}", data) for i in range(5) for ext, data in (("png", _png(value=40 * i)), ("cls", b"1"))]
    return _tar(path, members)


@pytest.mark.parametrize("damage", ["cut_at_a_header", "cut_inside_a_header", "garbage_header"])
def test_a_tar_that_stops_early_between_members_is_reported_not_silently_short(tmp_path, damage):
    # Was: tarfile ends its listing quietly at a missing or unreadable header after the first, so the
    # samples after it vanished with no problem listed.
    whole = _five_samples(tmp_path / "whole.tar").read_bytes()
    with tarfile.open(tmp_path / "whole.tar") as tar:
        fourth = [m for m in tar.getmembers() if m.name == "s3.png"][0].offset
    data = {
        "cut_at_a_header": whole[:fourth],
        "cut_inside_a_header": whole[: fourth + 100],
        "garbage_header": whole[:fourth] + b"\x07" * 512 + whole[fourth + 512 :],
    }[damage]
    (tmp_path / "bad.tar").write_bytes(data)
    source = WebDataset(str(tmp_path / "bad.tar"), cache_dir=tmp_path / "cache")
    assert len(source) == 3
    [problem] = source.problems
    assert problem.path == str(tmp_path / "bad.tar")
    assert "after 6 members" in problem.reason and str(fourth) in problem.reason


def test_a_tar_ending_after_a_whole_member_without_its_end_marker_says_both_readings(tmp_path):
    whole = _five_samples(tmp_path / "whole.tar").read_bytes()
    with tarfile.open(tmp_path / "whole.tar") as tar:
        end = max(m.offset_data + -(-m.size // 512) * 512 for m in tar.getmembers())
    (tmp_path / "bare.tar").write_bytes(whole[:end])  # every member, no end marker
    source = WebDataset(str(tmp_path / "bare.tar"), cache_dir=tmp_path / "cache")
    assert len(source) == 5
    [problem] = source.problems
    assert "written without one, or cut at a member boundary" in problem.reason and str(end) in problem.reason


def test_a_whole_tar_has_no_problem(tmp_path):
    source = WebDataset(str(_five_samples(tmp_path / "whole.tar")), cache_dir=tmp_path / "cache")
    assert (len(source), list(source.problems)) == (5, [])


def test_a_compressed_tar_is_named_as_such(tmp_path):
    import gzip

    plain = _five_samples(tmp_path / "w.tar").read_bytes()
    (tmp_path / "w.tar.gz").write_bytes(gzip.compress(plain))
    source = WebDataset([str(tmp_path / "w.tar"), str(tmp_path / "w.tar.gz")], cache_dir=tmp_path / "cache")
    assert len(source) == 5
    [problem] = source.problems
    assert problem.path == str(tmp_path / "w.tar.gz")
    assert "gzip" in problem.reason and "decompress" in problem.reason


def test_packing_into_a_folder_holding_other_shards_refuses_and_overwrites_nothing(tmp_path):
    # Was: a user's own shard-000000.tar (and manifest.json, sources.tsv) were replaced without a word.
    from gpupipe.pack import PackError

    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    Image.new("RGB", (8, 6), (1, 2, 3)).save(src / "a" / "x.png")
    dst = tmp_path / "dst"
    theirs = _five_samples(dst.mkdir() or dst / "shard-000000.tar").read_bytes()
    (dst / "sources.tsv").write_text("mine\n")
    with pytest.raises(PackError, match=r"shard-000000\.tar") as caught:
        pack(src, dst, workers=1, progress=False)
    assert "sources.tsv" in str(caught.value)
    assert (dst / "shard-000000.tar").read_bytes() == theirs
    assert (dst / "sources.tsv").read_text() == "mine\n"
    assert sorted(p.name for p in dst.iterdir() if not p.name.startswith(".")) == ["shard-000000.tar", "sources.tsv"]


def test_a_pack_interrupted_right_after_its_first_shard_still_resumes(tmp_path):
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    for i in range(6):
        Image.fromarray(np.random.default_rng(i).integers(0, 255, (160, 160, 3), np.uint8)).save(src / "a" / f"{i}.png")
    whole = pack(src, tmp_path / "whole", _small_shards(), workers=1, progress=False)
    assert whole.shards > 1
    journal = tmp_path / "whole" / ".pack-journal.json"
    saved = json.loads(journal.read_text())
    saved.update(shards=[], skipped=[], next_input=0)  # as saved before any shard was finished
    journal.write_text(json.dumps(saved))
    (tmp_path / "whole" / "manifest.json").unlink()
    again = pack(src, tmp_path / "whole", _small_shards(), workers=1, progress=False)
    assert (again.packed, again.shards) == (6, whole.shards)


def _small_shards():
    """Small shards, so that a few images make several."""
    from gpupipe.pack import PackSettings

    return PackSettings(shard_size=64 * 1024)


def test_a_pack_without_its_manifest_is_named_as_such_not_as_an_empty_image_folder(tmp_path):
    # Was: "ImageFolder: ... has no class folders", for a folder of shard-*.tar files.
    import gpupipe

    _five_samples(tmp_path / "shard-000000.tar")
    _five_samples(tmp_path / "shard-000001.tar")
    with pytest.raises(ValueError, match=r"2 \.tar files and no manifest\.json") as caught:
        gpupipe.loader(tmp_path, "val", batch_size=2, backend="torchvision", device="cpu", num_threads=0)
    assert "gpupipe.WebDataset" in str(caught.value)


@pytest.mark.parametrize("suffix", [".txt", ".csv"])
def test_a_list_file_saved_with_a_byte_order_mark_reads_its_first_file(tmp_path, suffix):
    # Was: Excel's and Notepad's "UTF-8 with BOM" glued U+FEFF to the first path: that file was "missing".
    (tmp_path / "a.png").write_bytes(_png())
    (tmp_path / "b.png").write_bytes(_png())
    sep = "," if suffix == ".csv" else " "
    (tmp_path / f"list{suffix}").write_bytes(f"\ufeffa.png{sep}cat\nb.png{sep}dog\n".encode())
    source = FileList(tmp_path / f"list{suffix}")
    assert source.names == [str(tmp_path / "a.png"), str(tmp_path / "b.png")]
    assert source.classes == ["cat", "dog"]


def test_a_cls_member_with_a_byte_order_mark_is_its_class_index(tmp_path):
    members = [("s0.png", _png()), ("s0.cls", b"0"), ("s1.png", _png()), ("s1.cls", b"\xef\xbb\xbf1\r\n")]
    tar = _tar(tmp_path / "w.tar", members)
    source = WebDataset(str(tar), cache_dir=tmp_path / "cache")
    assert (source.classes, list(source.labels), list(source.problems)) == (["0", "1"], [0, 1], [])


def test_verify_of_an_unfinished_pack_says_to_finish_it(tmp_path):
    from gpupipe.pack import verify

    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    Image.new("RGB", (8, 6), (1, 2, 3)).save(src / "a" / "x.png")
    pack(src, tmp_path / "dst", workers=1, progress=False)
    (tmp_path / "dst" / "manifest.json").unlink()  # as a run stopped before its manifest leaves it
    [problem] = verify(tmp_path / "dst")
    assert "manifest.json" in problem and "unfinished pack" in problem and "again" in problem


def test_an_output_path_that_is_a_file_is_named_as_such(tmp_path):
    # Was: "[Errno 17] File exists: 'out'".
    from gpupipe.pack import PackError

    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    Image.new("RGB", (8, 6), (1, 2, 3)).save(src / "a" / "x.png")
    (tmp_path / "out").write_text("mine")
    with pytest.raises(PackError, match=r"output folder .*out.* is a file"):
        pack(src, tmp_path / "out", workers=1, progress=False)
    with pytest.raises(PackError, match=r"cannot make the output folder .*Not a directory"):
        pack(src, tmp_path / "out" / "sub", workers=1, progress=False)
    assert (tmp_path / "out").read_text() == "mine"


def test_a_folder_of_tars_is_its_tars_in_sorted_order(tmp_path):
    # Was: a raw IsADirectoryError.
    folder = tmp_path / "shards"
    folder.mkdir()
    for name in ("b.tar", "a.tar"):
        _five_samples(folder / name)
    (folder / "notes.txt").write_text("not a shard")
    source = WebDataset(str(folder), cache_dir=tmp_path / "cache")
    assert len(source) == 10
    assert [n.split("#")[0] for n in source.names[::5]] == [str(folder / "a.tar"), str(folder / "b.tar")]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no \.tar file in .*empty"):
        WebDataset(str(tmp_path / "empty"), cache_dir=tmp_path / "cache")


def test_a_multi_page_tiff_is_skipped_and_named_a_float_or_16_bit_one_not_packed_black(tmp_path):
    # Review of the change that packs TIFFs: a float TIFF packed all black, a 12-bit one as 0..15, a multi-page one
    # as its first page, without a word. (Float and 16-bit ones are now stretched to their own range:
    # test_redteam_firsthour6.)
    import io

    from gpupipe.images import ImageRefused
    from gpupipe.pack.convert import ConvertSettings, convert_image

    def tiff(img, **kw):
        out = io.BytesIO()
        img.save(out, format="TIFF", **kw)
        return out.getvalue()

    pages = [Image.fromarray(np.full((8, 8, 3), v, np.uint8)) for v in (0, 9)]
    with pytest.raises(ImageRefused, match="2 pages"):
        convert_image(tiff(pages[0], save_all=True, append_images=pages[1:]), ConvertSettings())
    for deep in (np.random.rand(8, 8).astype(np.float32), np.arange(64, dtype=np.uint16).reshape(8, 8) * 60):
        jpeg = convert_image(tiff(Image.fromarray(deep)), ConvertSettings())[0]
        assert np.asarray(Image.open(io.BytesIO(jpeg)).convert("L")).max() > 240  # not black, not 0..15
    assert convert_image(tiff(pages[1]), ConvertSettings())[1] == (8, 8)
