"""Boxes red-teamed an eleventh time: COCO files as CVAT, Roboflow, Label Studio and Detectron2 write them
(absolute and Windows file names, RLE and polygon segmentations, crowd boxes, ids 1, 3, 90, categories
sharing a name), and boxes at the ``min_size`` threshold after odd resizes and flips, compared with
``torchvision.transforms.v2`` on both CPU backends."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from helpers import CPU_BACKENDS
from PIL import Image

import gpupipe
from gpupipe import ops


def _image(root: Path, name: str, size=(20, 16)) -> dict:
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, (90, 90, 90)).save(root / name)
    return {"file_name": name, "width": size[0], "height": size[1]}


def _coco(root: Path, images: list[dict], annotations: list[dict], categories=None, **extra) -> Path:
    path = root / "instances.json"
    cats = categories if categories is not None else [{"id": 1, "name": "person"}]
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": cats, **extra}))
    return path


def _batches(source, steps, backend, batch_size=2, **kw):
    pipeline = [ops.Decode(), *steps, ops.Output("uint8")]
    loader = gpupipe.loader(
        source, pipeline, batch_size=batch_size, backend=backend, num_threads=1, shuffle=False, **kw
    )
    return loader, [t for _, t in loader]


# -- file names as tools write them -----------------------------------------------------------------------


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_absolute_and_windows_file_names_inside_the_folder_are_read_and_escapes_are_not(tmp_path, backend):
    """Detectron2's ``convert_to_coco_json`` writes each image's absolute path; tools on Windows write
    ``train\\0001.jpg``. Both name files inside the images folder and are read with their boxes; an
    absolute path or ``..\\`` leading outside stays a problem, and its annotations say whose record it is
    (not 'unknown image id', when the id is in the file)."""
    images = tmp_path / "images"
    records = [
        dict(_image(images, "abs.png"), id=1, file_name=str(images / "abs.png")),
        dict(_image(images, "sub/win.png"), id=2, file_name="sub\\win.png"),
        dict(_image(images, "dot.png"), id=3, file_name="./dot.png"),
        dict(_image(tmp_path, "outside.png", (9, 9)), id=4, file_name=str(tmp_path / "outside.png")),
        dict(_image(tmp_path, "back.png"), id=5, file_name="..\\back.png"),
        dict(_image(images, "train/0001.png"), id=6, file_name="/home/alice/coco/train/0001.png"),
    ]
    annotations = [{"id": 10 + i, "image_id": i, "category_id": 1, "bbox": [1, 2, 3 + i, 4]} for i in range(1, 6)]
    source = gpupipe.CocoDetection(images, _coco(tmp_path, records, annotations))
    assert source.names == [str(images / "abs.png"), str(images / "sub" / "win.png"), str(images / "dot.png")]
    assert source.image_ids == [1, 2, 3]
    problems = [(p.path.split("#")[1], p.reason) for p in source.problems]
    assert problems == [
        ("image 4", f"file_name {str(tmp_path / 'outside.png')!r} is not a path inside {str(images)!r}"),
        ("image 5", f"file_name '..\\\\back.png' is not a path inside {str(images)!r}"),
        (
            "image 6",
            f"file_name '/home/alice/coco/train/0001.png' is not a path inside {str(images)!r} (written "
            "on another machine? 'train/0001.png' is in the folder: write file_names relative to it)",
        ),
        (
            "annotation 14",
            "the record of image id 4 is not used (its file_name is not a path inside the images folder)",
        ),
        (
            "annotation 15",
            "the record of image id 5 is not used (its file_name is not a path inside the images folder)",
        ),
    ]
    loader, targets = _batches(source, [ops.Resize((16, 20))], backend, batch_size=3, on_error="skip")
    assert len(loader.skipped) == 5 and all("#" in s.path for s in loader.skipped), "only the records left out"
    assert targets[0]["boxes"].tolist() == [[[1, 2, 5, 6]], [[1, 2, 6, 6]], [[1, 2, 7, 6]]]
    assert targets[0]["labels"].tolist() == [[0], [0], [0]]


def test_a_backslash_in_a_name_that_exists_as_written_is_kept(tmp_path):
    """A POSIX file whose name holds a backslash is the file the record names, when it exists."""
    images = tmp_path / "images"
    record = dict(_image(images, "a\\b.png"), id=1)
    _image(images, "a/b.png", (9, 9))
    source = gpupipe.CocoDetection(images, _coco(tmp_path, [record], []))
    assert source.names == [str(images / "a\\b.png")]


# -- exports of real tools ------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_cvat_roboflow_label_studio_exports_give_exact_boxes_and_labels(tmp_path, backend):
    """Extra keys (``attributes``, ``area`` 0, ``extra``), RLE segmentations as a counts string or list,
    polygons, a crowd box, float image ids, ids 1, 3, 90, no ``info``/``licenses``, a unicode file in a
    subfolder, a 0-wide box, an image without annotations: read exactly, the same on both backends."""
    images = tmp_path / "images"
    records = [
        dict(_image(images, "frames/ä b.png", (37, 23)), id=1.0, license=0, flickr_url="", date_captured=0),
        dict(_image(images, "empty.png", (20, 16)), id=2),
    ]
    annotations = [
        {
            "id": 1,
            "image_id": 1.0,
            "category_id": 90,
            "bbox": [0, 0, 5.5, 7],
            "area": 0,
            "iscrowd": 0,
            "segmentation": {"size": [23, 37], "counts": "0`1"},
            "attributes": {"occluded": False},
        },
        {
            "id": 2,
            "image_id": 1,
            "category_id": 3,
            "bbox": [30, 10, 7, 13],
            "iscrowd": 0,
            "segmentation": [[30, 10, 37, 10, 37, 23]],
            "extra": {"name": "x"},
        },
        {
            "id": 3,
            "image_id": 1,
            "category_id": 1,
            "bbox": [4, 4, 9, 9],
            "iscrowd": 1,
            "segmentation": {"size": [23, 37], "counts": [1, 2, 3]},
        },
        {"id": 4, "image_id": 1, "category_id": 1, "bbox": [6, 6, 0, 4]},
    ]
    cats = [
        {"id": 90, "name": "toothbrush", "supercategory": "x"},
        {"id": 1, "name": "person"},
        {"id": 3, "name": "car"},
    ]
    source = gpupipe.CocoDetection(images, _coco(tmp_path, records, annotations, cats))
    assert source.classes == ["person", "car", "toothbrush"] and source.category_ids == [1, 3, 90]
    assert source.problems == [] and [d.path.split("#")[1] for d in source.dropped] == ["annotation 4"]
    _, targets = _batches(source, [ops.Resize((23, 37))], backend)
    assert targets[0]["boxes"].tolist() == [[[0, 0, 5.5, 7], [30, 10, 37, 23]], [[0, 0, 0, 0], [0, 0, 0, 0]]]
    assert targets[0]["labels"].tolist() == [[2, 1], [-1, -1]]
    assert targets[0]["boxes"].dtype == torch.float32 and targets[0]["labels"].dtype == torch.int64
    assert targets[0]["image_sizes"].dtype == torch.int64 and targets[0]["image_sizes"].tolist() == [[23, 37]] * 2
    with_crowd = gpupipe.CocoDetection(images, _coco(tmp_path, records, annotations, cats), include_crowd=True)
    assert with_crowd.boxes[0].tolist()[-1] == [4, 4, 13, 13]


def test_categories_sharing_a_name_are_named_in_a_warning(tmp_path, caplog):
    """Two datasets merged (Roboflow) can give one name two ids: they stay two labels, as torchvision keeps
    them, but the split class is said, naming the ids and labels."""
    images = tmp_path / "images"
    cats = [{"id": 1, "name": "person"}, {"id": 5, "name": "dog"}, {"id": 7, "name": "person"}]
    path = _coco(tmp_path, [dict(_image(images, "a.png"), id=1)], [], cats)
    with caplog.at_level(logging.WARNING, logger="gpupipe"):
        source = gpupipe.CocoDetection(images, path)
    assert source.classes == ["person", "dog", "person"]
    assert "category name 'person' is given to ids 1, 7 (labels 0, 2)" in caplog.text


# -- geometry at the edges, against transforms.v2 -------------------------------------------------------------


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_boxes_at_the_min_size_threshold_after_odd_resizes_and_flips_are_kept_as_v2_keeps_them(tmp_path, backend):
    from torchvision import tv_tensors
    from torchvision.transforms import v2
    from torchvision.transforms.v2 import functional as F

    images = tmp_path / "images"
    width, height = 37, 29
    boxes = [
        [float(x), float((x * 3 + w) % (height - 3)), float(w), 3.0]
        for x in range(0, 35, 2)
        for w in (1, 2, 3, 6, 7)
        if x + w <= width
    ]
    annotations = [{"id": k, "image_id": 1, "category_id": 1, "bbox": b} for k, b in enumerate(boxes)]
    source = gpupipe.CocoDetection(
        images, _coco(tmp_path, [dict(_image(images, "a.png", (width, height)), id=1)], annotations)
    )
    for size, min_size in (((29, 12), 1.0), ((29, 21), 2.0), ((10, 74), 1.0)):
        steps = [ops.Resize(size), ops.HorizontalFlip(1.0), ops.SanitizeBoxes(min_size=min_size)]
        _, (targets,) = _batches(source, steps, backend, batch_size=1)
        x = v2.ConvertBoundingBoxFormat("XYXY")(
            tv_tensors.BoundingBoxes(boxes, format="XYWH", canvas_size=(height, width))
        )
        x = F.horizontal_flip(F.resize(x, list(size)))
        out = v2.SanitizeBoundingBoxes(min_size=min_size)({"boxes": x, "labels": torch.zeros(len(boxes))})
        kept = targets["labels"][0] >= 0
        assert int(kept.sum()) == len(out["boxes"]) > 0, (size, min_size)
        assert torch.equal(targets["boxes"][0][kept], out["boxes"].as_subclass(torch.Tensor)), (size, min_size)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_thousands_of_boxes_on_one_image_and_rows_left_empty_pad_exactly(tmp_path, backend):
    images = tmp_path / "images"
    records = [dict(_image(images, "many.png"), id=1), dict(_image(images, "cut.png"), id=2)]
    annotations = [{"id": j, "image_id": 1, "category_id": 1, "bbox": [j % 15, j % 11, 4, 4]} for j in range(3000)]
    annotations.append({"id": 9999, "image_id": 2, "category_id": 1, "bbox": [0, 0, 3, 3]})
    source = gpupipe.CocoDetection(images, _coco(tmp_path, records, annotations))
    steps = [ops.CenterCrop((8, 8)), ops.SanitizeBoxes(min_size=1.0)]
    loader, batches = _batches(source, steps, backend, batch_size=2, drop_last=True)
    (targets,) = batches
    assert len(loader) == 1 and targets["boxes"].shape[0] == 2 and targets["labels"].shape[0] == 2
    assert (targets["labels"][1] == -1).all(), "the box of image 2 lies outside the centre crop"
    kept = int((targets["labels"][0] >= 0).sum())
    expected = sum(
        1
        for j in range(3000)
        if min(j % 15 + 4, 14) - max(j % 15, 6) >= 1 and min(j % 11 + 4, 12) - max(j % 11, 4) >= 1
    )
    assert kept == expected == targets["labels"].shape[1]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("min_visible, kept", [(0.6, [6, 7, 13]), (0.7, [7, 13]), (0.3, [4, 6, 7, 3, 13])])
def test_a_box_exactly_min_visible_in_view_is_kept(tmp_path, backend, min_visible, kept):
    """``SanitizeBoxes(min_visible=0.6)`` drops boxes *less* visible than 0.6: one cut to 6 of its 10 pixels
    is kept (0.6 * 10 is 6.000000000000001 in floats, which dropped it), one of 10 of 17 (0.588) is not."""
    images = tmp_path / "images"
    xs = {4: 10, 6: 10, 7: 10, 3: 17, 13: 10}  # x -> width; the 10-px centre crop's window is x 10..20
    annotations = [{"id": x, "image_id": 1, "category_id": 1, "bbox": [x, 10, w, 10]} for x, w in xs.items()]
    record = dict(_image(images, "a.png", (30, 30)), id=1)
    source = gpupipe.CocoDetection(images, _coco(tmp_path, [record], annotations))
    for size in ((10, 10), (7, 7), (13, 13)):
        steps = [ops.CenterCrop((10, 10)), ops.Resize(size), ops.SanitizeBoxes(min_size=0.5, min_visible=min_visible)]
        _, (targets,) = _batches(source, steps, backend, batch_size=1)
        scale = size[1] / 10
        survivors = targets["boxes"][0][targets["labels"][0] >= 0]
        right = [round(float(b[2]) / scale + 10) for b in survivors]  # each box's right edge, in the photo
        assert right == [x + xs[x] if x + xs[x] < 20 else 20 for x in kept], (size, right)
