"""Sources: ImageFolder matches torchvision's labels; FileList parses pairs, text and CSV."""

from pathlib import Path

import numpy as np
import pytest
import torchvision

from helpers import make_image_folder, textured_image, write_image
import gpupipe
from gpupipe.sources import FileList, ImageFolder, as_source


def test_image_folder_matches_torchvision(tmp_path):
    root = tmp_path / "data"
    make_image_folder(root, {"zebra": 2, "Apple": 3, "mango": 1})
    ours = ImageFolder(root)
    theirs = torchvision.datasets.ImageFolder(str(root))
    assert ours.classes == theirs.classes == ["Apple", "mango", "zebra"]
    assert ours.class_to_idx == theirs.class_to_idx
    assert [(s.path, s.label) for s in ours.samples] == theirs.samples


def test_image_folder_filters_extensions_hidden_and_other_files(tmp_path):
    root = tmp_path / "data"
    img = textured_image(__import__("numpy").random.default_rng(0), 20, 20)
    for name in ("a.JPG", "b.jpeg", "c.Png", "d.bmp", "e.webp", "nested/f.jpg"):
        write_image(root / "cls" / name, img)
    write_image(root / "cls" / ".hidden.jpg", img)
    write_image(root / "cls" / ".cache" / "g.jpg", img)
    (root / "cls" / "notes.txt").write_text("not an image")
    (root / "cls" / "h.gif").write_bytes(b"GIF89a")
    write_image(root / ".ipynb_checkpoints" / "x.jpg", img)
    (root / "README").write_text("a file beside the class folders")

    src = ImageFolder(root)
    assert src.classes == ["cls"]
    assert sorted(Path(s.path).name for s in src.samples) == ["a.JPG", "b.jpeg", "c.Png", "d.bmp", "e.webp", "f.jpg"]


def test_a_missing_dataset_path_is_a_file_not_found_error_naming_it(tmp_path, monkeypatch):
    """Code written for torchvision's datasets catches ``FileNotFoundError``; gpupipe's own callers catch
    ``ValueError`` or ``gpupipe.Error``: a missing folder, list or annotation path is all three."""
    (tmp_path / "there").mkdir()
    missing = tmp_path / "missing"
    cases = [
        (lambda: gpupipe.loader(missing, batch_size=2, backend="torchvision"), "source path"),
        (lambda: ImageFolder(missing), "ImageFolder: root"),
        (lambda: gpupipe.FileList(missing), "FileList: list file"),
        (lambda: gpupipe.SegmentationFolder(missing, tmp_path / "there"), "SegmentationFolder: images folder"),
        (lambda: gpupipe.SegmentationFolder(tmp_path / "there", missing), "SegmentationFolder: masks folder"),
        (lambda: gpupipe.CocoDetection(missing, tmp_path / "a.json"), "CocoDetection: images folder"),
    ]
    for make, what in cases:
        with pytest.raises(FileNotFoundError) as caught:
            make()
        assert isinstance(caught.value, ValueError) and isinstance(caught.value, gpupipe.Error)
        assert str(caught.value) == f"{what} {str(missing)!r} does not exist"
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ValueError, match="is not a folder") as caught:  # there, but not a folder: no FileNotFoundError
        gpupipe.SegmentationFolder(tmp_path / "a_file", tmp_path / "there")
    assert not isinstance(caught.value, FileNotFoundError)


def test_image_folder_errors(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        ImageFolder(tmp_path / "missing")
    (tmp_path / "file.jpg").write_bytes(b"x")
    with pytest.raises(ValueError, match="is not a folder"):
        ImageFolder(tmp_path / "file.jpg")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="has no class folders"):
        ImageFolder(tmp_path / "empty")
    (tmp_path / "noimg" / "cls").mkdir(parents=True)
    (tmp_path / "noimg" / "cls" / "a.txt").write_text("x")
    with pytest.raises(ValueError, match="no images under"):
        ImageFolder(tmp_path / "noimg")


def test_a_folder_of_split_folders_is_refused_naming_the_split(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_image_folder(tmp_path / "data" / "train", {"cat": 2, "dog": 2})
    make_image_folder(tmp_path / "data" / "val", {"cat": 1, "dog": 1})
    message = ("ImageFolder: data/ holds split folders train/, val/, each with class folders, not classes: "
               "pass data/train")
    for given in ("data", "data/"):
        with pytest.raises(ValueError) as caught:
            gpupipe.loader(given, "train", batch_size=2, backend="torchvision", num_threads=0)
        assert str(caught.value) == message
    assert ImageFolder("data/train").classes == ["cat", "dog"], "the split itself loads"
    make_image_folder(tmp_path / "only" / "Validation", {"a": 1})
    with pytest.raises(ValueError, match=r"split folders Validation/, .*: pass only/Validation$"):
        ImageFolder("only")


@pytest.mark.parametrize("images, masks", [("images", "masks"), ("JPEGImages", "SegmentationClass"),
                                            ("img", "labels")])
def test_a_folder_of_images_and_their_masks_is_refused_naming_segmentation_folder(tmp_path, monkeypatch, images, masks):
    """``data/images/x.jpg`` + ``data/masks/x.png`` given as an image folder would be two classes, the masks
    trained on as images of the second: refused, saying what reads it."""
    monkeypatch.chdir(tmp_path)
    for path, _ in make_image_folder(tmp_path / "seg", {images: 3}):
        write_image(tmp_path / "seg" / masks / f"{path.stem}.png", np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(ValueError) as caught:
        gpupipe.loader("seg", "train", batch_size=2, backend="torchvision", num_threads=0)
    assert str(caught.value) == (
        f"ImageFolder: seg/ holds {images}/ and {masks}/, whose files pair by name (an image and its mask): a "
        f"segmentation dataset, not two classes: read it with gpupipe.SegmentationFolder('seg/{images}', "
        f"'seg/{masks}')"
    )
    make_image_folder(tmp_path / "plain", {"images": 2, "labels": 2}, ext=".png")  # named so, not pairs: classes
    for k, path in enumerate(sorted((tmp_path / "plain" / "labels").iterdir())):
        path.rename(path.with_name(f"other_{k}.png"))
    assert ImageFolder("plain").classes == ["images", "labels"]


def test_classes_named_like_splits_that_hold_images_are_classes(tmp_path):
    root = tmp_path / "data"
    make_image_folder(root, {"train": 2, "test": 1})  # e.g. photos of trains: images, no class folders inside
    assert ImageFolder(root).classes == ["test", "train"]
    make_image_folder(tmp_path / "mixed" / "train", {"a": 1})
    make_image_folder(tmp_path / "mixed", {"zebra": 1})  # not every folder is a split: classes as given
    assert ImageFolder(tmp_path / "mixed").classes == ["train", "zebra"]


def test_empty_class_keeps_its_index(tmp_path, caplog):
    root = tmp_path / "data"
    make_image_folder(root, {"a": 1, "c": 1})
    (root / "b").mkdir()
    src = ImageFolder(root)
    assert src.class_to_idx == {"a": 0, "b": 1, "c": 2}
    assert [s.label for s in src.samples] == [0, 2]
    assert "holds no images" in caplog.text


def test_file_list_from_pairs_and_files(tmp_path):
    written = make_image_folder(tmp_path / "imgs", {"x": 2, "y": 2})
    pairs = [(p, label) for p, label in written]
    assert FileList(pairs).labels.tolist() == [0, 0, 1, 1]
    assert FileList(pairs).classes == ["0", "1"]

    spaced = tmp_path / "imgs" / "with space.jpg"
    spaced.write_bytes(written[0][0].read_bytes())
    listing = tmp_path / "imgs" / "list.txt"
    listing.write_text("# comment\nx/img_000.jpg 1\n\nwith space.jpg 0\n")
    src = FileList(listing)
    assert src.paths == [str(tmp_path / "imgs" / "x" / "img_000.jpg"), str(spaced)]
    assert src.labels.tolist() == [1, 0]

    csv_file = tmp_path / "imgs" / "list.csv"
    csv_file.write_text("path,label\nx/img_001.jpg,dog\ny/img_000.jpg,cat\n")
    src = FileList(csv_file)
    assert src.classes == ["cat", "dog"] and src.labels.tolist() == [1, 0]
    assert src.class_to_idx == {"cat": 0, "dog": 1}


def test_file_list_errors(tmp_path):
    written = make_image_folder(tmp_path / "imgs", {"x": 1})
    with pytest.raises(ValueError, match="list file .* does not exist"):
        FileList(tmp_path / "nope.txt")
    ghost = FileList([(written[0][0], 0), (tmp_path / "ghost.jpg", 0)])  # listing is cheap; the scan finds it
    with pytest.raises(ValueError) as info:
        gpupipe.loader(ghost, batch_size=1, backend="torchvision")
    assert f"{tmp_path / 'ghost.jpg'}: cannot read: No such file or directory" in str(info.value)
    with pytest.raises(ValueError, match="label 5 of .* is outside the class range 0..1"):
        FileList([(written[0][0], 5)], classes=["a", "b"])
    with pytest.raises(ValueError, match="label -1"):
        FileList([(written[0][0], -1)])
    bad = tmp_path / "bad.txt"
    bad.write_text("onlyonefield\n")
    with pytest.raises(ValueError, match=r"bad.txt:1: expected 'path label'"):
        FileList(bad)
    with pytest.raises(ValueError, match="all ints or all class names"):
        FileList([(written[0][0], 0), (written[0][0], "cat")])


def test_as_source(tmp_path, image_folder):
    assert isinstance(as_source(image_folder), ImageFolder)
    with pytest.raises(ValueError, match="does not exist"):
        as_source(tmp_path / "nothing")
    with pytest.raises(ValueError, match="source must be a path"):
        as_source(42)


def test_one_class_folder_warns_that_every_label_is_the_same(tmp_path, caplog):
    # a newcomer's slip: the folder above the class folders (root/images/<class>/...) read as one class
    make_image_folder(tmp_path / "data" / "images", {"cat": 1, "dog": 2})
    with caplog.at_level("WARNING", logger="gpupipe"):
        src = ImageFolder(tmp_path / "data")
    assert src.classes == ["images"] and set(src.labels.tolist()) == {0}
    one_class = [r.getMessage() for r in caplog.records if "one class" in r.getMessage()]
    assert len(one_class) == 1
    assert "every label is 0" in one_class[0] and repr(str(tmp_path / "data" / "images")) in one_class[0]

    caplog.clear()
    make_image_folder(tmp_path / "flat", {"only": 2})  # one folder of unlabelled images (self-supervised): logged
    with caplog.at_level("INFO", logger="gpupipe"):
        ImageFolder(tmp_path / "flat")
    one_class = [r for r in caplog.records if "one class" in r.getMessage()]
    assert [r.levelname for r in one_class] == ["INFO"] and "pass" not in one_class[0].getMessage()

    caplog.clear()
    make_image_folder(tmp_path / "two", {"a": 1, "b": 1})
    with caplog.at_level("WARNING", logger="gpupipe"):
        ImageFolder(tmp_path / "two")
    assert "one class" not in caplog.text
