"""Detection and segmentation targets red-teamed a fifth time, against what torchvision's own tools give:
COCO files as converters write them (an image id given to two files, ids and sizes written as whole
floats), the COCO image id of each sample for evaluation, and boxes and masks through deterministic
pipelines compared with ``torchvision.transforms.v2`` on ``tv_tensors.BoundingBoxes`` / ``Mask``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import CPU_BACKENDS
from PIL import Image

import gpupipe
from gpupipe import ops


def _image(root: Path, name: str, size=(40, 30), colour=(90, 90, 90)) -> dict:
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(root / name)
    return {"file_name": name, "width": size[0], "height": size[1]}


def _coco(root: Path, images: list[dict], annotations: list[dict], categories=None) -> Path:
    path = root / "instances.json"
    cats = categories if categories is not None else [{"id": 1, "name": "person"}]
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": cats}))
    return path


# -- an image id given to two files: whose boxes are they? ---------------------------------------------------


def test_an_image_id_given_to_two_files_makes_its_image_a_bad_sample_not_one_with_the_others_boxes(tmp_path):
    # Before: the first record's file was read with every box of the id (some drawn on the second file), and
    # with on_error="skip" trained on; torchvision's COCO keeps the last record instead. Neither can be right.
    images = tmp_path / "im"
    path = _coco(
        tmp_path,
        [
            dict(_image(images, "a.png"), id=7),
            dict(_image(images, "b.png"), id=8),
            dict(_image(images, "c.png"), id=7),  # a merge of two files that both numbered from 7
            dict(_image(images, "a.png"), id=9),  # the same record again under another id: its file, named
        ],
        [
            {"id": 1, "image_id": 7, "category_id": 1, "bbox": [1, 1, 10, 10]},
            {"id": 2, "image_id": 7, "category_id": 1, "bbox": [20, 5, 10, 10]},
            {"id": 3, "image_id": 8, "category_id": 1, "bbox": [2, 2, 5, 5]},
        ],
    )
    source = gpupipe.CocoDetection(images, path)
    bad = {Path(source.names[i]).name: why for i, why in source.annotation_errors.items()}
    assert bad["a.png"].startswith("image id 7 is given to 2 image records (a.png, c.png)"), bad
    assert [(p.path.split("#")[1], p.reason.split(" (")[0]) for p in source.problems] == [
        ("image 7", "the image id repeats: a.png and c.png"),
        ("image 9", "names the file of image id 7"),
    ]
    loader = gpupipe.loader(
        source,
        [ops.Decode(), ops.Resize((30, 40)), ops.Output("uint8")],
        batch_size=4,
        backend="torchvision",
        on_error="skip",
        num_threads=0,
        shuffle=False,
    )
    assert [Path(n).name for n in loader.source.names] == ["b.png"]
    _, targets = next(iter(loader))
    assert targets["boxes"].tolist() == [[[2, 2, 7, 7]]]


def test_an_image_record_repeated_whole_keeps_its_boxes(tmp_path):
    images = tmp_path / "im"
    record = dict(_image(images, "a.png"), id=7)
    path = _coco(tmp_path, [record, dict(record)], [{"id": 1, "image_id": 7, "category_id": 1, "bbox": [1, 1, 4, 4]}])
    source = gpupipe.CocoDetection(images, path)
    assert source.annotation_errors == {} and source.boxes[0].tolist() == [[1, 1, 5, 5]]
    assert [p.reason for p in source.problems] == ["the image record repeats (the first is used)"]


# -- ids and sizes written as whole floats (pandas, numpy float columns) -------------------------------------


def test_ids_and_sizes_written_as_whole_floats_read_as_ints(tmp_path):
    # Before: "1.0" as an image id was "not a number or string", a category id 3.0 made every annotation
    # "unknown category 3.0" (every image a bad sample) and a width of 40.0 refused the file; pycocotools'
    # dicts (torchvision's CocoDetection) read them as the ints they equal.
    images = tmp_path / "im"
    path = _coco(
        tmp_path,
        [dict(_image(images, "a.png"), id=1.0, width=40.0, height=30.0), dict(_image(images, "b.png"), id=2)],
        [
            {"id": 1.0, "image_id": 1.0, "category_id": 3.0, "bbox": [1, 1, 4, 4], "iscrowd": 0.0},
            {"id": 2, "image_id": 2.0, "category_id": 5, "bbox": [2, 2, 4, 4]},
        ],
        categories=[{"id": 5.0, "name": "b"}, {"id": 3, "name": "a"}],
    )
    source = gpupipe.CocoDetection(images, path)
    assert source.problems == [] and source.annotation_errors == {}
    assert source.category_ids == [3, 5] and all(type(c) is int for c in source.category_ids)
    assert source.classes == ["a", "b"]
    assert [b.tolist() for b in source.boxes] == [[[1, 1, 5, 5]], [[2, 2, 6, 6]]]
    assert [b.tolist() for b in source.box_labels] == [[0], [1]]
    assert source.image_ids == [1, 2]


@pytest.mark.parametrize(
    "field, value, error",
    [
        ("width", 40.5, "width and height must be positive ints"),
        ("id", 1.5, "id 1.5 is not an int or a string"),
        ("id", float("nan"), "id nan is not an int or a string"),
    ],
)
def test_ids_and_sizes_that_are_not_whole_are_refused_naming_the_field(tmp_path, field, value, error):
    images = tmp_path / "im"
    path = _coco(
        tmp_path, [dict(_image(images, "a.png"), id=1), {**_image(images, "b.png"), "id": 2, field: value}], []
    )
    try:
        source = gpupipe.CocoDetection(images, path)
    except ValueError as err:
        assert error in str(err) and "instances.json" in str(err)
        return
    assert [p.reason for p in source.problems] == [error]


def test_a_category_id_of_the_other_type_is_named_as_such(tmp_path):
    # Before: "unknown category '1'" without saying that the categories' id is the number 1 (as image ids say).
    images = tmp_path / "im"
    path = _coco(
        tmp_path,
        [dict(_image(images, "a.png"), id=1), dict(_image(images, "b.png"), id=2)],
        [
            {"id": 5, "image_id": 1, "category_id": "1", "bbox": [1, 1, 4, 4]},
            {"id": 6, "image_id": 2, "category_id": 7, "bbox": [1, 1, 4, 4]},
        ],
        categories=[{"id": 1, "name": "a"}, {"id": "7", "name": "b"}],
    )
    source = gpupipe.CocoDetection(images, path)
    assert source.annotation_errors == {
        0: "annotation 5: unknown category '1' (a string; the categories' ids are numbers: 1 is one)",
        1: "annotation 6: unknown category 7 (a number; the categories' ids are strings: '7' is one)",
    }


# -- the COCO image id of each sample (evaluation) -------------------------------------------------------------


def test_each_sample_names_its_coco_image_id_in_the_order_batches_read_them(tmp_path):
    # Before: nothing gave a sample's image id; torchvision's CocoDetection orders images by id, gpupipe by
    # record, so predictions matched to ids by torchvision's order went to the wrong images.
    images = tmp_path / "im"
    records = [
        dict(_image(images, f"{n}.png", colour=(10 * k, 0, 0)), id=i)
        for k, (n, i) in enumerate((("z", 30), ("y", 10), ("bad", 20), ("x", 40)))
    ]
    records[2]["width"] = 41  # annotated size differs: a bad sample, skipped
    path = _coco(
        tmp_path,
        records,
        [{"id": 1, "image_id": i, "category_id": 1, "bbox": [i // 10, 1, 4, 4]} for i in (10, 20, 30, 40)],
    )
    source = gpupipe.CocoDetection(images, path)
    assert source.image_ids == [30, 10, 20, 40], "the records' order"
    loader = gpupipe.loader(
        source,
        [ops.Decode(), ops.Resize((30, 40)), ops.Output("uint8")],
        batch_size=3,
        backend="torchvision",
        on_error="skip",
        num_threads=0,
        shuffle=False,
    )
    assert loader.source.image_ids == [30, 10, 40]
    assert [loader.dataset[k][1]["image_id"] for k in range(3)] == [30, 10, 40], "as v2's CocoDetection wrapper"
    assert [t["image_id"] for t in loader.dataset.targets] == [30, 10, 40]
    images_batch, targets = next(iter(loader))
    for row, image_id in enumerate(loader.source.image_ids):
        assert targets["boxes"][row, 0, 0].item() == image_id // 10, "row k of an unshuffled epoch is image_ids[k]"


# -- boxes and masks against transforms.v2 on tv_tensors ---------------------------------------------------------


def _scene(root: Path) -> tuple[Path, Path, list]:
    """Two images with boxes given as COCO xywh floats of many decimals, one box partly and one wholly cut by
    the pipelines below; returns (images, annotations, per image its xywh boxes and category ids)."""
    images = root / "im"
    boxes = {
        1: [
            ([3.141592653589793, 2.718281828459045, 20.123456789, 10.987654321], 4),
            ([30.5, 20.25, 9.25, 9.5], 2),
            ([0.0, 0.0, 6.0, 28.0], 9),
        ],
        2: [([10.0, 3.0, 12.0, 12.0], 9), ([41.75, 0.5, 5.0, 33.25], 4)],
    }
    records = [dict(_image(images, "a.png", (40, 30)), id=1), dict(_image(images, "b.png", (48, 34)), id=2)]
    annotations = [
        {"id": 10 * i + k, "image_id": i, "category_id": c, "bbox": b}
        for i, rows in boxes.items()
        for k, (b, c) in enumerate(rows)
    ]
    path = _coco(root, records, annotations, [{"id": c, "name": f"c{c}"} for c in (2, 4, 9)])
    return images, path, [boxes[1], boxes[2]]


#: gpupipe pipelines and the same geometry as transforms.v2 functionals.
def _v2_steps(name):
    from torchvision.transforms.v2 import functional as F

    return {
        "resize-flip": [lambda x: F.resize(x, [24, 36]), F.horizontal_flip],
        "vflip-centre-crop": [F.vertical_flip, lambda x: F.center_crop(x, [26, 30])],
        "resize-pad": [lambda x: F.resize(x, [20, 22]), lambda x: F.pad(x, [0, 0, 10, 12])],
    }[name]


GPUPIPE_STEPS = {
    "resize-flip": [ops.Resize((24, 36)), ops.HorizontalFlip(1.0)],
    "vflip-centre-crop": [ops.VerticalFlip(1.0), ops.CenterCrop((26, 30))],
    "resize-pad": [ops.Resize((20, 22)), ops.PadTo((32, 32))],
}


@pytest.mark.parametrize("steps", list(GPUPIPE_STEPS))
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_boxes_match_transforms_v2_on_coco_xywh_boxes_with_sanitize(tmp_path, backend, steps):
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    images, path, truth = _scene(tmp_path)
    source = gpupipe.CocoDetection(images, path)
    pipeline = [ops.Decode(), *GPUPIPE_STEPS[steps], ops.SanitizeBoxes(), ops.Output("uint8")]
    loader = gpupipe.loader(source, pipeline, batch_size=2, backend=backend, num_threads=1, shuffle=False)
    _, targets = next(iter(loader))
    rows = gpupipe.to_detection_targets(targets)
    label_of = {c: k for k, c in enumerate(source.category_ids)}
    for row, (boxes, size) in enumerate(zip(truth, [(30, 40), (34, 48)])):
        x = tv_tensors.BoundingBoxes([b for b, _ in boxes], format="XYWH", canvas_size=size)
        x = v2.ClampBoundingBoxes()(v2.ConvertBoundingBoxFormat("XYXY")(x))
        labels = torch.tensor([label_of[c] for _, c in boxes])
        for step in _v2_steps(steps):
            x = v2.ClampBoundingBoxes()(step(x))
        out = v2.SanitizeBoundingBoxes(min_size=1.0, min_area=1.0)({"boxes": x, "labels": labels})
        assert rows[row]["labels"].tolist() == out["labels"].tolist(), f"row {row}: the same boxes, in order"
        assert torch.allclose(rows[row]["boxes"], out["boxes"].as_subclass(torch.Tensor).float(), atol=1e-3)
        assert tuple(targets["image_sizes"][row].tolist()) == tuple(out["boxes"].canvas_size) or steps == "resize-pad"


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_voc_palette_mask_keeps_255_through_resize_crop_and_pad_as_v2_does_with_fill_255(tmp_path, backend):
    from torchvision import tv_tensors
    from torchvision.transforms.v2 import functional as F

    (tmp_path / "img").mkdir()
    (tmp_path / "msk").mkdir()
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 4, (30, 40)).astype(np.uint8)
    ids[0, :] = ids[:, 0] = ids[12:15, 10:30] = 255  # VOC's object borders
    Image.fromarray(rng.integers(0, 255, (30, 40, 3), np.uint8)).save(tmp_path / "img" / "a.png")
    mask = Image.fromarray(ids, "P")
    mask.putpalette([0, 0, 0, 128, 0, 0, 0, 128, 0, 128, 128, 0] + [0] * 741 + [224, 224, 192])
    mask.save(tmp_path / "msk" / "a.png")
    source = gpupipe.SegmentationFolder(tmp_path / "img", tmp_path / "msk", ignore_index=255)
    pipeline = [ops.Decode(), ops.CenterCrop((26, 30)), ops.Resize((52, 60)), ops.PadTo((64, 64)), ops.Output("uint8")]
    loader = gpupipe.loader(source, pipeline, batch_size=1, backend=backend, num_threads=1, shuffle=False)
    _, masks = next(iter(loader))
    x = F.center_crop(tv_tensors.Mask(torch.from_numpy(ids)[None]), [26, 30])
    x = F.resize(x, [52, 60], interpolation=F.InterpolationMode.NEAREST_EXACT)
    x = F.pad(x, [0, 0, 4, 12], fill=255)
    assert masks.dtype == torch.int64 and masks.shape == (1, 64, 64)
    assert torch.equal(masks[0], x[0].long()), "255 kept as 255, the padding 255"
