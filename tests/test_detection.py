"""Detection: boxes follow their objects through every geometric op and the presets, on every backend;
boxes are dropped exactly when their objects leave; both backends give the same boxes."""

from __future__ import annotations

import pytest
import torch

import gpupipe
from gpupipe import ops
from helpers import (BACKEND_DEVICES, CPU_BACKENDS, DALI_BACKEND_DEVICES, make_detection_set, make_image_folder,
                     object_pixels, rest_and_resumed)

#: Lowest IoU of a box with its object's visible pixel extent (measured lowest 0.80 over these
#: pipelines, on both CPU backends: resampling blurs edges by about a pixel).
MIN_IOU = 0.75
#: Boxes with a side below this (pixels) are only required to hold their object's pixels.
SMALL = 4.0

GEOMETRIES = {
    "random-resized-crop": [ops.RandomResizedCrop(96, scale=(0.3, 1.0))],
    "resize": [ops.Resize((96, 80))],
    "resize-max-size-pad": [ops.Resize(None, max_size=90), ops.PadTo(96)],
    "center-crop": [ops.CenterCrop(64)],
    "random-crop": [ops.RandomCrop(64)],
    "random-resize": [ops.RandomResize(60, 130), ops.CenterCrop(56)],
    "flip": [ops.HorizontalFlip(0.5), ops.Resize((96, 96))],
    "rotation": [ops.Resize((96, 96)), ops.RandomRotation(30)],
    "iou-crop": [ops.RandomIoUCrop(), ops.Resize((96, 96))],
    "zoom-out": [ops.RandomZoomOut(0, side_range=(1.0, 2.0), p=1.0), ops.Resize((128, 128))],
    "preset-ssd": gpupipe.presets.detection_ssd(128)[1:],
    "preset-val": gpupipe.presets.detection_val(96, 160)[1:],
}
#: Ops that drop boxes whose centre leaves the window even though part of the object shows.
CENTRE_RULE = {"iou-crop", "preset-ssd"}


@pytest.fixture(scope="module")
def det_data(tmp_path_factory):
    return make_detection_set(tmp_path_factory.mktemp("det"), 24)


def coco(det_data, **kwargs):
    return gpupipe.CocoDetection(*det_data, **kwargs)


def extent(mask: torch.Tensor):
    """xyxy of the True pixels of a ``(H, W)`` mask, or ``None``."""
    ys, xs = torch.nonzero(mask, as_tuple=True)
    if not len(xs):
        return None
    return [xs.min().item(), ys.min().item(), xs.max().item() + 1, ys.max().item() + 1]


def iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - ix * iy
    return ix * iy / union if union > 0 else 0.0


def check_boxes(images, targets, geometry: str) -> int:
    """Asserts that each box encloses its object and each object in view has its box; returns the box count."""
    pixels = object_pixels(images.cpu())
    boxes, labels = targets["boxes"].cpu(), targets["labels"].cpu()
    height, width = images.shape[-2:]
    count = 0
    for b in range(len(images)):
        for label in range(3):
            chosen = labels[b] == label
            assert chosen.sum() <= 1, "one object of each colour per image"
            seen = extent(pixels[b, label])
            if chosen.any():
                count += 1
                box = boxes[b][chosen][0].tolist()
                assert 0 <= box[0] < box[2] <= width and 0 <= box[1] < box[3] <= height, box
                if min(box[2] - box[0], box[3] - box[1]) >= SMALL:
                    assert seen is not None, f"{geometry}: a box {box} with no object under it"
                    assert iou(box, seen) >= MIN_IOU, f"{geometry}: box {box}, object at {seen}"
                elif seen is not None:
                    assert box[0] - 1.5 <= seen[0] and seen[2] <= box[2] + 1.5, (box, seen)
            elif seen is not None:
                inside = seen[0] > 0 and seen[1] > 0 and seen[2] < width and seen[3] < height
                slim = min(seen[2] - seen[0], seen[3] - seen[1]) <= 2
                assert slim or (geometry in CENTRE_RULE and not inside), \
                    f"{geometry}: object of label {label} at {seen} lost its box"
    return count


@pytest.mark.parametrize("geometry", list(GEOMETRIES))
@pytest.mark.parametrize("backend, device", BACKEND_DEVICES)
def test_boxes_enclose_their_objects(det_data, backend, device, geometry):
    pipeline = [ops.Decode(), *GEOMETRIES[geometry], ops.Output("uint8")]
    loader = gpupipe.loader(coco(det_data), pipeline, batch_size=8, backend=backend, device=device,
                            num_threads=1, seed=3)
    kept = 0
    for _ in range(2):
        for images, targets in loader:
            assert set(targets) == {"boxes", "labels", "image_sizes"}
            assert targets["boxes"].dtype == torch.float32 and targets["labels"].dtype == torch.int64
            assert targets["boxes"].shape[:2] == targets["labels"].shape and targets["boxes"].shape[2] == 4
            assert targets["boxes"].device == images.device
            padded = targets["labels"] == -1
            assert (targets["boxes"][padded] == gpupipe.targets.BOX_PADDING).all()
            kept += check_boxes(images, targets, geometry)
    assert kept >= 24, "most objects stay in view"


def visible_share(images, source, order):
    """Per sample of the batch and label: the share of the object's pixels still in view."""
    pixels = object_pixels(images)
    share = {}
    for row, index in enumerate(order):
        for box, label in zip(source.boxes[index], source.box_labels[index]):
            area = float((box[2] - box[0]) * (box[3] - box[1]))
            share[row, int(label)] = pixels[row, int(label)].sum().item() / area
    return share


@pytest.mark.parametrize("min_visible", [0.0, 0.45])
@pytest.mark.parametrize("crop", ["random", "center"])
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_boxes_are_dropped_exactly_when_their_objects_leave(det_data, backend, crop, min_visible):
    """Whole-pixel crops of PNGs: the share of each object in view is counted exactly."""
    source = coco(det_data)
    window = ops.RandomCrop(56) if crop == "random" else ops.CenterCrop(56)
    pipeline = [ops.Decode(), ops.HorizontalFlip(), window, ops.SanitizeBoxes(min_visible=min_visible),
                ops.Output("uint8")]
    loader = gpupipe.loader(source, pipeline, batch_size=len(source), backend=backend, num_threads=1, seed=4,
                            shuffle=False)
    images, targets = next(iter(loader))
    share = visible_share(images, source, range(len(source)))
    dropped = kept = 0
    for (row, label), visible in share.items():
        has_box = bool((targets["labels"][row] == label).any())
        expected = visible > 0 and visible >= min_visible
        assert has_box == expected, f"sample {row} label {label}: {visible:.3f} in view, box kept: {has_box}"
        dropped, kept = dropped + (not has_box), kept + has_box
    assert dropped and kept, "the crop both keeps and drops objects"
    assert (targets["labels"] >= -1).all() and targets["labels"].shape[1] <= 3


@pytest.mark.parametrize("preset", ["preset-ssd", "preset-val", "rotation", "random-resized-crop"])
@pytest.mark.parametrize("backend, device", DALI_BACKEND_DEVICES)
def test_backends_give_the_same_boxes_for_the_same_seed(det_data, backend, device, preset):
    pipeline = [ops.Decode(), *GEOMETRIES[preset]]

    def run(backend, device):
        loader = gpupipe.loader(coco(det_data), pipeline, batch_size=12, backend=backend, device=device,
                                num_threads=1, seed=6)
        return [{k: v.cpu() for k, v in targets.items()} for _, targets in loader]

    ours, theirs = run(backend, device), run("torchvision", "cpu")
    assert len(ours) == len(theirs) == 2
    for a, b in zip(ours, theirs):
        assert torch.equal(a["labels"], b["labels"]), "the same boxes survive"
        assert torch.allclose(a["boxes"], b["boxes"], atol=1e-3)
        assert torch.equal(a["image_sizes"], b["image_sizes"])


def test_detection_targets_for_torchvision_models(det_data):
    source = coco(det_data)
    loader = gpupipe.loader(source, gpupipe.presets.detection_val(96, 160), batch_size=6, backend="torchvision",
                            num_threads=0, shuffle=False)
    images, targets = next(iter(loader))
    assert images.shape == (6, 3, 160, 160)
    inputs, per_image = gpupipe.to_detection_inputs(images, targets)
    assert len(inputs) == len(per_image) == 6
    for k, (image, target) in enumerate(zip(inputs, per_image)):
        h, w = source.sizes()[k]
        scale = min(96 / min(h, w), 160 / max(h, w))
        assert abs(image.shape[1] - h * scale) <= 1 and abs(image.shape[2] - w * scale) <= 1
        assert image.shape[1:] == tuple(targets["image_sizes"][k].tolist())
        assert torch.equal(target["labels"], torch.from_numpy(source.box_labels[k]))
        expected = torch.from_numpy(source.boxes[k]) * torch.tensor([image.shape[2] / w, image.shape[1] / h] * 2,
                                                                   dtype=torch.float32)
        assert torch.allclose(target["boxes"], expected, atol=1e-3)
    assert per_image[2]["boxes"].shape == (0, 4) and per_image[2]["labels"].shape == (0,), "an image with no boxes"


@pytest.mark.parametrize("backend", ["torchvision", "dali-cpu"])
def test_ops_that_cannot_carry_boxes_are_refused_naming_op_target_and_backend(det_data, backend):
    pytest.importorskip("nvidia.dali") if backend == "dali-cpu" else None
    with pytest.raises(ValueError, match=f"RandAugment cannot carry boxes on backend '{backend}'"):
        gpupipe.loader(coco(det_data), [ops.Decode(), ops.Resize((32, 32)), ops.RandAugment()], batch_size=2,
                       backend=backend)
    with pytest.raises(ValueError, match="CutMix cannot carry boxes"):
        gpupipe.loader(coco(det_data), [ops.Decode(), ops.Resize((32, 32)), ops.Normalize(), ops.CutMix()],
                       batch_size=2, backend=backend)
    with pytest.raises(ValueError, match="comes after SanitizeBoxes"):
        gpupipe.loader(coco(det_data), [ops.Decode(), ops.SanitizeBoxes(), ops.Resize((32, 32))], batch_size=2,
                       backend=backend)


def test_an_op_for_boxes_on_another_source_says_what_source_it_needs(tmp_path):
    make_image_folder(tmp_path / "folder", {"a": 2})
    with pytest.raises(ValueError, match=r"RandomIoUCrop cannot carry class labels: it needs boxes \(a detection "
                                         r"source: CocoDetection, or a pack of one\)"):
        gpupipe.loader(tmp_path / "folder", [ops.Decode(), ops.RandomIoUCrop(), ops.Resize((8, 8))], batch_size=2,
                       backend="torchvision")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_resume_with_boxes_continues_exactly(det_data, backend):
    pipeline = gpupipe.presets.detection_ssd(64)
    make = lambda: gpupipe.loader(coco(det_data), pipeline, batch_size=5, backend=backend,  # noqa: E731
                                  num_threads=1, seed=8)
    rest, again = rest_and_resumed(make(), make())
    rest, again = [t for _, t in rest], [t for _, t in again]
    assert len(rest) == len(again) == 4
    for a, b in zip(rest, again):
        assert torch.equal(a["labels"], b["labels"]) and torch.equal(a["boxes"], b["boxes"])


@pytest.mark.parametrize("backend, device", BACKEND_DEVICES)
def test_a_batch_whose_images_have_no_box_at_all_is_delivered(det_data, backend, device):
    """A batch in which no image has a box (every third image of the set has none) is an ordinary batch,
    not a decoding failure that would blame (and with on_error="skip" drop) good images."""
    source = coco(det_data)
    empty = [i for i in range(len(source)) if len(source.boxes[i]) == 0]
    assert len(empty) >= 4
    source = source.subset(empty[:4] + [i for i in range(len(source)) if i not in empty][:4])
    pipeline = [ops.Decode(), ops.RandomIoUCrop(), ops.HorizontalFlip(), ops.Resize((48, 48)), ops.Output("uint8")]
    loader = gpupipe.loader(source, pipeline, batch_size=4, backend=backend, device=device, num_threads=1,
                            shuffle=False, on_error="raise")
    counts = [int((targets["labels"] >= 0).sum()) for _, targets in loader]
    assert len(counts) == 2 and counts[0] == 0 and counts[1] >= 1 and loader.skipped == []
