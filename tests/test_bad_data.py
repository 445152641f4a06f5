"""Bad input: every backend and both policies; formats decoded to the same RGB (the fuzz test is in
test_bad_data_fuzz.py)."""

import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import gpupipe
from helpers import BACKEND_DEVICES, DECODE_TOLERANCE, make_image_folder
from gpupipe.ops import CenterCrop, Decode, Output
from gpupipe.sources.scan import check_file, scan
from imagecases import bomb, broken_inside_png, to_rgb_reference, write_cases

CROP = 40
PIPELINE = [Decode(), CenterCrop(size=CROP), Output(dtype="uint8")]
SCAN_REASONS = {
    "truncated.jpg": "truncated JPEG (no end-of-image marker)",
    "empty.jpg": "empty file (0 bytes)",
    "text.jpg": "not an image (unrecognised format)",
    "gzip.jpg": "not an image (unrecognised format)",
    "bomb.png": "too many pixels: 11000x11000 = 121 MP exceeds the 100 MP limit (decompression bomb?)",
}


@pytest.fixture
def bad_folder(tmp_path):
    root = tmp_path / "data"
    make_image_folder(root, {"apple": 5, "pear": 4}, sizes=(48, 90))
    write_cases(root / "odd")
    bomb(root / "odd" / "bomb.png")
    broken_inside_png(root / "odd" / "broken.png")
    return root


def reference_crop(path: Path) -> np.ndarray:
    with Image.open(path) as img:
        rgb = np.asarray(to_rgb_reference(img))
    top, left = CenterCrop(size=CROP).anchor(*rgb.shape[:2])
    return rgb[top:top + CROP, left:left + CROP]


def make(folder, backend, device, **kwargs):
    return gpupipe.loader(folder, PIPELINE, batch_size=4, backend=backend, device=device, shuffle=False,
                          num_threads=1, **kwargs)


@pytest.mark.parametrize("backend, device", BACKEND_DEVICES)
def test_raise_lists_every_bad_file_before_any_work(bad_folder, backend, device):
    with pytest.raises(ValueError) as info:
        make(bad_folder, backend, device)
    message = str(info.value)
    assert "5 of 22 files cannot be used (pass on_error='skip'" in message
    for name, reason in SCAN_REASONS.items():
        assert f"{name}: {reason}" in message


@pytest.mark.parametrize("backend, device", BACKEND_DEVICES)
def test_skip_leaves_out_exactly_the_bad_files_and_delivers_the_rest(bad_folder, backend, device):
    loader = make(bad_folder, backend, device, on_error="skip")
    assert {Path(s.path).name: s.reason for s in loader.skipped} == SCAN_REASONS
    batches = list(loader)
    assert len(batches) == len(loader), "the batch count holds"
    skipped = {Path(s.path).name: s.reason for s in loader.skipped}
    assert set(skipped) == set(SCAN_REASONS) | {"broken.png"}
    assert skipped["broken.png"].startswith("cannot decode")

    images = torch.cat([b[0] for b in batches]).cpu()
    labels = torch.cat([b[1] for b in batches]).cpu()
    assert [len(b[1]) for b in batches] == [4, 4, 4, 4, 1], "batches keep their size: the failed file is replaced"
    # shuffle=False: the slots follow the folder; broken.png's slot takes the next usable sample.
    order = [s for s in gpupipe.ImageFolder(bad_folder).samples if Path(s.path).name not in SCAN_REASONS]
    slot = [Path(s.path).name for s in order].index("broken.png")
    expected = order[:slot] + [order[slot + 1]] + order[slot + 1:]
    assert labels.tolist() == [s.label for s in expected]
    # Every good image where it belongs; converted ones (gray, CMYK, palette, RGBA, 16-bit,
    # EXIF-rotated) with the colours and orientation of the reference decode.
    for image, sample in zip(images, expected):
        want = reference_crop(Path(sample.path))
        got = image.permute(1, 2, 0).numpy()
        assert np.abs(got.astype(int) - want).mean() <= DECODE_TOLERANCE[device], Path(sample.path).name


@pytest.mark.parametrize("backend, device", BACKEND_DEVICES)
def test_a_file_failing_only_when_decoded_stops_raise_mode_naming_it(tmp_path, backend, device):
    root = tmp_path / "data"
    make_image_folder(root, {"a": 6})
    broken_inside_png(root / "a" / "img_002_broken.png")
    loader = make(root, backend, device)
    with pytest.raises(RuntimeError, match="img_002_broken.png"):
        list(loader)


@pytest.mark.parametrize("backend, device", BACKEND_DEVICES)
def test_runtime_skip_keeps_batch_boundaries(tmp_path, backend, device):
    root = tmp_path / "data"
    make_image_folder(root, {"a": 9})
    broken_inside_png(root / "a" / "img_001_broken.png")  # sorts second: in the first batch
    loader = make(root, backend, device, on_error="skip")
    batches = list(loader)
    assert [len(labels) for _, labels in batches] == [4, 4, 2], "every batch keeps its size"
    assert [Path(s.path).name for s in loader.skipped] == ["img_001_broken.png"]


def test_scan_checks_and_caches(tmp_path, bad_folder):
    paths = gpupipe.ImageFolder(bad_folder).paths
    limits = dict(max_pixels=100_000_000, max_file_size=1 << 30)
    first = scan(paths, cache_dir=tmp_path / "cache", **limits)
    assert {Path(paths[i]).name for i in first.bad} == set(SCAN_REASONS)
    rotated = paths.index(str(bad_folder / "odd" / "rotated.jpg"))
    assert first.sizes[rotated].tolist() == [64, 48], "sizes with the EXIF rotation applied"
    cache_files = list((tmp_path / "cache" / "scan").glob("*.npz"))
    assert len(cache_files) == 1
    # A changed file is checked again; the others come from the cache.
    good = next(p for p in paths if p.endswith("plain.jpg"))
    Path(good).write_bytes(b"")
    again = scan(paths, cache_dir=tmp_path / "cache", **limits)
    assert again.bad[paths.index(good)] == "empty file (0 bytes)"
    assert np.array_equal(np.delete(again.sizes, paths.index(good), 0), np.delete(first.sizes, paths.index(good), 0))
    assert check_file(str(bad_folder / "odd" / "bomb.png"), max_pixels=200_000_000, max_file_size=1 << 30) == \
        (None, 11000, 11000)


def test_max_pixels_is_configurable(tmp_path):
    root = tmp_path / "data"
    (root / "a").mkdir(parents=True)
    Image.new("RGB", (20, 20)).save(root / "a" / "small.png")
    Image.new("RGB", (64, 48)).save(root / "a" / "large.png")
    loader = make(root, "torchvision", "cpu", on_error="skip", max_pixels=1000)
    assert [(Path(s.path).name, s.reason) for s in loader.skipped] == [
        ("large.png", "too many pixels: 64x48 = 0 MP exceeds the 0 MP limit (decompression bomb?)")
    ]
    assert len(loader.source) == 1


def test_policy_errors(bad_folder):
    with pytest.raises(ValueError, match="on_error must be 'raise' or 'skip', got 'ignore'"):
        make(bad_folder, "torchvision", "cpu", on_error="ignore")
    with pytest.raises(ValueError, match="max_pixels must be an int >= 1, got 0"):
        make(bad_folder, "torchvision", "cpu", max_pixels=0)


def test_the_packer_gives_the_loaders_reason_for_each_bad_file(bad_folder, tmp_path):
    # one file, one message: a truncated JPEG was "truncated JPEG (...)" to the loader, "cannot decode: image file
    # is truncated (...)" to the packer
    from gpupipe.pack import pack

    truncated_png = bad_folder / "odd" / "truncated.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (30, 40, 3), np.uint8)).save(truncated_png)
    truncated_png.write_bytes(truncated_png.read_bytes()[:-60])
    expected = dict(SCAN_REASONS, **{"truncated.png": "truncated PNG (no IEND chunk)"})
    pack(bad_folder, tmp_path / "packed", workers=1, progress=False)
    manifest = json.loads((tmp_path / "packed" / "manifest.json").read_text())
    packed = {Path(s["path"]).name: s["reason"] for s in manifest["skipped"]}
    assert {name: packed.get(name) for name in expected} == expected
    assert packed["broken.png"].startswith("cannot decode")


@pytest.mark.parametrize("backend, device", BACKEND_DEVICES)
def test_a_jpeg_with_data_after_its_image_is_read_not_refused_as_truncated(tmp_path, backend, device):
    # a phone's motion photo: a video appended after the JPEG's end-of-image marker, far more than the scan's tail
    root = tmp_path / "data"
    make_image_folder(root, {"a": 2, "b": 2}, sizes=(48, 90))
    photo = sorted((root / "a").iterdir())[0]
    video = b"\x00\x00\x00\x18ftypmp42" + np.random.default_rng(0).integers(0, 255, 20_000, np.uint8).tobytes()
    jpeg = photo.read_bytes()
    photo.write_bytes(jpeg + video)  # (no 0xFF byte in the trailer: it holds no end-of-image marker)
    (root / "b" / "cut.jpg").write_bytes(jpeg[: len(jpeg) // 2])  # truncated still
    loader = make(root, backend, device, on_error="skip")
    assert [(Path(s.path).name, s.reason) for s in loader.skipped] == [
        ("cut.jpg", "truncated JPEG (no end-of-image marker)")
    ]
    images = torch.cat([b[0] for b in loader]).cpu()
    assert images.shape[0] == 4

    from gpupipe.pack import pack

    pack(root, tmp_path / "packed", workers=1, progress=False)
    manifest = json.loads((tmp_path / "packed" / "manifest.json").read_text())
    assert [(Path(s["path"]).name, s["reason"]) for s in manifest["skipped"]] == [
        ("cut.jpg", "truncated JPEG (no end-of-image marker)")
    ]
    assert manifest["totals"]["samples"] == 4
    packed_images = []  # the photo is packed without the video after it: byte for byte the JPEG
    for shard in sorted((tmp_path / "packed").glob("*.tar")):
        with tarfile.open(shard) as tar:
            packed_images += [tar.extractfile(m).read() for m in tar.getmembers() if m.name.endswith(".jpg")]
    assert len(packed_images) == 4 and jpeg in packed_images
    assert not any(video[:12] in member for member in packed_images)
