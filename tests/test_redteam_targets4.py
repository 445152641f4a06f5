"""Red team (targets4): masks as users have them (Cityscapes labelIds, colour-coded masks, suffixed
names, ids beyond the classes) end in correct targets on both CPU backends, or a bad sample naming the
file; each test was failing before its fix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from exif_helpers import jpeg_with_exif, scene
from helpers import CPU_BACKENDS, needs_dali
from PIL import Image

import gpupipe
from gpupipe import ops
from gpupipe.pack import PackSettings, pack

#: Cityscapes' labelIds of its 19 training classes, in trainId order (cityscapesscripts' labels.py).
CITYSCAPES_TRAIN_IDS = [7, 8, 11, 12, 13, 17, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 31, 32, 33]
#: CamVid-like colours and their class ids.
COLOURS = {(128, 128, 128): 0, (128, 0, 0): 1, (192, 192, 128): 2}


def _cityscapes_map() -> dict[int, int]:
    """labelId -> trainId, 255 for the ids not trained on (as createTrainIdLabelImgs.py writes them)."""
    table = dict.fromkeys(range(34), 255)
    table.update({label_id: k for k, label_id in enumerate(CITYSCAPES_TRAIN_IDS)})
    return table


def _image(path: Path, h: int, w: int, seed: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)


def _mask(path: Path, values: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(values).save(path)


def _cityscapes(root: Path, count: int = 3, h: int = 12, w: int = 16) -> list[np.ndarray]:
    """leftImg8bit/ and gtFine/ as the dataset unpacks (with the _color and _instanceIds masks beside
    the labelIds); returns each sample's labelIds."""
    rng = np.random.default_rng(1)
    label_ids = []
    for k in range(count):
        stem = f"train/aachen/aachen_{k:06d}_000019"
        _image(root / "leftImg8bit" / f"{stem}_leftImg8bit.png", h, w, seed=k)
        ids = rng.integers(0, 34, (h, w)).astype(np.uint8)
        _mask(root / "gtFine" / f"{stem}_gtFine_labelIds.png", ids)
        _mask(root / "gtFine" / f"{stem}_gtFine_color.png", np.zeros((h, w, 3), np.uint8))
        _mask(root / "gtFine" / f"{stem}_gtFine_instanceIds.png", ids.astype(np.uint16) * 1000)
        label_ids.append(ids)
    return label_ids


def _masks_through(source, backend: str, pipeline=None, **kwargs) -> torch.Tensor:
    h, w = (int(v) for v in source.sizes()[0])
    pipeline = pipeline or [ops.Decode(), ops.CenterCrop((h, w)), ops.Output("uint8")]
    loader = gpupipe.loader(
        source, pipeline, batch_size=len(source), backend=backend, shuffle=False, num_threads=1, **kwargs
    )
    return next(iter(loader))[1]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_cityscapes_label_ids_pair_by_suffix_and_map_to_train_ids(tmp_path, backend):
    # labelIds 0..33 reached the batch as they were (F.cross_entropy with 19 classes refuses them, on a GPU
    # with a device-side assert), and the names paired only after renaming every file.
    label_ids = _cityscapes(tmp_path)
    source = gpupipe.SegmentationFolder(
        tmp_path / "leftImg8bit",
        tmp_path / "gtFine",
        image_suffix="_leftImg8bit",
        mask_suffix="_gtFine_labelIds",
        mask_map=_cityscapes_map(),
    )
    assert source.problems == []  # the _color and _instanceIds masks are not this source's masks
    assert [Path(n).name for n in source.mask_names] == [f"aachen_{k:06d}_000019_gtFine_labelIds.png" for k in range(3)]
    lut = np.array([_cityscapes_map()[v] for v in range(34)], np.uint8)
    masks = _masks_through(source, backend)
    assert masks.dtype == torch.int64
    assert [m.tolist() for m in masks] == [lut[ids].tolist() for ids in label_ids]
    assert set(masks.unique().tolist()) <= set(range(19)) | {255}
    # the same mapping through a crop, a flip and a resize: the mapped ids move, never blended
    pipeline = [ops.Decode(), ops.RandomResizedCrop((9, 13)), ops.HorizontalFlip(0.5), ops.Output("uint8")]
    moved = _masks_through(source, backend, pipeline)
    assert set(moved.unique().tolist()) <= set(range(19)) | {255}


def test_mapped_masks_agree_between_backends_through_the_train_preset(tmp_path):
    pytest.importorskip("nvidia.dali")
    _cityscapes(tmp_path, count=4, h=30, w=40)
    source = gpupipe.SegmentationFolder(
        tmp_path / "leftImg8bit",
        tmp_path / "gtFine",
        image_suffix="_leftImg8bit",
        mask_suffix="_gtFine_labelIds",
        mask_map=_cityscapes_map(),
    )
    pipeline = [ops.Decode(), ops.RandomResizedCrop((20, 24)), ops.HorizontalFlip(0.5), ops.Output("uint8")]
    dali, tv = (
        next(iter(gpupipe.loader(source, pipeline, batch_size=4, backend=b, seed=3, num_threads=1)))[1]
        for b in ("dali-cpu", "torchvision")
    )
    assert torch.equal(dali, tv)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_colour_masks_are_read_through_a_colour_map(tmp_path, backend):
    # An RGB colour mask (CamVid) was only a bad sample: there was no way to give its colours' ids.
    colours = list(COLOURS)
    ids = np.random.default_rng(0).integers(0, 3, (10, 14))
    rgb = np.array(colours, np.uint8)[ids]
    _image(tmp_path / "images" / "a.png", 10, 14)
    _mask(tmp_path / "masks" / "a.png", rgb)
    # the same colours held in a palette PNG (indices in another order than the ids)
    _image(tmp_path / "images" / "b.png", 10, 14, seed=1)
    palette = Image.fromarray((2 - ids).astype(np.uint8), "P")
    palette.putpalette([v for c in colours[::-1] for v in c])
    palette.save(tmp_path / "masks" / "b.png")
    # an opaque RGBA colour mask (as matplotlib and some labelling tools save them), and one with a hole
    _image(tmp_path / "images" / "c.png", 10, 14, seed=2)
    _mask(tmp_path / "masks" / "c.png", np.concatenate([rgb, np.full((10, 14, 1), 255, np.uint8)], axis=2))
    _image(tmp_path / "images" / "d.png", 10, 14, seed=3)
    rgba = np.concatenate([rgb, np.full((10, 14, 1), 255, np.uint8)], axis=2)
    rgba[0, 0, 3] = 0
    _mask(tmp_path / "masks" / "d.png", rgba)
    source = gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks", mask_map=COLOURS)
    loader = gpupipe.loader(
        source,
        [ops.Decode(), ops.CenterCrop((10, 14))],
        batch_size=4,
        backend=backend,
        shuffle=False,
        on_error="skip",
    )
    masks = next(iter(loader))[1]
    assert [m.tolist() for m in masks[:3]] == [ids.tolist()] * 3  # a, b, c; d replaced by a good one
    assert [Path(s.path).name for s in loader.skipped] == ["d.png"]
    assert "transparent" in loader.skipped[0].reason


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_value_the_map_does_not_list_is_a_bad_sample_naming_file_and_values(tmp_path, backend):
    _image(tmp_path / "images" / "a.png", 6, 8)
    _mask(tmp_path / "masks" / "a.png", np.full((6, 8), 7, np.uint8))
    _image(tmp_path / "images" / "b.png", 6, 8)
    _mask(tmp_path / "masks" / "b.png", np.array([[7] * 8] * 5 + [[7, 40, 41, 7, 7, 7, 7, 7]], np.uint8))
    source = gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks", mask_map={7: 0})
    with pytest.raises(gpupipe.SampleError) as info:
        _masks_through(source, backend)
    assert "b.png" in str(info.value)
    assert "40, 41" in str(info.value) and "mask_map" in str(info.value)
    _image(tmp_path / "images" / "c.png", 6, 8)
    _mask(tmp_path / "masks" / "c.png", np.zeros((6, 8, 3), np.uint8))  # a colour mask, a map of values
    source = gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks", mask_map={7: 0})
    with pytest.raises(gpupipe.SampleError, match="c.png.*a colour mask needs a mask_map of colours"):
        _masks_through(source, backend)
    pipeline = [ops.Decode(), ops.CenterCrop((6, 8))]
    loader = gpupipe.loader(source, pipeline, batch_size=1, backend=backend, on_error="skip", shuffle=False)
    masks = [m for _, m in loader]  # the bad samples replaced by the good one, never delivered
    assert masks and all(m.tolist() == [[[0] * 8] * 6] for m in masks)
    assert sorted(Path(s.path).name for s in loader.skipped) == ["b.png", "c.png"]


@pytest.mark.parametrize(
    "mask_map, message",
    [
        ({1: 256}, "class ids in 0..255"),
        ({-1: 0}, "0..65535"),
        ({(1, 2): 0}, "(r, g, b)"),
        ({1: 0, (1, 2, 3): 1}, "either"),
        ({}, "empty"),
        ("voc", "a dict"),
        ({1: 5}, "classes"),
    ],
)
def test_a_mask_map_that_cannot_work_is_refused_naming_the_argument(tmp_path, mask_map, message):
    _image(tmp_path / "images" / "a.png", 4, 4)
    _mask(tmp_path / "masks" / "a.png", np.ones((4, 4), np.uint8))
    with pytest.raises(ValueError, match="mask_map") as info:
        gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks", mask_map=mask_map, classes=["a", "b"])
    assert message in str(info.value)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_16_bit_masks_with_large_values_are_read_through_an_id_map(tmp_path, backend):
    ids = np.array([[1000, 2000], [1000, 65535]], np.uint16)
    _image(tmp_path / "images" / "a.png", 2, 2)
    _mask(tmp_path / "masks" / "a.png", ids)
    source = gpupipe.SegmentationFolder(
        tmp_path / "images",
        tmp_path / "masks",
        mask_map=dict(zip(np.array([1000, 2000, 65535], np.uint16), np.array([1, 2, 255]))),
    )
    assert _masks_through(source, backend)[0].tolist() == [[1, 2], [1, 255]]


def test_packing_writes_the_mapped_ids(tmp_path):
    label_ids = _cityscapes(tmp_path / "cs", count=2)
    source = gpupipe.SegmentationFolder(
        tmp_path / "cs" / "leftImg8bit",
        tmp_path / "cs" / "gtFine",
        image_suffix="_leftImg8bit",
        mask_suffix="_gtFine_labelIds",
        mask_map=_cityscapes_map(),
    )
    pack(source, tmp_path / "packed", PackSettings(), workers=1, progress=False)
    lut = np.array([_cityscapes_map()[v] for v in range(34)], np.uint8)
    masks = _masks_through(gpupipe.Shards(tmp_path / "packed"), "torchvision")
    assert sorted(m.tolist() for m in masks) == sorted(lut[ids].tolist() for ids in label_ids)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_mask_id_outside_the_classes_is_a_bad_sample_naming_the_file(tmp_path, backend):
    # classes=["a", "b"] with a mask holding 3: delivered as it was (on a GPU, cross_entropy's device assert).
    _image(tmp_path / "images" / "a.png", 4, 6)
    _mask(tmp_path / "masks" / "a.png", np.array([[0, 1, 255, 1, 0, 0]] * 4, np.uint8))
    _image(tmp_path / "images" / "b.png", 4, 6)
    _mask(tmp_path / "masks" / "b.png", np.array([[0, 1, 3, 1, 0, 0]] * 4, np.uint8))
    source = gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks", classes=["a", "b"])
    with pytest.raises(gpupipe.SampleError) as info:
        _masks_through(source, backend)
    assert "b.png" in str(info.value) and "3" in str(info.value) and "2 classes" in str(info.value)
    pipeline = [ops.Decode(), ops.CenterCrop((4, 6))]
    loader = gpupipe.loader(source, pipeline, batch_size=1, backend=backend, on_error="skip", shuffle=False)
    masks = [m[0].tolist() for _, m in loader]
    assert masks and all(m == [[0, 1, 255, 1, 0, 0]] * 4 for m in masks)
    assert [Path(s.path).name for s in loader.skipped] == ["b.png"]


def test_masks_beside_their_images_pair_by_a_mask_suffix(tmp_path):
    # Kaggle-style folders: 0001.png beside 0001_mask.png; the masks were taken for images, the pairs lost.
    for k in range(2):
        _image(tmp_path / "data" / f"{k:04d}.png", 5, 7, seed=k)
        _mask(tmp_path / "data" / f"{k:04d}_mask.png", np.full((5, 7), k + 1, np.uint8))
    _image(tmp_path / "data" / "0002.png", 5, 7)  # its mask is missing
    source = gpupipe.SegmentationFolder(tmp_path / "data", tmp_path / "data", mask_suffix="_mask")
    assert [Path(n).name for n in source.names] == ["0000.png", "0001.png"]
    assert [Path(n).name for n in source.mask_names] == ["0000_mask.png", "0001_mask.png"]
    assert [(Path(p.path).name, p.reason) for p in source.problems] == [
        ("0002.png", f"no mask (expected {tmp_path / 'data' / '0002_mask.png'})")
    ]
    masks = _masks_through(source, "torchvision", on_error="skip")
    assert masks[:, 0, 0].tolist() == [1, 2]


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("dali-cpu", marks=needs_dali),
        "torchvision",
    ],
)
def test_a_mask_resized_where_a_pixel_centre_meets_a_source_edge_reads_the_pixel_below(tmp_path, backend):
    # 30 -> 45 rows: output row 10's centre, 10.5 * 30 / 45 = 7.0, lies on source row 7's top edge; the documented
    # rule (nearest-exact) reads row 7. Found comparing the backends: dali-cpu read row 6 there.
    ids = (np.arange(30)[:, None] + np.zeros((1, 40), int)).astype(np.uint8)
    _image(tmp_path / "images" / "a.png", 30, 40)
    _mask(tmp_path / "masks" / "a.png", ids)
    source = gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks")
    masks = _masks_through(source, backend, [ops.Decode(), ops.Resize((45, 50)), ops.Output("uint8")])
    rows = np.floor((np.arange(45) + 0.5) * 30 / 45).astype(int)
    assert masks[0, :, 0].tolist() == rows.tolist()


def test_a_mask_drawn_on_a_photo_as_stored_says_the_photo_is_turned_by_exif(tmp_path):
    # A phone photo stored 24x40 with EXIF orientation 6, its mask drawn by a tool that ignored the orientation:
    # refused as "mask is 24x40, its image 40x24", which read as a broken mask rather than a turned photo.
    image, mask = scene()
    stored = np.ascontiguousarray(np.rot90(image))  # (40, 24, 3): as a camera stores a photo shown turned
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "a.jpg").write_bytes(jpeg_with_exif(stored, ("start", 6)))
    _mask(tmp_path / "masks" / "a.png", np.ascontiguousarray(np.rot90(mask)))
    _image(tmp_path / "images" / "b.png", 40, 24)  # no orientation: a mask of the wrong size, said as before
    _mask(tmp_path / "masks" / "b.png", np.zeros((24, 40), np.uint8))
    source = gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks")
    reasons = {Path(source.names[i]).name: r for i, r in source.scan().bad.items()}
    assert set(reasons) == {"a.jpg", "b.png"}
    assert "EXIF orientation 6" in reasons["a.jpg"] and "as stored" in reasons["a.jpg"]
    assert "EXIF" not in reasons["b.png"].split("(EXIF orientation applied)")[1]


def test_boxes_annotated_on_a_photo_as_stored_say_the_photo_is_turned_by_exif(tmp_path):
    image, _ = scene()
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "a.jpg").write_bytes(jpeg_with_exif(np.ascontiguousarray(np.rot90(image)), ("start", 6)))
    coco = {
        "images": [{"id": 1, "file_name": "a.jpg", "width": 24, "height": 40}],  # the stored size
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [3, 26, 6, 10], "iscrowd": 0}],
        "categories": [{"id": 1, "name": "box"}],
    }
    (tmp_path / "a.json").write_text(__import__("json").dumps(coco))
    source = gpupipe.CocoDetection(tmp_path / "images", tmp_path / "a.json")
    (reason,) = source.scan().bad.values()
    assert "its annotations say 24x40" in reason and "EXIF orientation 6" in reason and "as stored" in reason


def test_a_split_lists_suffixed_names_either_way_and_unsuffixed_files_are_not_the_sources(tmp_path):
    _cityscapes(tmp_path, count=3)
    _image(tmp_path / "leftImg8bit" / "train" / "aachen" / "notes.png", 12, 16)  # no suffix: not an image here
    split = tmp_path / "train.txt"
    split.write_text("train/aachen/aachen_000000_000019_leftImg8bit\ntrain/aachen/aachen_000002_000019\n")
    source = gpupipe.SegmentationFolder(
        tmp_path / "leftImg8bit",
        tmp_path / "gtFine",
        image_suffix="_leftImg8bit",
        mask_suffix="_gtFine_labelIds",
        split=split,
    )
    assert [Path(n).name for n in source.names] == [
        "aachen_000000_000019_leftImg8bit.png",
        "aachen_000002_000019_leftImg8bit.png",
    ]
    assert source.problems == []


@pytest.mark.parametrize("suffix", [3, "a/b"])
def test_a_suffix_that_is_not_a_name_ending_is_refused_naming_it(tmp_path, suffix):
    _image(tmp_path / "images" / "a.png", 4, 4)
    _mask(tmp_path / "masks" / "a.png", np.ones((4, 4), np.uint8))
    with pytest.raises(ValueError, match="mask_suffix must be the end of a file name"):
        gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks", mask_suffix=suffix)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_the_loaders_dataset_view_gives_masks_and_boxes_not_minus_one(tmp_path, backend):
    # loader.dataset[i] gave (image, -1) and .targets [-1, -1, ...] for masks and boxes: evaluation code
    # reading the dataset as torchvision's VOCSegmentation / CocoDetection got no target at all.
    label_ids = _cityscapes(tmp_path, count=2)
    source = gpupipe.SegmentationFolder(
        tmp_path / "leftImg8bit",
        tmp_path / "gtFine",
        image_suffix="_leftImg8bit",
        mask_suffix="_gtFine_labelIds",
        mask_map=_cityscapes_map(),
    )
    loader = gpupipe.loader(source, [ops.Decode(), ops.CenterCrop((12, 16))], batch_size=1, backend=backend)
    lut = np.array([_cityscapes_map()[v] for v in range(34)], np.uint8)
    image, mask = loader.dataset[1]
    assert image.size == mask.size == (16, 12) and mask.mode == "L"
    assert np.asarray(mask).tolist() == lut[label_ids[1]].tolist()
    assert loader.dataset.targets == loader.source.mask_names
    assert [m for _, m in loader.dataset.samples] == loader.source.mask_names

    from helpers import make_detection_set

    coco = gpupipe.CocoDetection(*make_detection_set(tmp_path / "det", 3))
    loader = gpupipe.loader(coco, gpupipe.presets.detection_val(64, 96), batch_size=1, backend=backend)
    for i in range(3):
        _, target = loader.dataset[i]
        boxes, labels = loader.source.boxes_of(i)
        assert target["boxes"].dtype == torch.float32 and target["labels"].dtype == torch.int64
        assert target["boxes"].tolist() == boxes.tolist() and target["labels"].tolist() == labels.tolist()
        assert target["boxes"].shape == (len(labels), 4)  # (0, 4) for an image without boxes
    assert [len(t["labels"]) for t in loader.dataset.targets] == [len(loader.source.boxes_of(i)[1]) for i in range(3)]
