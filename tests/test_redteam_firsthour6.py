"""Red team, first hour (sixth pass): deep images, exact demo sizes, checked shards, and the first commands.

- 16-bit, 32-bit and float TIFFs (microscopy, satellite, medical data) were skipped by the packer ("convert it
  first"), leaving the user to write the conversion; the loaders' refusal did not say the packer converts them;
- ``--demo-images 25`` made 20 images (``python -m gpupipe.demo --images 25`` too, and ``--images 5`` made 10);
- ``Shards`` read the tar headers of a shard whose sha256 it had just verified.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import make_image_folder
from PIL import Image

from gpupipe.bench.args import parse_args as bench_args
from gpupipe.demo import photos
from gpupipe.pack import pack
from gpupipe.shards import format as shardfmt
from gpupipe.sources import ImageFolder, Shards


def _tiff(values: np.ndarray, **kw) -> bytes:
    out = io.BytesIO()
    Image.fromarray(values).save(out, format="TIFF", **kw)
    return out.getvalue()


def _stretched(values: np.ndarray) -> np.ndarray:
    """The packer's documented rule: the image's own finite min..max to 0..255 (NaN 0, +inf 255, -inf 0)."""
    v = values.astype(np.float64)
    finite = v[np.isfinite(v)]
    low, high = finite.min(), finite.max()
    out = np.clip(np.rint((v - low) * 255 / (high - low)), 0, 255)
    return np.where(np.isnan(v), 0, out)


H, W = 16, 24
RAMP = np.add.outer(np.arange(H), np.arange(W)).astype(np.float64) / (H + W - 2)  # 0..1


def _deep_images() -> dict[str, tuple[bytes, np.ndarray]]:
    """name -> (TIFF bytes, the values stored)."""
    twelve_bit = np.rint(RAMP * 4095).astype(np.uint16)  # a 12-bit camera's pixels in a 16-bit TIFF
    full16 = np.rint(RAMP * 65535).astype(np.uint16)
    int32 = np.rint(RAMP * 3e6 - 1e6).astype(np.int32)  # negative values too
    reflectance = (RAMP * 0.6 - 0.1).astype(np.float32)  # a float image outside 0..1
    holes = reflectance.copy()
    holes[0, :4] = np.nan  # no-data pixels
    return {
        "twelve_bit.tif": (_tiff(twelve_bit), twelve_bit),
        "full16_big_endian.tif": (_tiff(full16.astype(">u2")), full16),
        "int32.tif": (_tiff(int32), int32),
        "float32.tiff": (_tiff(reflectance), reflectance),
        "float_nan.tif": (_tiff(holes), holes),
    }


@pytest.fixture(scope="module")
def deep(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("deep") / "data"
    for label in ("cells", "tissue"):
        (root / label).mkdir(parents=True)
        for name, (data, _) in _deep_images().items():
            (root / label / name).write_bytes(data)
    return root


def test_deep_and_float_tiffs_are_packed_stretched_to_their_own_range(deep, tmp_path):
    summary = pack(deep, tmp_path / "packed", workers=1, progress=False)
    manifest = json.loads((tmp_path / "packed" / "manifest.json").read_text())
    assert manifest["skipped"] == [], manifest["skipped"]
    assert summary.packed == 10
    source = Shards(tmp_path / "packed")
    for i, name in enumerate(source.names):
        wanted = _deep_images()
        stored = (tmp_path / "packed" / "sources.tsv").read_text().splitlines()[1 + i].split("\t")[1]
        values = wanted[Path(stored).name][1]
        with Image.open(io.BytesIO(source.read_bytes(i).tobytes())) as img:
            got = np.asarray(img.convert("RGB")).astype(int)
        assert got.shape == (H, W, 3), name
        want = _stretched(values)
        assert np.abs(got - want[..., None]).mean() < 2.5, (stored, np.abs(got - want[..., None]).mean())
        assert got.max() >= 250 and got.min() <= 5, (stored, "the whole range is used: not dark, not clipped")


def test_a_constant_deep_image_packs_black_not_an_error(tmp_path):
    from gpupipe.pack.convert import ConvertSettings, convert_image

    jpeg, before, _, _ = convert_image(_tiff(np.full((8, 8), 1234, np.uint16)), ConvertSettings())
    assert before == (8, 8)
    with Image.open(io.BytesIO(jpeg)) as img:
        assert np.asarray(img.convert("RGB")).max() <= 2


def test_a_16_bit_png_keeps_the_loaders_full_range_reading_in_the_pack(tmp_path):
    """A 16-bit PNG is read by the loaders directly (``v * 255 / 65535``, as DALI): the pack must agree with them,
    so it is not stretched."""
    from gpupipe.pack.convert import ConvertSettings, convert_image

    out = io.BytesIO()
    Image.fromarray(np.full((8, 8), 2000, np.uint16)).save(out, format="PNG")
    jpeg = convert_image(out.getvalue(), ConvertSettings())[0]
    with Image.open(io.BytesIO(jpeg)) as img:
        assert abs(int(np.asarray(img.convert("L")).mean()) - round(2000 * 255 / 65535)) <= 1


def test_the_loaders_refuse_a_deep_tiff_naming_it_and_the_packer(deep):
    source = ImageFolder(deep, extensions=(".tif", ".tiff"))  # by default .tif files are left out, named
    bad = {Path(source.names[i]).name: reason for i, reason in source.scan().bad.items()}
    assert set(bad) == set(_deep_images())
    for name, reason in bad.items():
        assert "python -m gpupipe.pack converts it" in reason, (name, reason)
        assert "stretched" in reason, reason
    assert "convert it first" not in " ".join(bad.values())


def test_a_multi_page_tiff_is_still_refused_by_the_packer(tmp_path):
    from gpupipe.images import ImageRefused
    from gpupipe.pack.convert import ConvertSettings, convert_image

    page = Image.fromarray(np.zeros((8, 8), np.uint16))
    out = io.BytesIO()
    page.save(out, format="TIFF", save_all=True, append_images=[page])
    with pytest.raises(ImageRefused, match="2 pages"):
        convert_image(out.getvalue(), ConvertSettings())


# --- exact demo sizes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("images,classes", [(25, 10), (7, 3), (30, 10)])
def test_the_demo_spec_makes_exactly_the_images_asked(tmp_path, images, classes):
    spec = photos.DemoSpec(classes=classes, images=images)
    root = photos.generate(tmp_path / "demo", spec, workers=1)
    counts = sorted(len(list(p.glob("*.jpg"))) for p in root.iterdir() if p.is_dir())
    assert sum(counts) == images
    assert len(counts) == classes and counts[-1] - counts[0] <= 1, counts


def test_a_demo_spec_of_whole_classes_keeps_its_cached_folder_name(tmp_path):
    assert photos.demo_root(tmp_path, photos.DemoSpec(classes=10, per_class=100)) == photos.demo_root(
        tmp_path, photos.DemoSpec(classes=10, images=1000)
    )
    assert photos.demo_root(tmp_path, photos.DemoSpec(images=25)) != photos.demo_root(
        tmp_path, photos.DemoSpec(images=20)
    )


def test_bench_demo_images_is_the_number_made(tmp_path):
    from gpupipe.bench.__main__ import demo_spec

    for asked in (25, 7, 1000):
        spec = demo_spec(bench_args(["--demo-images", str(asked), "--out", str(tmp_path)]))
        assert sum(spec.counts()) == asked
        assert spec.classes == min(10, asked)


def test_python_m_gpupipe_demo_makes_exactly_the_images_asked(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "gpupipe.demo", str(tmp_path / "demo"), "--images", "5", "--workers", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert len(list((tmp_path / "demo").rglob("*.jpg"))) == 5
    assert '"images": 5' in done.stdout


def test_fewer_demo_images_than_the_classes_asked_is_one_line_naming_both(capsys):
    from gpupipe.demo.__main__ import main as demo_main

    with pytest.raises(SystemExit) as stop:
        demo_main(["unused", "--images", "3", "--classes", "5"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: --images 3 cannot fill --classes 5: pass --classes 3 or fewer"), err


# --- shards: no header read after a verified checksum --------------------------------------------------------


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("packed")
    make_image_folder(root / "photos", {"a": 4, "b": 4}, sizes=(20, 30))
    pack(root / "photos", root / "packed", workers=1, progress=False)
    return root / "packed"


def _header_reads(monkeypatch) -> list:
    calls: list = []
    real = shardfmt.header_problem

    def counted(fd, member):
        calls.append(member.name)
        return real(fd, member)

    monkeypatch.setattr(shardfmt, "header_problem", counted)
    return calls


def test_a_verified_shard_s_tar_headers_are_not_read_again(packed, monkeypatch):
    calls = _header_reads(monkeypatch)
    assert len(Shards(packed, checksums=True)) == 8
    assert calls == []


def test_an_unverified_shard_s_tar_headers_are_still_checked(packed, monkeypatch):
    calls = _header_reads(monkeypatch)
    assert len(Shards(packed, checksums=False)) == 8
    assert calls, "without a checksum the headers are the only check that the shard is the one packed"


def test_a_checksum_without_an_index_checksum_keeps_the_header_check(packed, tmp_path, monkeypatch):
    import shutil

    from helpers import rewrite_manifest

    copy = tmp_path / "copy"
    shutil.copytree(packed, copy)

    def drop_index_sums(manifest):
        for shard in manifest["shards"]:
            shard["index_sha256"] = ""  # an older or hand-made manifest

    rewrite_manifest(copy, drop_index_sums)
    calls = _header_reads(monkeypatch)
    assert len(Shards(copy, checksums=True)) == 8
    assert calls, "the index, unverified, could be another shard's"


# --- the demo's next step, in a pip install (no examples/) ------------------------------------------------------


@pytest.mark.parametrize("task", ["classification", "segmentation", "detection"])
def test_the_demo_s_next_step_without_a_clone_is_code_that_runs(tmp_path, task):
    """``python -m gpupipe.demo`` (for an installed gpupipe, without a clone) said ``next: python
    examples/train_imagefolder.py OUT``: a file a pip install has not. Without the examples it gives the line of a
    script that reads the data, and that line runs."""
    from gpupipe.demo.__main__ import main as demo_main
    from gpupipe.demo.__main__ import next_step

    out = tmp_path / "demo"
    extra = ["--classes", "3"] if task != "segmentation" else []
    assert demo_main([str(out), "--task", task, "--images", "6", "--workers", "1", *extra]) == 0
    line = next_step(task, out, None)
    assert "examples/" not in line.split("(the example scripts")[0], line
    code = line.split("in a script: ", 1)[1].rsplit(" (the example scripts", 1)[0]
    done = subprocess.run(
        [sys.executable, "-c", f"import gpupipe; loader = {code}; batch = next(iter(loader)); print(len(batch[0]))"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) >= 1
    if task == "classification":
        assert line.startswith(f"next: python -m gpupipe.bench --data {out}; or in a script: "), line


# --- the packer says what to do next ------------------------------------------------------------------------


def test_a_pack_ends_with_the_line_of_code_that_reads_it_and_that_line_runs(tmp_path, capsys):
    """``python -m gpupipe.pack`` ended on its figures: the newcomer was left to find how a pack is read."""
    from gpupipe.pack.__main__ import main as pack_main

    make_image_folder(tmp_path / "photos", {"a": 3, "b": 3}, sizes=(40, 60))
    assert pack_main([str(tmp_path / "photos"), str(tmp_path / "packed"), "--quiet", "--workers", "1"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(f"next: python -m gpupipe.bench --data {tmp_path / 'packed'} --batch-size 6; in a script: ")
    code = last.split("in a script: ", 1)[1]
    done = subprocess.run(
        [sys.executable, "-c", f"import gpupipe; loader = {code}; print(next(iter(loader))[0].shape)"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "224, 224" in done.stdout


# --- the demo's OUT folder ------------------------------------------------------------------------------------


def _demo_error(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpupipe.demo", *argv, "--images", "2", "--workers", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


@pytest.mark.parametrize("out", ["a-file", "a-file/sub"])
def test_a_demo_out_that_is_a_file_is_one_line_naming_it(tmp_path, out):
    # Was: a traceback ending in NotADirectoryError: [Errno 20] Not a directory: 'a-file/class_00'.
    (tmp_path / "a-file").write_text("x")
    done = _demo_error([out], tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: OUT {out}: "), done.stderr
    assert "a-file is a file" in done.stderr, done.stderr


def test_a_demo_out_that_cannot_be_made_is_one_line_naming_it(tmp_path):
    done = _demo_error(["/proc/gpupipe-demo"], tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("error: OUT /proc/gpupipe-demo: cannot make the folder ("), done.stderr


def test_a_demo_out_holding_other_files_is_refused_not_mixed(tmp_path):
    # Was: the demo images were written among the folder's own, and the statistics counted both.
    (tmp_path / "photos" / "cats").mkdir(parents=True)
    (tmp_path / "photos" / "cats" / "tom.jpg").write_bytes(b"x")
    done = _demo_error(["photos"], tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: OUT photos holds files already"), done.stderr
    assert "pass a new or empty folder" in done.stderr
    assert sorted(p.name for p in (tmp_path / "photos").rglob("*")) == ["cats", "tom.jpg"]


def test_the_same_demo_command_run_twice_reuses_the_set(tmp_path):
    first = _demo_error(["demo"], tmp_path)
    assert first.returncode == 0, first.stderr
    again = _demo_error(["demo"], tmp_path)
    assert again.returncode == 0, again.stderr
    assert "already holds this demo set" in again.stderr
    assert again.stdout == first.stdout
    other = subprocess.run(
        [sys.executable, "-m", "gpupipe.demo", "demo", "--images", "3", "--workers", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert other.returncode == 2 and "holds files already" in other.stderr, other.stderr
