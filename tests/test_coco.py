"""The COCO source: categories, crowd and empty images, malformed annotations reported by ``on_error``;
packed shards carry boxes; ranks split a COCO source; the detection example trains."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import gpupipe
from gpupipe import ops
from gpupipe.pack import ConvertSettings, PackSettings, pack, verify
from helpers import CPU_BACKEND_NAMES, CPU_BACKENDS, load_example, make_detection_set, two_ranks


@pytest.fixture(scope="module")
def det_data(tmp_path_factory):
    return make_detection_set(tmp_path_factory.mktemp("coco"), 12, seed=1)


def test_categories_are_numbered_in_id_order_and_boxes_become_xyxy(det_data):
    source = gpupipe.CocoDetection(*det_data)
    assert source.classes == ["red", "green", "blue"], "ids 3, 7, 11 in order, whatever the file's order"
    assert source.kind is gpupipe.TargetKind.BOXES and len(source) == 12
    record = json.loads(det_data[1].read_text())
    first = [a for a in record["annotations"] if a["image_id"] == 100]
    x, y, w, h = first[0]["bbox"]
    assert source.boxes[0][0].tolist() == [x, y, x + w, y + h]
    assert source.box_labels[0].tolist() == [{3: 0, 7: 1, 11: 2}[a["category_id"]] for a in first]
    assert source.boxes[2].shape == (0, 4), "an image with no annotation is kept, with no boxes"
    assert len(gpupipe.CocoDetection(*det_data, keep_empty=False)) == 8


def write_case(root: Path):
    """An annotation file with one of each kind of fault, over small PNGs."""
    images = root / "images"
    images.mkdir(parents=True)
    for name in ("good", "neg", "cat", "out", "nan", "size", "crowd", "empty", "dup"):
        Image.new("RGB", (40, 30), (10, 10, 10)).save(images / f"{name}.png")
    records = [{"id": k, "file_name": f"{name}.png", "width": 40, "height": 30}
               for k, name in enumerate(("good", "neg", "cat", "out", "nan", "size", "crowd", "empty", "gone"))]
    records[5]["width"] = 41                                                      # annotated size differs
    records.append({"id": 0, "file_name": "good.png", "width": 40, "height": 30})  # a repeated image record
    records.append({"id": 20, "file_name": "../escape.png", "width": 40, "height": 30})
    boxes = {0: [1, 1, 10, 10], 1: [5, 5, -3, 10], 2: [1, 1, 5, 5], 3: [30, 5, 20, 5], 4: [1, 1, "x", 5],
             5: [1, 1, 5, 5], 6: [2, 2, 8, 8], 8: [1, 1, 5, 5]}
    annotations = [{"id": 10 + k, "image_id": k, "category_id": 99 if k == 2 else 1, "bbox": box,
                    "iscrowd": int(k == 6)} for k, box in boxes.items()]
    annotations.append({"id": 30, "image_id": 77, "category_id": 1, "bbox": [1, 1, 2, 2]})
    path = root / "ann.json"
    path.write_text(json.dumps({"images": records, "annotations": annotations,
                                "categories": [{"id": 1, "name": "thing"}]}))
    return images, path


EXPECTED_BAD = {
    "neg.png": "annotation 11: box of size -3x10 (sizes must be positive)",
    "cat.png": "annotation 12: unknown category 99",
    "out.png": "annotation 13: box [30, 5, 20, 5] lies outside its 40x30 image",
    "nan.png": "annotation 14: bbox must be 4 numbers [x, y, w, h], got [1, 1, 'x', 5]",
    "size.png": "the image is 40x30, its annotations say 41x30 (EXIF orientation applied)",
}


def test_malformed_annotations_are_reported_by_on_error(tmp_path):
    images, path = write_case(tmp_path)
    source = gpupipe.CocoDetection(images, path)
    assert [(p.path.split("#")[1], p.reason) for p in source.problems] == [
        ("image 0", "the image record repeats (the first is used)"),
        ("image 20", f"file_name '../escape.png' is not a path inside {str(images)!r}"),
        ("annotation 30", "unknown image id 77"),
    ]
    with pytest.raises(ValueError) as info:
        gpupipe.loader(source, "detection-val", batch_size=2, backend="torchvision")
    message = str(info.value)
    assert "6 of 9 files cannot be used, and 3 image or annotation records not usable" in message
    for name, reason in EXPECTED_BAD.items():
        assert f"{images / name}: {reason}" in message
    assert f"{images / 'gone.png'}: " in message, "a missing file"
    loader = gpupipe.loader(source, gpupipe.presets.detection_val(32, 48), batch_size=2, backend="torchvision",
                            on_error="skip", num_threads=0, shuffle=False)
    assert sorted(Path(n).name for n in loader.source.names) == ["crowd.png", "empty.png", "good.png"]
    skipped = {Path(s.path).name: s.reason for s in loader.skipped if "#" not in s.path}
    assert {k: skipped[k] for k in EXPECTED_BAD} == EXPECTED_BAD and "gone.png" in skipped and len(skipped) == 6
    assert sum("#" in s.path for s in loader.skipped) == 3
    _, targets = next(iter(loader))
    assert targets["labels"].tolist() == [[0], [-1]], "crowd boxes are left out by default"
    with_crowd = gpupipe.CocoDetection(images, path, include_crowd=True)
    assert with_crowd.boxes[with_crowd.names.index(str(images / "crowd.png"))].tolist() == [[2, 2, 10, 10]]


@pytest.mark.parametrize("text, error", [
    ("not json", "is not valid JSON"),
    ('{"images": [{"id": 1}], "categories": []}', r"images\[0\] has no file_name, width, height"),
    ('{"images": [], "categories": [{"id": 1}, {"id": 1}]}', "category ids repeat"),
    ('{"images": "x", "categories": []}', "'images' must be a list of objects"),
    ('{"images": [{"id": 1, "file_name": "a.png", "width": 0, "height": 5}], "categories": []}',
     "width and height must be positive ints"),
    ('{"images": [], "categories": []}', "leaves no image to read"),
])
def test_annotation_files_that_are_not_coco_are_refused(tmp_path, text, error):
    (tmp_path / "ann.json").write_text(text)
    with pytest.raises(ValueError, match=error) as info:
        gpupipe.CocoDetection(tmp_path, tmp_path / "ann.json")
    assert "ann.json" in str(info.value)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_packed_shards_carry_boxes_scaled_with_the_images(det_data, tmp_path, backend):
    source = gpupipe.CocoDetection(*det_data)
    dst = tmp_path / "packed"
    pack(source, dst, PackSettings(convert=ConvertSettings(max_size=40), shard_size=64 * 1024), workers=1,
         progress=False)
    assert verify(dst) == []
    shards = gpupipe.Shards(dst)
    assert shards.kind is gpupipe.TargetKind.BOXES and shards.classes == source.classes
    by_name = {Path(n).name: k for k, n in enumerate(source.names)}
    rows = [line.split("\t") for line in (dst / "sources.tsv").read_text().splitlines()[1:]]
    assert len(rows) == len(shards) == len(source) == 12, "every image packed and listed once"
    for k, (_key, name, _) in enumerate(rows):
        original = by_name[Path(name).name]
        (h, w), (sh, sw) = source.sizes()[original], shards.sizes()[k]
        assert min(sh, sw) == 40
        scale = np.array([sw / w, sh / h] * 2, np.float32)
        assert np.allclose(shards.boxes[k], source.boxes[original] * scale, atol=0.01)
        assert shards.box_labels[k].tolist() == source.box_labels[original].tolist()
    pipeline = [ops.Decode(), ops.Resize((40, 40)), ops.Output("uint8")]
    packed = gpupipe.loader(dst, pipeline, batch_size=12, backend=backend, num_threads=1, shuffle=False)
    _, targets = next(iter(packed))
    assert int((targets["labels"] >= 0).sum()) == sum(len(b) for b in source.boxes)


def test_packing_refuses_or_lists_malformed_annotations(tmp_path):
    images, path = write_case(tmp_path / "in")
    source = gpupipe.CocoDetection(images, path)
    with pytest.raises(gpupipe.SampleError, match="3 image or annotation records not usable"):
        pack(source, tmp_path / "raise", on_error="raise", workers=1, progress=False)
    summary = pack(source, tmp_path / "out", workers=1, progress=False)
    assert summary.packed == 3
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    skipped = {Path(s["path"]).name: s["reason"] for s in manifest["skipped"]}
    assert {k: skipped[k] for k in EXPECTED_BAD} == EXPECTED_BAD
    assert "gone.png" in skipped and sum("#" in s["path"] for s in manifest["skipped"]) == 3
    assert manifest["totals"]["skipped"] == len(manifest["skipped"]) == 9


@pytest.mark.slow
def test_ranks_split_a_coco_source(det_data, tmp_path):
    """Every CPU backend in turn, in one torchrun launch."""
    ranks = two_ranks(tmp_path, f"""
src = gpupipe.CocoDetection({str(det_data[0])!r}, {str(det_data[1])!r})
result = {{}}
for backend in {CPU_BACKEND_NAMES!r}:
    loader = gpupipe.loader(src, gpupipe.presets.detection_ssd(48), batch_size=3, backend=backend, num_threads=1,
                            seed=1)
    counts = [int((t["labels"] >= 0).sum()) for _, t in loader]
    names = [src.names[i] for i in loader.rank_share(0).indices]
    result[backend] = {{"len": len(loader), "counts": counts, "names": names}}
""")
    assert all(list(r) == CPU_BACKEND_NAMES for r in ranks)
    for backend in CPU_BACKEND_NAMES:
        rank0, rank1 = (r[backend] for r in ranks)
        assert rank0["len"] == rank1["len"] == 2, backend
        assert sorted(rank0["names"] + rank1["names"]) == sorted(gpupipe.CocoDetection(*det_data).names), backend
        assert sum(rank0["counts"]) > 0 and sum(rank1["counts"]) > 0, backend


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_the_swapped_detection_loader_trains(det_data, backend):
    example = load_example("train_detection")
    loader = example.gpupipe_version(*map(str, det_data), size=128, batch_size=4, backend=backend)
    losses = example.train(loader, num_classes=3, steps=12)
    assert_learns(losses)
    check_torchvision_batch(next(iter(loader)), 4, 128)


def test_the_original_detection_dataloader_still_runs(det_data):
    example = load_example("train_detection")
    loader = example.dataloader_version(*map(str, det_data), size=128, batch_size=4)
    losses = example.train(loader, num_classes=3, steps=12)
    assert_learns(losses)
    check_torchvision_batch(next(iter(loader)), 4, 128)


def assert_learns(losses: list) -> None:
    """The loss falls over 12 steps of SSD from scratch: the last 4 steps' mean under 0.8 of the first 4's. Measured
    0.58-0.71 for every loader at 1 and 2 torch threads (the thread count changes the sums' order, so the losses);
    the last 3 against the first 3 under 0.7 failed at 1 thread (0.706) though the loader was the same."""
    assert np.mean(losses[-4:]) < 0.8 * np.mean(losses[:4]), losses


def check_torchvision_batch(batch, batch_size: int, size: int) -> None:
    """What torchvision's detection references feed their models: lists of images and of target dicts."""
    images, targets = batch
    assert len(images) == len(targets) == batch_size
    for image, target in zip(images, targets):
        assert image.shape == (3, size, size) and image.dtype == torch.float32 and 0 <= image.min() <= image.max() <= 1
        assert set(target) == {"boxes", "labels"} and target["boxes"].dtype == torch.float32
        assert target["boxes"].shape == (len(target["labels"]), 4) and (target["labels"] >= 1).all()
