"""Red team, first hour, twelfth pass: the library API as a newcomer misuses it.

- ``gpupipe.loader(os.environ.get("DATA", ""), "train")`` read the current folder as an image folder (its
  folders as classes); ``ImageFolder("")``, ``FileList("")`` and the other sources alike.
- ``gpupipe.loader("train", "data/train")`` (source and preset swapped) said ``unknown preset 'data/train'``.
- ``CocoDetection("det", "det/annotations.json")`` (the folder above the images) advised ``on_error='skip'``
  for every image missing.
- ``SegmentationFolder("seg/masks", "seg/images")`` (the folders swapped) said to save the masks as PNG.
- The packer's "delete DST and pack again" where DST holds the user's own files would delete them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import gpupipe
from gpupipe.pack import PackSettings, pack
from gpupipe.pack.check import verify
from gpupipe.pack.journal import PackError
from gpupipe.sources import as_source


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """``data/train/{a,b}`` (3 JPEGs each), ``det/images`` + ``det/annotations.json``, ``seg/{images,masks}``."""
    top = tmp_path_factory.mktemp("firsthour12")
    rgb = np.zeros((16, 16, 3), np.uint8)
    for name in ("a", "b"):
        (top / "data" / "train" / name).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(rgb + 40 * i).save(top / "data" / "train" / name / f"{i}.jpg")
    (top / "det" / "images").mkdir(parents=True)
    images, annotations = [], []
    for i in range(4):
        Image.fromarray(rgb + 40 * i).save(top / "det" / "images" / f"im{i}.jpg")
        images.append({"id": i, "file_name": f"im{i}.jpg", "width": 16, "height": 16})
        annotations.append({"id": i, "image_id": i, "category_id": 1, "bbox": [1, 1, 5, 5], "area": 25, "iscrowd": 0})
    coco = {"images": images, "annotations": annotations, "categories": [{"id": 1, "name": "a"}]}
    (top / "det" / "annotations.json").write_text(json.dumps(coco))
    (top / "seg" / "images").mkdir(parents=True)
    (top / "seg" / "masks").mkdir(parents=True)
    for i in range(4):
        Image.fromarray(rgb + 40 * i).save(top / "seg" / "images" / f"img_{i:05d}.jpg")
        Image.fromarray(np.full((16, 16), i % 2, np.uint8)).save(top / "seg" / "masks" / f"img_{i:05d}.png")
    return top


@pytest.fixture
def inside(root, monkeypatch) -> Path:
    """The current folder is ``root`` (which holds image folders: what an empty path would read)."""
    monkeypatch.chdir(root)
    return root


EMPTY = "empty path ('': an unset environment variable?), which would mean the current folder"


@pytest.mark.parametrize("value", ["", "  "])
@pytest.mark.parametrize(
    "call, named",
    [
        (lambda v: gpupipe.loader(v, "train", batch_size=2, backend="torchvision"), "source"),
        (lambda v: as_source(v), "source"),
        (lambda v: gpupipe.ImageFolder(v), "ImageFolder: root"),
        (lambda v: gpupipe.FileList(v), "FileList: entries"),
        (lambda v: gpupipe.FileList([("data/train/a/0.jpg", 0)], root=v), "FileList: root"),
        (lambda v: gpupipe.Shards(v), "Shards: root"),
        (lambda v: gpupipe.CocoDetection(v, "det/annotations.json"), "CocoDetection: images"),
        (lambda v: gpupipe.CocoDetection("det/images", v), "CocoDetection: annotations"),
        (lambda v: gpupipe.SegmentationFolder(v, "seg/masks"), "SegmentationFolder: images"),
        (lambda v: gpupipe.SegmentationFolder("seg/images", v), "SegmentationFolder: masks"),
        (lambda v: gpupipe.SegmentationFolder("seg/images", "seg/masks", split=v), "SegmentationFolder: split"),
        (lambda v: pack(v, "out", progress=False), "source"),
        (lambda v: pack("data/train", v, progress=False), "pack: dst"),
        (lambda v: verify(v), "verify: dst"),
    ],
    ids=[
        "loader",
        "as_source",
        "ImageFolder",
        "FileList",
        "FileList-root",
        "Shards",
        "coco-images",
        "coco-annotations",
        "seg-images",
        "seg-masks",
        "seg-split",
        "pack-src",
        "pack-dst",
        "verify",
    ],
)
def test_an_empty_path_is_refused_naming_the_argument_not_read_as_the_current_folder(inside, call, named, value):
    # Before: loader("") and ImageFolder("") read the current folder (data/, det/, seg/ as classes), FileList("")
    # listed its files, Shards("") said the current folder "is not a packed folder".
    with pytest.raises(ValueError) as caught:
        call(value)
    said = str(caught.value)
    assert not (inside / "out").exists() and not (inside / "manifest.json").exists()
    assert said.startswith(
        f"{named}: empty path ({value!r}: an unset environment variable?), which would mean the current folder; pass "
    ), said


def test_the_current_folder_named_as_such_is_still_read(inside):
    assert len(gpupipe.ImageFolder("data/train")) == 6
    assert as_source(Path("data") / "train").classes == ["a", "b"]
    os.chdir(inside / "data" / "train")
    assert len(gpupipe.ImageFolder(".")) == 6


@pytest.mark.parametrize("preset", ["data/train", "data"])
def test_source_and_preset_swapped_say_the_source_comes_first(inside, preset):
    # Before: "unknown preset 'data/train'; choose one of [...]", no word of the order.
    with pytest.raises(ValueError) as caught:
        gpupipe.loader("train", preset, batch_size=2, backend="torchvision")
    said = str(caught.value)
    assert f"unknown preset {preset!r}" in said
    assert f"the source comes first: gpupipe.loader({preset!r}, 'train')" in said, said


def test_a_mistyped_preset_still_guesses_and_says_nothing_of_the_order(inside):
    with pytest.raises(ValueError) as caught:
        gpupipe.loader("data/train", "trian", batch_size=2, backend="torchvision")
    assert "'train'" in str(caught.value) and "comes first" not in str(caught.value)


def test_coco_images_folder_above_the_images_names_the_subfolder_not_skip(inside):
    # Before: "4 of 4 files cannot be used (pass on_error='skip' to leave them out)", each "No such file".
    with pytest.raises(ValueError) as caught:
        gpupipe.loader(
            gpupipe.CocoDetection("det", "det/annotations.json"), "train", batch_size=2, backend="torchvision"
        )
    said = str(caught.value)
    assert "on_error" not in said, said
    assert "none of the 4 images" in said and str(inside / "det") in said, said
    assert f"pass {str(inside / 'det' / 'images')!r} as the images folder" in said, said
    done = gpupipe.loader(
        gpupipe.CocoDetection("det/images", "det/annotations.json"), "train", batch_size=2, backend="torchvision"
    )
    assert len(done.source) == 4


def test_coco_images_found_nowhere_says_so_without_a_folder_to_pass(tmp_path):
    (tmp_path / "empty").mkdir()
    images = [{"id": i, "file_name": f"x{i}.jpg", "width": 16, "height": 16} for i in range(3)]
    coco = {"images": images, "annotations": [], "categories": [{"id": 1, "name": "a"}]}
    (tmp_path / "a.json").write_text(json.dumps(coco))
    with pytest.raises(ValueError) as caught:
        gpupipe.loader(
            gpupipe.CocoDetection(tmp_path / "empty", tmp_path / "a.json"), "train", batch_size=1, backend="torchvision"
        )
    said = str(caught.value)
    assert "none of the 3 images" in said and "on_error" not in said and "as the images folder" not in said, said


def test_segmentation_folders_swapped_say_so(inside):
    # Before: "... the masks folder holds .../img_00000.jpg and 3 more: save them as PNG".
    with pytest.raises(ValueError) as caught:
        gpupipe.SegmentationFolder("seg/masks", "seg/images")
    said = str(caught.value)
    assert "swapped" in said and "save them as PNG" not in said, said
    assert "gpupipe.SegmentationFolder('seg/images', 'seg/masks')" in said, said
    assert len(gpupipe.SegmentationFolder("seg/images", "seg/masks")) == 4


def _changed_skipped_file(tmp_path, own: bool) -> tuple[Path, str]:
    data = tmp_path / "data" / "a"
    data.mkdir(parents=True)
    for i in range(2):
        Image.fromarray(np.full((16, 16, 3), 60 * i, np.uint8)).save(data / f"{i}.jpg")
    growing = data / "copying.jpg"
    whole = (data / "0.jpg").read_bytes()
    growing.write_bytes(whole[:-20])
    dst = tmp_path / "out"
    dst.mkdir()
    if own:
        (dst / "notes.txt").write_text("mine")
    pack(tmp_path / "data", dst, workers=1, progress=False)
    growing.write_bytes(whole)
    with pytest.raises(PackError) as caught:
        pack(tmp_path / "data", dst, workers=1, progress=False)
    return dst, str(caught.value)


def test_the_packer_never_advises_deleting_a_folder_holding_the_user_s_files(tmp_path):
    # Before: "to pack it, delete DST and run the command again" with DST holding notes.txt.
    dst, said = _changed_skipped_file(tmp_path, own=True)
    assert f"delete {dst} " not in said, said
    own = ["shard-000000.tar", "shard-000000.idx", "manifest.json", "sources.tsv", ".pack-journal.json"]
    assert f"delete the pack's own files from {dst} ({', '.join(own)}; notes.txt is yours, not the pack's)" in said
    for name in own:  # the advice followed: the rerun packs every file, the user's own kept
        (dst / name).unlink()
    assert pack(tmp_path / "data", dst, workers=1, progress=False).packed == 3
    assert (dst / "notes.txt").read_text() == "mine"


def test_the_packer_advises_deleting_a_folder_holding_its_own_files_alone(tmp_path):
    dst, said = _changed_skipped_file(tmp_path, own=False)
    assert f"delete {dst} and run the command again" in said, said


def test_coco_images_nearly_all_elsewhere_name_the_folder_a_downloaded_subset_is_left_to_on_error(tmp_path):
    rgb = np.zeros((8, 8, 3), np.uint8)
    (tmp_path / "top" / "images").mkdir(parents=True)
    images = [{"id": i, "file_name": f"x{i}.jpg", "width": 8, "height": 8} for i in range(21)]
    for i in range(21):
        Image.fromarray(rgb).save(tmp_path / "top" / "images" / f"x{i}.jpg")
    Image.fromarray(rgb).save(tmp_path / "top" / "x0.jpg")  # one image beside the folder: 1 in 21 found
    coco = {"images": images, "annotations": [], "categories": [{"id": 1, "name": "a"}]}
    (tmp_path / "a.json").write_text(json.dumps(coco))
    with pytest.raises(ValueError) as caught:
        gpupipe.loader(
            gpupipe.CocoDetection(tmp_path / "top", tmp_path / "a.json"), "train", batch_size=1, backend="torchvision"
        )
    said = str(caught.value)
    assert "1 (4.8%) of the 21 images" in said and f"pass {str(tmp_path / 'top' / 'images')!r}" in said, said
    for i in range(1, 21):  # a subset downloaded: the others are nowhere; skipping them is the answer
        (tmp_path / "top" / "images" / f"x{i}.jpg").unlink()
    done = gpupipe.loader(
        gpupipe.CocoDetection(tmp_path / "top", tmp_path / "a.json"),
        "train",
        batch_size=1,
        backend="torchvision",
        on_error="skip",
    )
    assert [Path(n).name for n in done.source.names] == ["x0.jpg"]


def test_photos_as_rgb_pngs_beside_jpeg_masks_are_not_called_swapped(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "images" / "a.png")
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(tmp_path / "masks" / "a.jpg")
    with pytest.raises(ValueError) as caught:
        gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks")
    said = str(caught.value)
    assert "save them as PNG" in said and "swapped" not in said, said


def test_packing_other_settings_into_a_folder_of_the_user_s_files_names_the_pack_s_files(root, tmp_path):
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / "notes.txt").write_text("mine")
    pack(root / "data" / "train", dst, workers=1, progress=False)
    with pytest.raises(PackError) as caught:
        pack(root / "data" / "train", dst, PackSettings(seed=1), workers=1, progress=False)
    said = str(caught.value)
    assert "(or delete the pack's own files from" in said and "notes.txt is yours" in said and "delete it" not in said
