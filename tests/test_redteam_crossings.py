"""Red-team where features cross: segmentation and detection packs served over HTTP and read with the
training presets, torchvision datasets wrapped for transforms v2 swapped into gpupipe.DataLoader, and
WebDataset tars that hold masks or boxes (which gpupipe.WebDataset does not read: it must say so)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import replace_packed_member
from PIL import Image
from servers import FolderServer

import gpupipe
from gpupipe.pack import pack

#: class id -> colour drawn where the mask holds it / inside the box
COLOURS = {1: (220, 30, 30), 2: (30, 220, 30)}


def make_segmentation(root: Path, count: int) -> Path:
    """PNG images with one red (class 1) and one green (class 2) rectangle, and their masks."""
    rng = np.random.default_rng(0)
    for sub in ("images", "masks"):
        (root / sub).mkdir(parents=True)
    for i in range(count):
        h, w = (int(v) for v in rng.integers(40, 80, 2))
        image, mask = np.zeros((h, w, 3), np.uint8), np.zeros((h, w), np.uint8)
        for c in COLOURS:
            y0, x0 = int(rng.integers(0, h // 2)), int(rng.integers(0, w // 2))
            y1, x1 = y0 + int(rng.integers(8, h // 2)), x0 + int(rng.integers(8, w // 2))
            image[y0:y1, x0:x1], mask[y0:y1, x0:x1] = COLOURS[c], c
        Image.fromarray(image).save(root / "images" / f"im{i:03d}.png")
        Image.fromarray(mask).save(root / "masks" / f"im{i:03d}.png")
    return root


def misaligned(images: torch.Tensor, masks: torch.Tensor, erode: int = 3) -> tuple[int, int]:
    """(pixels whose colour is not their class's, pixels checked): the interior of each class region
    (``erode`` pixels from its edge, where resizing blends the colours, and from the image's border, beyond
    which a region may have ended before the crop)."""
    bad = total = 0
    for c, colour in COLOURS.items():
        inside = masks == c
        for _ in range(erode):
            inside[:, [0, -1]] = False
            inside[:, :, [0, -1]] = False
            was = inside.clone()
            inside[:, 1:] &= was[:, :-1]
            inside[:, :-1] &= was[:, 1:]
            inside[:, :, 1:] &= was[:, :, :-1]
            inside[:, :, :-1] &= was[:, :, 1:]
        pixels = images.permute(0, 2, 3, 1)[inside].int()
        bad += int(((pixels - torch.tensor(colour)).abs().max(1).values > 60).sum())
        total += int(inside.sum())
    return bad, total


@pytest.fixture(scope="module")
def served_segmentation(tmp_path_factory):
    root = tmp_path_factory.mktemp("crossings")
    make_segmentation(root / "seg", 10)
    source = gpupipe.SegmentationFolder(root / "seg" / "images", root / "seg" / "masks")
    pack(source, root / "packed", progress=False, workers=1)
    server = FolderServer(root)
    yield root, server
    server.stop()


@pytest.mark.parametrize("backend", ["torchvision", "dali-cpu"])
def test_a_segmentation_pack_over_http_gives_the_local_batches_aligned(served_segmentation, backend):
    root, server = served_segmentation
    ops = gpupipe.presets.get("segmentation-train", crop=32, base=48)

    def batches(source):
        return list(gpupipe.loader(source, ops, batch_size=4, backend=backend, dtype="uint8", seed=3, device="cpu"))

    local = batches(str(root / "packed"))
    remote = batches(gpupipe.Shards(f"{server.url}/packed", cache_dir=root / f"cache-{backend}"))
    assert len(local) == len(remote) == 3
    checked = 0
    for (image, mask), (r_image, r_mask) in zip(local, remote):
        assert torch.equal(image, r_image) and torch.equal(mask, r_mask)
        bad, total = misaligned(image, mask)
        assert bad == 0, f"{bad} of {total} pixels of a class region have another colour"
        checked += total
    assert checked > 200


def wds_tar(path: Path, samples: list[dict[str, bytes]]) -> Path:
    with tarfile.open(path, "w") as tar:
        for key, sample in enumerate(samples):
            for ext, data in sample.items():
                info = tarfile.TarInfo(f"s{key:04d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def encoded(array: np.ndarray, fmt: str) -> bytes:
    out = io.BytesIO()
    Image.fromarray(array).save(out, fmt)
    return out.getvalue()


def test_webdataset_tars_of_masks_or_boxes_are_refused_saying_what_it_reads(tmp_path):
    """A WebDataset of segmentation (``.png`` masks beside ``.jpg``) or detection samples (boxes in
    ``.json``) is not read by gpupipe.WebDataset (class labels only): the error says so and what reads
    them, rather than only that a ``.cls`` member is missing."""
    image = encoded(np.full((16, 16, 3), 90, np.uint8), "JPEG")
    mask = encoded(np.ones((16, 16), np.uint8), "PNG")
    boxes = json.dumps({"boxes": [[1, 1, 8, 8]], "labels": [3]}).encode()
    masks = wds_tar(tmp_path / "masks.tar", [{"jpg": image, "png": mask}] * 3)
    detection = wds_tar(tmp_path / "boxes.tar", [{"jpg": image, "json": boxes}] * 3)
    for tar, reads in ((masks, "SegmentationFolder"), (detection, "CocoDetection")):
        with pytest.raises(ValueError) as info:
            gpupipe.WebDataset(str(tar), cache_dir=tmp_path / "cache")
        message = str(info.value)
        assert "class labels" in message and reads in message and "gpupipe.pack" in message, message
    with pytest.raises(ValueError) as info:  # the mask taken for the label: refused before any tar is read
        gpupipe.WebDataset(str(masks), label="png", cache_dir=tmp_path / "cache")
    assert "label='png'" in str(info.value) and "class labels" in str(info.value), str(info.value)


def test_a_json_label_field_holding_a_list_says_what_reads_several_labels_or_boxes(tmp_path):
    """``label='json:<field>'`` naming a list: several labels per image (multi-label) point to
    FileList, a list of boxes to CocoDetection; a mask in any image format (``.webp``, ``.tif``) beside
    the image is named as a mask, and taking one for the label is refused before any tar is read."""
    image = encoded(np.full((16, 16, 3), 90, np.uint8), "JPEG")
    meta = json.dumps({"tags": [1, 4], "names": ["cat", "dog"], "boxes": [[1, 1, 8, 8]]}).encode()
    tar = wds_tar(tmp_path / "meta.tar", [{"jpg": image, "json": meta}] * 3)
    for field, reads in (("tags", "FileList"), ("names", "FileList"), ("boxes", "CocoDetection")):
        with pytest.raises(ValueError) as info:
            gpupipe.WebDataset(str(tar), label=f"json:{field}", cache_dir=tmp_path / "cache")
        message = str(info.value)
        assert "s0000.json" in message and f"{field!r}" in message and reads in message, message
    mask = encoded(np.ones((16, 16), np.uint8), "WEBP")
    masks = wds_tar(tmp_path / "masks.tar", [{"jpg": image, "seg.webp": mask}] * 3)
    with pytest.raises(ValueError) as info:
        gpupipe.WebDataset(str(masks), cache_dir=tmp_path / "cache")
    assert ".seg.webp beside its .jpg image (a mask?)" in str(info.value), str(info.value)
    for label in ("seg.webp", "TIF"):
        with pytest.raises(ValueError, match=f"label='{label}' names an image member"):
            gpupipe.WebDataset(str(masks), label=label, cache_dir=tmp_path / "cache")


def test_a_collate_fn_refusal_describes_the_batches_of_a_detection_source(tmp_path):
    """The detection references' ``collate_fn=lambda b: tuple(zip(*b))`` given with a gpupipe
    CocoDetection: the refusal says what gpupipe's batches hold for boxes (not ``labels (B,)`` alone)
    and what gives torchvision's detection models their list of dicts."""
    (tmp_path / "images").mkdir()
    Image.fromarray(np.zeros((20, 20, 3), np.uint8)).save(tmp_path / "images" / "a.png")
    annotations = {"images": [{"id": 1, "file_name": "a.png", "width": 20, "height": 20}],
                   "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [2, 2, 8, 8], "area": 64,
                                    "iscrowd": 0}],
                   "categories": [{"id": 1, "name": "thing"}]}
    (tmp_path / "ann.json").write_text(json.dumps(annotations))
    source = gpupipe.CocoDetection(tmp_path / "images", tmp_path / "ann.json")
    with pytest.raises(gpupipe.Error) as info:
        gpupipe.DataLoader(source, batch_size=2, collate_fn=lambda b: tuple(zip(*b)), pipeline="detection-val")
    message = str(info.value)
    assert "boxes" in message and "masks" in message and "to_detection_targets" in message, message


def test_a_dataset_wrapped_for_transforms_v2_is_refused_naming_the_fallback_and_read_with_it(tmp_path):
    """torchvision's VOCSegmentation wrapped for transforms v2: without ``fallback`` the refusal names
    ``fallback='torchvision'`` (as documented); with it, the batches are torch's, tv_tensors kept."""
    from torchvision import datasets, tv_tensors
    from torchvision.transforms import v2

    make_segmentation(tmp_path / "seg", 5)
    voc = tmp_path / "VOCdevkit" / "VOC2012"
    for sub in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        (voc / sub).mkdir(parents=True)
    names = []
    for png in sorted((tmp_path / "seg" / "images").iterdir()):
        Image.open(png).convert("RGB").save(voc / "JPEGImages" / f"{png.stem}.jpg", quality=95)
        (voc / "SegmentationClass" / png.name).write_bytes((tmp_path / "seg" / "masks" / png.name).read_bytes())
        names.append(png.stem)
    (voc / "ImageSets" / "Segmentation" / "train.txt").write_text("\n".join(names) + "\n")
    transforms = v2.Compose([v2.ToImage(), v2.Resize((24, 24)), v2.ToDtype(torch.float32, scale=True)])
    dataset = datasets.wrap_dataset_for_transforms_v2(datasets.VOCSegmentation(tmp_path, transforms=transforms))
    with pytest.raises(gpupipe.Error) as info:
        gpupipe.DataLoader(dataset, batch_size=2)
    assert "fallback='torchvision'" in str(info.value), str(info.value)

    def collate(batch):
        return tuple(zip(*batch))

    expected = list(torch.utils.data.DataLoader(dataset, batch_size=2, collate_fn=collate))
    with pytest.warns(UserWarning, match="fallback='torchvision'"):
        swapped = gpupipe.DataLoader(dataset, batch_size=2, collate_fn=collate, fallback="torchvision")
    got = list(swapped)
    assert len(got) == len(expected) == 3
    for (images, masks), (e_images, e_masks) in zip(got, expected):
        assert all(isinstance(m, tv_tensors.Mask) for m in masks)
        assert all(torch.equal(a, b) for a, b in zip(images + masks, e_images + e_masks))


class RandomDraws(torch.utils.data.Dataset):
    """A dataset with random augmentations of its own: ``(tensor([i]), draws of torch's, Python's and numpy's
    RNGs)``, as a v2 transform's ``RandomResizedCrop`` draws from torch's."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int):
        import random

        return torch.tensor([i]), torch.tensor([int(torch.randint(0, 10**6, ())), random.randrange(10**6),
                                                int(np.random.randint(10**6))])


@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataset_read_as_it_is_resumes_with_the_augmentations_of_the_uninterrupted_run(workers):
    """fallback='torchvision' with a dataset of its own random augmentations: a pass resumed from
    ``state_dict()`` gives the batches the uninterrupted pass gives (draws included), whatever worker reads
    a batch; another generator gives other draws, and the pass leaves the global RNGs alone."""

    def make(seed=5):
        with pytest.warns(UserWarning, match="fallback='torchvision'"):
            return gpupipe.DataLoader(RandomDraws(), batch_size=2, shuffle=True, num_workers=workers,
                                      fallback="torchvision", generator=torch.Generator().manual_seed(seed))

    torch.manual_seed(0)
    full = list(make())
    after = torch.rand(1)  # the global RNG, as the pass left it
    interrupted = make()
    passing = iter(interrupted)
    first = [next(passing) for _ in range(2)]
    state = interrupted.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(full) == 5 and len(rest) == 3
    for got, expected in zip(first + rest, full):
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1]), (got, expected)
    assert not torch.equal(torch.cat([d for _, d in make(6)]), torch.cat([d for _, d in full]))
    torch.manual_seed(0)
    assert torch.equal(torch.rand(1), after), "the pass drew from the global RNG"


def fingerprints(masks: torch.Tensor) -> list[tuple[int, int]]:
    """Each sample's (class-1 pixels, class-2 pixels): which sample it is, after a deterministic pipeline."""
    return [(int((m == 1).sum()), int((m == 2).sum())) for m in masks]


def test_two_ranks_share_a_remote_segmentation_pack_aligned_and_resume_from_one_ranks_state(served_segmentation,
                                                                                           tmp_path):
    """torchrun, 2 gloo ranks, the segmentation pack over HTTP: the ranks' shares of an exact pass are disjoint
    and cover the pack; in training both ranks yield as many batches, masks aligned with the pixels; both
    ranks resumed from rank 0's ``state_dict()`` give the batches of the uninterrupted pass."""
    from helpers import two_ranks

    root, server = served_segmentation
    body = f"""
    from test_redteam_crossings import fingerprints, misaligned
    def make(pipeline, **kw):
        cache = {str(tmp_path / 'cache')!r} + str(dist.get_rank())
        source = gpupipe.Shards({server.url + '/packed'!r}, cache_dir=cache)
        return gpupipe.loader(source, pipeline, batch_size=2, backend="torchvision", dtype="uint8", seed=2,
                              device="cpu", **kw)
    exact = make(gpupipe.presets.get("segmentation-val", size=64), shuffle=False, even_batches=False)
    seen = [f for _, masks in exact for f in fingerprints(masks)]
    train = gpupipe.presets.get("segmentation-train", crop=32, base=48)
    full = make(train)
    full.set_epoch(1)
    batches = list(full)
    bad = sum(misaligned(images, masks)[0] for images, masks in batches)
    interrupted = make(train)
    interrupted.set_epoch(1)
    passing = iter(interrupted)
    next(passing)
    states = [None, None]
    dist.all_gather_object(states, interrupted.state_dict())
    resumed = make(train)
    resumed.load_state_dict(states[0])
    resumed.set_epoch(1)
    rest = list(resumed)
    same = len(rest) == len(batches) - 1 and all(
        torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(rest, batches[1:]))
    result = dict(seen=seen, batches=len(batches), bad=bad, resumed=same)
    """
    ranks = two_ranks(tmp_path, body.replace("\n    ", "\n"))
    whole = gpupipe.loader(str(root / "packed"), gpupipe.presets.get("segmentation-val", size=64), batch_size=2,
                           backend="torchvision", dtype="uint8", shuffle=False, device="cpu")
    expected = sorted(tuple(f) for _, masks in whole for f in fingerprints(masks))
    assert sorted(tuple(f) for r in ranks for f in r["seen"]) == expected
    assert ranks[0]["batches"] == ranks[1]["batches"] == 3
    assert [r["bad"] for r in ranks] == [0, 0]
    assert [r["resumed"] for r in ranks] == [True, True]


@pytest.mark.parametrize("backend", ["torchvision", "dali-cpu"])
def test_a_packed_mask_of_another_size_than_its_image_is_skipped_and_named(served_segmentation, tmp_path, backend):
    """A pack whose mask for one image has another size (written by a writer of its own, or edited), read with
    on_error='skip': the sample is listed (DALI's graph stretched the mask over the image without a word)."""
    import shutil

    root, _ = served_segmentation
    packed = Path(shutil.copytree(root / "packed", tmp_path / "packed"))
    replace_packed_member(packed, "00000003.png", encoded(np.ones((10, 10), np.uint8), "PNG"))
    loader = gpupipe.loader(str(packed), gpupipe.presets.get("segmentation-train", crop=32, base=48), batch_size=2,
                            backend=backend, dtype="uint8", seed=1, device="cpu", on_error="skip")
    bad = [misaligned(images, masks)[0] for images, masks in loader]
    assert [s.path.rsplit("#", 1)[-1] for s in loader.skipped] == ["00000003.jpg"], loader.skipped
    assert "mask is 10x10" in loader.skipped[0].reason
    assert bad == [0] * 5


def test_a_jpeg_dali_cannot_decode_is_named_without_dalis_batch_slot(tmp_path):
    """A JPEG whose header reads but whose scan references an unknown component: DALI's error says only
    ``Failed to decode sample #0 :`` (its slot in the probe's batch of one, not the dataset's sample 0, and
    no reason); the skipped reason says that DALI's decoder refused the file, not ``sample #0``."""
    folder = tmp_path / "data" / "a"
    folder.mkdir(parents=True)
    for i in range(3):
        Image.fromarray(np.full((16, 16, 3), 40 * i, np.uint8)).save(folder / f"{i}.jpg", quality=95)
    data = bytearray((folder / "1.jpg").read_bytes())
    at = 2
    while data[at + 1] != 0xDA:  # to the start-of-scan segment
        at += 2 + int.from_bytes(data[at + 2 : at + 4], "big")
    data[at + 5] = 0x77  # its first component id: one the frame does not have
    (folder / "1.jpg").write_bytes(bytes(data))
    loader = gpupipe.loader(str(tmp_path / "data"), [gpupipe.Decode(), gpupipe.Resize((8, 8))], batch_size=3,
                            backend="dali-cpu", device="cpu", on_error="skip", shuffle=False)
    assert len(list(loader)) == 1
    [skipped] = loader.skipped
    assert skipped.path.endswith("1.jpg") and "sample #" not in skipped.reason, skipped
    assert skipped.reason.startswith("cannot decode: ") and "DALI" in skipped.reason, skipped
