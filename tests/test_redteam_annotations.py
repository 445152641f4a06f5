"""Detection and segmentation sources over annotations as real datasets write them: COCO 2017's
degenerate and edge boxes, crowd RLE, non-contiguous category ids, subfolder file names, LVIS
keys, string image ids, a 100k-annotation file; Pascal VOC's split files and palette masks,
Cityscapes' file names, masks saved as JPEG or RGB."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import CPU_BACKENDS
from PIL import Image

import gpupipe
from gpupipe import ops


def _coco(root: Path, images: list[dict], annotations: list[dict], categories=None) -> Path:
    path = root / "instances.json"
    cats = categories if categories is not None else [{"id": 1, "name": "person"}]
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": cats}))
    return path


def _image(root: Path, name: str, size=(40, 30)) -> dict:
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, (90, 90, 90)).save(root / name)
    return {"file_name": name, "width": size[0], "height": size[1]}


def coco_2017_like(root: Path) -> tuple[Path, Path]:
    """Quirks COCO 2017 and its relatives carry, each in one image 40x30 (under ``train2017/``)."""
    images = root / "coco"
    records = [
        dict(
            _image(images, f"train2017/{k:012d}.png"),
            id=k + 1,
            license=3,
            coco_url="http://x/y.jpg",
            neg_category_ids=[],
            not_exhaustive_category_ids=[],
        )
        for k in range(4)
    ]
    polygon = [[1.0, 1.0, 9.0, 1.0, 9.0, 9.0]]
    rle = {"counts": [0, 12, 30], "size": [30, 40]}
    boxes = [  # (image id, bbox, category id, iscrowd, segmentation)
        (1, [30.0, 20.0, 10.3, 10.2], 1, 0, polygon),  # a hair past the right and bottom edges: clipped
        (1, [5.0, 5.0, 0.0, 4.0], 13, 0, polygon),  # zero width: dropped, as torchvision's reference does
        (1, [2.0, 3.0, 0.5, 0.25], 90, 0, polygon),  # sub-pixel but not empty: kept
        (2, [40.4, 5.0, 0.3, 5.0], 1, 0, polygon),  # starts past the edge (within the tolerance): empty
        (2, [-0.9, 5.0, 0.5, 5.0], 13, 0, polygon),  # ends before the left edge: empty
        (2, [4.0, 4.0, 8.0, 8.0], 90, 1, rle),  # crowd, RLE: left out by default
        (3, [1.0, 2.0, 3.0, 4.0], 13, 0, polygon),
    ]
    annotations = [
        {
            "id": 100 + k,
            "image_id": i,
            "bbox": b,
            "category_id": c,
            "iscrowd": crowd,
            "segmentation": seg,
            "area": b[2] * b[3],
            "frequency": "f",
        }
        for k, (i, b, c, crowd, seg) in enumerate(boxes)
    ]
    categories = [
        {"id": 90, "name": "toothbrush", "synset": "x"},
        {"id": 1, "name": "person"},
        {"id": 13, "name": "stop sign"},
    ]
    return images, _coco(root, records, annotations, categories)


def test_coco_2017_quirks_keep_the_defaults_running(tmp_path, caplog):
    # A zero-size box made its image a bad sample, so a COCO 2017 run stopped under on_error="raise";
    # a box starting a hair past the right edge became the inverted [40.4, 5, 40, 10].
    images, path = coco_2017_like(tmp_path)
    with caplog.at_level("WARNING", logger="gpupipe"):
        source = gpupipe.CocoDetection(images, path)
    assert source.classes == ["person", "stop sign", "toothbrush"]
    assert source.category_ids == [1, 13, 90], "category_ids[label] is the COCO id (torchvision's label)"
    assert [Path(n).relative_to(images).as_posix() for n in source.names] == [
        f"train2017/{k:012d}.png" for k in range(4)
    ]
    assert source.boxes[0].tolist() == [[30, 20, 40, 30], [2, 3, 2.5, 3.25]]
    assert source.box_labels[0].tolist() == [0, 2]
    assert source.boxes[1].shape == (0, 4) and source.boxes[3].shape == (0, 4)
    assert source.boxes[2].tolist() == [[1, 2, 4, 6]] and source.box_labels[2].tolist() == [1]
    assert source.problems == [] and source.annotation_errors == {}
    assert [(d.path.split("#")[1], d.reason) for d in source.dropped] == [
        ("annotation 101", "box [5, 5, 0, 4] is empty (0 wide or tall)"),
        ("annotation 103", "box [40.4, 5, 0.3, 5] is empty once clipped to its 40x30 image"),
        ("annotation 104", "box [-0.9, 5, 0.5, 5] is empty once clipped to its 40x30 image"),
    ]
    assert all(d.path.startswith(f"{path}#") for d in source.dropped)
    assert "3 empty boxes left out" in caplog.text and "annotation 101" in caplog.text
    crowd = gpupipe.CocoDetection(images, path, include_crowd=True)
    assert crowd.boxes[1].tolist() == [[4, 4, 12, 12]] and crowd.box_labels[1].tolist() == [2]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_coco_boxes_reach_the_batch_aligned(tmp_path, backend):
    images, path = coco_2017_like(tmp_path)
    pipeline = [ops.Decode(), ops.Resize((60, 80)), ops.Output("uint8")]
    loader = gpupipe.loader(
        gpupipe.CocoDetection(images, path), pipeline, batch_size=4, backend=backend, num_threads=1, shuffle=False
    )
    images_batch, targets = next(iter(loader))
    assert images_batch.shape == (4, 3, 60, 80)
    rows = gpupipe.to_detection_targets(targets, label_offset=1)
    # the sub-pixel box (1 x 0.5 px at this size) is below the pipeline's 1-pixel minimum, as SanitizeBoxes'
    assert [r["labels"].tolist() for r in rows] == [[1], [], [2], []]
    assert np.allclose(rows[0]["boxes"].numpy(), [[60, 40, 80, 60]], atol=1e-4)
    assert np.allclose(rows[2]["boxes"].numpy(), [[2, 4, 8, 12]], atol=1e-4)


def test_a_negative_box_size_still_makes_its_image_a_bad_sample(tmp_path):
    images = tmp_path / "im"
    path = _coco(
        tmp_path,
        [dict(_image(images, "a.png"), id=1)],
        [{"id": 5, "image_id": 1, "category_id": 1, "bbox": [5, 5, -3, 4]}],
    )
    source = gpupipe.CocoDetection(images, path)
    assert source.annotation_errors == {0: "annotation 5: box of size -3x4 (sizes must be positive)"}
    assert source.dropped == []


def test_a_left_out_crowd_box_is_not_judged(tmp_path):
    # A crowd annotation (left out by default) with an empty box made its image a bad sample.
    images = tmp_path / "im"
    path = _coco(
        tmp_path,
        [dict(_image(images, "a.png"), id=1)],
        [
            {"id": 5, "image_id": 1, "category_id": 1, "bbox": [5, 5, 0, 0], "iscrowd": 1},
            {"id": 6, "image_id": 1, "category_id": 1, "bbox": [1, 1, 4, 4], "iscrowd": 0},
        ],
    )
    source = gpupipe.CocoDetection(images, path)
    assert source.annotation_errors == {} and source.boxes[0].tolist() == [[1, 1, 5, 5]]


def test_image_ids_of_another_type_are_named(tmp_path):
    images = tmp_path / "im"
    path = _coco(
        tmp_path,
        [dict(_image(images, "a.png"), id=1)],
        [{"id": 5, "image_id": "1", "category_id": 1, "bbox": [1, 1, 4, 4]}],
    )
    source = gpupipe.CocoDetection(images, path)
    assert [p.reason for p in source.problems] == [
        "unknown image id '1' (a string; the images' ids are numbers: 1 is one)"
    ]


def test_lvis_images_without_file_name_are_refused_naming_coco_url(tmp_path):
    path = tmp_path / "lvis_v1_val.json"
    path.write_text(
        json.dumps(
            {
                "images": [
                    {"id": 1, "coco_url": "http://images.cocodataset.org/val2017/1.jpg", "width": 4, "height": 4}
                ],
                "categories": [{"id": 1}],
            }
        )
    )
    with pytest.raises(ValueError) as info:
        gpupipe.CocoDetection(tmp_path, path)
    assert str(path) in str(info.value) and "images[0] has no file_name" in str(info.value)
    assert "coco_url" in str(info.value) and "val2017/1.jpg" in str(info.value)


@pytest.mark.timeout(300)  # a parse quadratic in the annotations runs for hours; no time is asserted
def test_a_100k_annotation_file_parses_in_one_pass(tmp_path):
    images = tmp_path / "im"
    count = 2000
    records = [{"id": k, "file_name": f"{k}.png", "width": 40, "height": 30} for k in range(count)]
    images.mkdir(exist_ok=True)
    anns = [
        {
            "id": j,
            "image_id": j % count,
            "category_id": 1 + j % 80,
            "bbox": [1.5, 2.5, 10.25, 5.0],
            "area": 51.25,
            "iscrowd": 0,
            "segmentation": [[1.5, 2.5, 11.75, 2.5, 11.75, 7.5]],
        }
        for j in range(100_000)
    ]
    path = _coco(tmp_path, records, anns, [{"id": c, "name": str(c)} for c in range(1, 81)])
    source = gpupipe.CocoDetection(images, path)
    assert sum(len(b) for b in source.boxes) == 100_000 and len(source) == count


# -- segmentation ----------------------------------------------------------------------------------

VOC_PALETTE = [0, 0, 0, 128, 0, 0, 0, 128, 0, 128, 128, 0] + [0, 0, 0] * 251 + [224, 224, 192]


SAME_SIZE = [ops.Decode(), ops.Resize((16, 24)), ops.Output("uint8")]


def _voc_mask(k: int) -> np.ndarray:
    """(16, 24) ids: background 0, class ``k % 3 + 1`` in a box with a 1-pixel 255 border, as VOC's."""
    ids = np.zeros((16, 24), np.uint8)
    ids[2 + k : 12, 3:15] = 255
    ids[3 + k : 11, 4:14] = k % 3 + 1
    return ids


def voc_like(root: Path) -> Path:
    """``VOC/JPEGImages`` (5 photos), ``SegmentationClass`` (palette masks of 3), and the split files."""
    voc = root / "VOC"
    for folder in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        (voc / folder).mkdir(parents=True)
    rng = np.random.default_rng(0)
    for k in range(5):
        Image.fromarray(rng.integers(0, 255, (16, 24, 3), np.uint8)).save(voc / "JPEGImages" / f"2007_00{k}.jpg")
    for k in range(3):
        mask = Image.fromarray(_voc_mask(k), "P")
        mask.putpalette(VOC_PALETTE)
        mask.save(voc / "SegmentationClass" / f"2007_00{k}.png")
    (voc / "ImageSets/Segmentation/train.txt").write_text("2007_000\n2007_001\n")
    (voc / "ImageSets/Segmentation/val.txt").write_text("2007_002\n\n")
    return voc


def test_voc_without_a_split_names_the_split_argument(tmp_path):
    # The docs' own VOC example (JPEGImages beside SegmentationClass) stopped on 14,000 images without masks
    # under on_error="raise", with nothing saying how to read VOC's split.
    voc = voc_like(tmp_path)
    source = gpupipe.SegmentationFolder(voc / "JPEGImages", voc / "SegmentationClass")
    assert sorted(Path(p.path).name for p in source.problems) == ["2007_003.jpg", "2007_004.jpg"]
    with pytest.raises(gpupipe.errors.SampleError) as info:
        gpupipe.loader(
            source, SAME_SIZE, batch_size=2, backend="torchvision"
        )
    assert "split=" in str(info.value) and "ImageSets/Segmentation/train.txt" in str(info.value)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_voc_split_files_read_the_listed_pairs_aligned(tmp_path, backend):
    voc = voc_like(tmp_path)
    split = voc / "ImageSets/Segmentation/train.txt"
    source = gpupipe.SegmentationFolder(voc / "JPEGImages", voc / "SegmentationClass", split=split)
    assert [Path(n).name for n in source.names] == ["2007_000.jpg", "2007_001.jpg"] and source.problems == []
    loader = gpupipe.loader(
        source,
        SAME_SIZE,
        batch_size=2,
        backend=backend,
        num_threads=1,
        shuffle=False,
    )
    images, masks = next(iter(loader))
    assert images.shape == (2, 3, 16, 24) and masks.shape == (2, 16, 24)
    assert masks.tolist() == [_voc_mask(0).tolist(), _voc_mask(1).tolist()], "palette indices, 255 borders kept"
    val = gpupipe.SegmentationFolder(
        voc / "JPEGImages", voc / "SegmentationClass", split=voc / "ImageSets/Segmentation/val.txt"
    )
    assert [Path(n).name for n in val.names] == ["2007_002.jpg"]


def test_a_split_naming_a_missing_image_or_mask_is_a_problem(tmp_path):
    voc = voc_like(tmp_path)
    split = tmp_path / "list.txt"
    split.write_text("2007_000\n2007_004\n2007_009\n")
    source = gpupipe.SegmentationFolder(voc / "JPEGImages", voc / "SegmentationClass", split=split)
    assert [Path(n).name for n in source.names] == ["2007_000.jpg"]
    reasons = {Path(p.path).name: p.reason for p in source.problems}
    assert reasons["2007_004.jpg"].startswith("no mask (expected ")
    assert reasons["list.txt:3"] == f"2007_009 names no image under {str(voc / 'JPEGImages')!r}"
    assert len(reasons) == 2
    bad = tmp_path / "main.txt"
    bad.write_text("2007_000  1\n")  # ImageSets/Main's "name label" lines are not a segmentation split
    with pytest.raises(ValueError, match=r"main.txt line 1: '2007_000  1' is not one image name"):
        gpupipe.SegmentationFolder(voc / "JPEGImages", voc / "SegmentationClass", split=bad)
    with pytest.raises(gpupipe.errors.PathNotFound, match="nothing.txt"):
        gpupipe.SegmentationFolder(voc / "JPEGImages", voc / "SegmentationClass", split=tmp_path / "nothing.txt")


def test_masks_saved_as_jpeg_are_named(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    for k in range(2):
        Image.new("RGB", (8, 8)).save(tmp_path / "images" / f"{k}.png")
    Image.fromarray(np.ones((8, 8), np.uint8)).save(tmp_path / "masks" / "0.png")
    Image.fromarray(np.ones((8, 8), np.uint8)).save(tmp_path / "masks" / "1.jpg")
    source = gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks")
    [problem] = source.problems
    assert problem.path == str(tmp_path / "images" / "1.png")
    assert problem.reason == (
        f"no mask (expected {tmp_path / 'masks' / '1.png'}; {tmp_path / 'masks' / '1.jpg'} is not read: "
        "lossy compression puts values between the class ids, save masks as PNG)"
    )


def test_cityscapes_names_that_do_not_pair_are_shown(tmp_path):
    for folder, name in (
        ("leftImg8bit/train/aachen", "aachen_000000_000019_leftImg8bit"),
        ("gtFine/train/aachen", "aachen_000000_000019_gtFine_labelIds"),
    ):
        (tmp_path / folder).mkdir(parents=True)
        Image.new("L", (8, 4)).save(tmp_path / folder / f"{name}.png")
    with pytest.raises(ValueError) as info:
        gpupipe.SegmentationFolder(tmp_path / "leftImg8bit", tmp_path / "gtFine")
    assert "'train/aachen/aachen_000000_000019_leftImg8bit'" in str(info.value)
    assert "'train/aachen/aachen_000000_000019_gtFine_labelIds'" in str(info.value)


@pytest.mark.parametrize(
    "values, reason",
    [
        (np.zeros((8, 8, 3), np.uint8), "is not a single-channel gray (1-16 bit) or palette"),  # CamVid colours
        (np.full((8, 8), 26001, np.uint16), "class ids must fit 0..255, this one holds 26001"),  # instanceIds
    ],
)
def test_colour_and_instance_masks_are_bad_samples_named(tmp_path, values, reason):
    # A 16-bit mask with ids above 255 (Cityscapes' instanceIds) was found only mid-run, naming its image only.
    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "images" / "a.png")
    Image.fromarray(values).save(tmp_path / "masks" / "a.png")
    source = gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks")
    with pytest.raises(gpupipe.errors.SampleError) as info:
        gpupipe.loader(source, [ops.Decode(), ops.Resize((8, 8)), ops.Output("uint8")], batch_size=1)
    assert str(tmp_path / "masks" / "a.png") in str(info.value) and reason in str(info.value)
