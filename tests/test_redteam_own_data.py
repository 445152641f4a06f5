"""Red team: a Kaggle / applied-ML user's own data (a flat folder of images beside a CSV, an unlabelled test
folder to predict on) read through gpupipe instead of torch's DataLoader.

Each case is one a user writes: the labels must belong to their images, every file must be read once, and
each prediction must map back to its file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import gpupipe


def _images(folder: Path, names: list[str], size: int = 8) -> list[Path]:
    """One small image per name, each of its own gray level (its index times 20), so pixels say which it is."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, name in enumerate(names):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((size, size, 3), 20 * k, np.uint8)).save(path)
        paths.append(path)
    return paths


# -- several labels per image separated by spaces (Kaggle's Planet, Human Protein Atlas, iMet) -----------------


def test_space_separated_tags_are_not_read_as_combined_classes(tmp_path):
    """Planet's ``image_name,tags`` holds ``haze primary``: read as one class name per cell, each combination of
    tags became a class of its own (4 classes of a 5-tag problem), silently; it is refused, naming the line and
    both ways to read it."""
    _images(tmp_path, [f"train_{i}.jpg" for i in range(4)])
    csv = tmp_path / "train.csv"
    csv.write_text(
        "image_name,tags\ntrain_0.jpg,haze primary\ntrain_1.jpg,agriculture clear primary water\n"
        "train_2.jpg,clear primary\ntrain_3.jpg,cloudy\n"
    )
    with pytest.raises(ValueError, match=r"train.csv:2: .*'haze primary'.*'primary'.*multi_label=True"):
        gpupipe.FileList(csv)
    source = gpupipe.FileList(csv, multi_label=True)
    assert source.classes == ["agriculture", "clear", "cloudy", "haze", "primary", "water"]
    assert [s.tolist() for s in source.label_lists] == [[3, 4], [0, 1, 4, 5], [1, 4], [2]]
    single = gpupipe.FileList(csv, multi_label=False)  # each cell one class name, as asked
    assert single.classes == sorted(["haze primary", "agriculture clear primary water", "clear primary", "cloudy"])


def test_space_separated_class_indices(tmp_path):
    """Human Protein Atlas's ``Id,Target`` holds ``16 0``: refused saying to pass multi_label=True (it read as a
    mix of indices and names before); with it, each word is a class index."""
    _images(tmp_path, [f"{i}.png" for i in range(3)])
    csv = tmp_path / "train.csv"
    csv.write_text("Id,Target\n0.png,16 0\n1.png,7 1 2 0\n2.png,5\n")
    with pytest.raises(ValueError, match=r"train.csv:2: .*'16 0'.*class indices.*multi_label=True"):
        gpupipe.FileList(csv)
    source = gpupipe.FileList(csv, multi_label=True)
    assert len(source.classes) == 17
    assert [s.tolist() for s in source.label_lists] == [[16, 0], [7, 1, 2, 0], [5]]


def test_space_separated_tags_in_pairs(tmp_path):
    """``FileList(zip(df.image_name, df.tags))``, the same data given as pairs, is refused the same way."""
    paths = _images(tmp_path, ["a.jpg", "b.jpg"])
    pairs = list(zip(map(str, paths), ["clear primary", "agriculture clear primary water"]))
    with pytest.raises(ValueError, match=r"'clear primary'.*'agriculture clear primary water'.*'clear'.*multi_label"):
        gpupipe.FileList(pairs)
    assert gpupipe.FileList(pairs, multi_label=True).classes == ["agriculture", "clear", "primary", "water"]


def test_class_names_with_spaces_still_read(tmp_path):
    """Class names holding spaces that share no word (``golden retriever``, ``beagle``) are single labels, as
    before; with a tab (``l.tsv``) too."""
    _images(tmp_path, ["a.jpg", "b.jpg", "c.jpg"])
    csv = tmp_path / "l.csv"
    csv.write_text("a.jpg,golden retriever\nb.jpg,beagle\nc.jpg,Black-footed Albatross\n")
    source = gpupipe.FileList(csv)
    assert source.classes == ["Black-footed Albatross", "beagle", "golden retriever"]
    assert source.labels.tolist() == [2, 1, 0]


@pytest.mark.parametrize(
    "names",
    [
        ["apple pie", "pumpkin pie", "chicken wings", "chicken curry"],  # Food-101: a word shared at one place
        ["tiger", "tiger shark", "tiger cat", "great white shark"],  # ImageNet: a class of one word among them
        ["BMW M3 Coupe 2012", "BMW X5 SUV 2007", "Audi TT RS Coupe 2012"],  # Stanford Cars
    ],
    ids=["food101", "imagenet", "cars"],
)
def test_class_names_sharing_words_are_not_taken_for_tags(tmp_path, names):
    """Class names share words at one place (the first or the last); read as one class name each, as before."""
    paths = _images(tmp_path, [f"{i}.jpg" for i in range(len(names))])
    source = gpupipe.FileList(list(zip(map(str, paths), names)))
    assert source.classes == sorted(names)
    assert [source.classes[k] for k in source.labels.tolist()] == names


# -- ids without their extension (``id,label`` with the files ``train/<id>.jpg``) ---------------------------------


def test_ids_without_extension(tmp_path):
    """Kaggle's ``train.csv`` names ``0007`` for ``train/0007.jpg``: the refusal names the suffix (and the root)
    to pass, and ``suffix=`` reads them, leading zeros kept, each label with its image."""
    ids = ["0007", "0010", "0100"]
    _images(tmp_path / "train", [f"{i}.jpg" for i in ids])
    csv = tmp_path / "train.csv"
    csv.write_text("id,label\n0007,dog\n0010,cat\n0100,dog\n")
    for kwargs, said in [
        ({}, rf"'0007.jpg' is in '{tmp_path / 'train'}'.*pass suffix='.jpg' and root='{tmp_path / 'train'}'"),
        ({"root": tmp_path / "train"}, r"without their extension.*pass suffix='.jpg'\)"),
    ]:
        with pytest.raises(ValueError, match=said):
            gpupipe.loader(gpupipe.FileList(csv, **kwargs), batch_size=2, backend="torchvision")
    source = gpupipe.FileList(csv, root=tmp_path / "train", suffix=".jpg")
    assert source.names == [str(tmp_path / "train" / f"{i}.jpg") for i in ids]
    assert source.classes == ["cat", "dog"] and source.labels.tolist() == [1, 0, 1]
    loader = gpupipe.loader(source, batch_size=3, backend="torchvision", dtype=torch.uint8, shuffle=False)
    images, labels = next(iter(loader))
    assert images[:, 0, 0, 0].tolist() == [0, 20, 40] and labels.tolist() == [1, 0, 1]
    for bad in ["jpg", "/x.jpg", ""]:
        with pytest.raises(ValueError, match=rf"FileList: suffix={bad!r}"):
            gpupipe.FileList(csv, suffix=bad)


# -- predicting on an unlabelled test folder: each prediction back to its file -------------------------------------

BACKENDS = ["torchvision", "dali-cpu"]


def _predict(source, **kwargs) -> list[tuple[str, int]]:
    """``(file named by the batch's label, the image's gray level)`` for each image of one pass."""
    loader = gpupipe.loader(
        source, batch_size=2, dtype=torch.uint8, pipeline=[gpupipe.ops.Decode(), gpupipe.ops.Resize((8, 8))], **kwargs
    )
    return [(loader.classes[i], int(v)) for images, ids in loader for i, v in zip(ids.tolist(), images[:, 0, 0, 0])]


@pytest.mark.parametrize("backend", BACKENDS)
def test_unlabelled_folder_maps_back_to_files(tmp_path, backend):
    """``FileList(folder)``: a flat (or nested) test folder without labels; each image's label is its place in
    the sorted file list and ``loader.classes[label]`` its path, so predictions map back to files in any order,
    the last partial batch included; hidden files are left out as ``ImageFolder`` leaves them."""
    names = ["0002.png", "0010.png", "01.png", "b c.png", "a/0001.PNG"]  # ImageFolder's order
    _images(tmp_path / "test", names)
    (tmp_path / "test" / "._0002.png").write_bytes(b"\x00\x05")
    (tmp_path / "test" / "Thumbs.db").write_bytes(b"x")
    source = gpupipe.FileList(tmp_path / "test")
    assert source.classes == names and source.labels.tolist() == [0, 1, 2, 3, 4]
    level = {name: 20 * k for k, name in enumerate(names)}
    for shuffle in (False, True):
        got = _predict(source, shuffle=shuffle, backend=backend)
        assert sorted(got) == sorted(level.items())  # each file once, its own image
        if not shuffle:
            assert [name for name, _ in got] == names


def test_unlabelled_paths_and_ranks(tmp_path):
    """``FileList(paths)``: the paths as given, in their order; over two ranks the padded share repeats a file,
    which its label names (``even_batches=False``: each file once)."""
    paths = _images(tmp_path, [f"img_{k}.png" for k in range(5)])
    given = [str(p) for p in reversed(paths)]
    source = gpupipe.FileList(given)
    assert source.classes == given and source.names == given
    level = {str(p): 20 * k for k, p in enumerate(paths)}
    shares = [_predict(source, shuffle=True, rank=r, world_size=2, backend="torchvision") for r in (0, 1)]
    assert sum(map(len, shares)) == 6 and sorted(set(shares[0] + shares[1])) == sorted(level.items())
    shares = [_predict(source, shuffle=True, rank=r, world_size=2, even_batches=False) for r in (0, 1)]
    assert sorted(shares[0] + shares[1]) == sorted(level.items())


def test_unlabelled_refusals(tmp_path):
    """A file listed twice (read twice), ``classes=`` or ``multi_label=True`` beside paths without labels, and
    a folder without images are refused by name."""
    paths = [str(p) for p in _images(tmp_path / "t", ["a.png", "b.png"])]
    with pytest.raises(ValueError, match=r"FileList: .*a.png' is listed twice \(entries 0 and 2\)"):
        gpupipe.FileList(paths + paths[:1])
    for kwargs in ({"classes": ["x"]}, {"multi_label": True}):
        with pytest.raises(ValueError, match=rf"FileList: {next(iter(kwargs))}= .*without labels"):
            gpupipe.FileList(paths, **kwargs)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"FileList: no images in .*empty"):
        gpupipe.FileList(tmp_path / "empty")
    with pytest.raises(ValueError, match=r"FileList\('.*t'\)"):  # the flat folder given as an ImageFolder
        gpupipe.loader(tmp_path / "t", batch_size=1)


# -- class names that are numbers ----------------------------------------------------------------------------------


def test_numeric_class_names_given_as_classes(tmp_path):
    """Labels written as numbers with ``classes=`` naming them (``sorted(df.label.astype(str).unique())``): a
    label is the class of its name, not the class at that position: ``2`` of ``['1', '10', '2']`` was class
    ``'10'`` (and ``3`` of ``['1', '2', '3']`` an error, ``1`` class ``'2'``, silently); ``007`` is ``'007'``."""
    _images(tmp_path, ["a.jpg", "b.jpg", "c.jpg"])
    csv = tmp_path / "val.csv"
    csv.write_text("id,label\na.jpg,1\nb.jpg,2\nc.jpg,10\n")
    assert gpupipe.FileList(csv, classes=["1", "10", "2"]).labels.tolist() == [0, 2, 1]
    assert gpupipe.FileList(csv, classes=["1", "2", "10", "11"]).labels.tolist() == [0, 1, 2]
    assert gpupipe.FileList(csv, classes=[str(i) for i in range(11)]).labels.tolist() == [1, 2, 10]
    assert gpupipe.FileList(csv).labels.tolist() == [1, 2, 10]  # without classes=: indices, as documented
    with pytest.raises(ValueError, match=r"labels \[10\] are not among classes \['1', '2', '3'\].*val.csv:4"):
        gpupipe.FileList(csv, classes=["1", "2", "3"])
    with pytest.raises(ValueError, match=r"classes=.*'1' and '01' are both the number 1"):
        gpupipe.FileList(csv, classes=["1", "01", "2", "10"])
    csv.write_text("a.jpg,007\nb.jpg,010\nc.jpg,007\n")
    source = gpupipe.FileList(csv, classes=["007", "010", "100"])
    assert source.labels.tolist() == [0, 1, 0] and source.classes == ["007", "010", "100"]
    pairs = gpupipe.FileList([(tmp_path / "a.jpg", 1), (tmp_path / "b.jpg", 0)], classes=["3", "5"])
    assert pairs.labels.tolist() == [1, 0]  # a pair's int is a position (as a torchvision dataset's samples)
    assert gpupipe.FileList([(tmp_path / "a.jpg", "5")], classes=["3", "5"]).labels.tolist() == [1]


def test_jfif_photos_are_named(tmp_path, caplog):
    """Windows saves photos from the web as ``.jfif`` (JPEG): neither ``ImageFolder`` reads them; they were left
    out without a word, and are named in a warning saying to rename them."""
    _images(tmp_path / "data" / "cat", ["a.jpg", "b.jfif", "c.JFIF"])
    _images(tmp_path / "data" / "dog", ["d.jpg"])
    with caplog.at_level("WARNING", logger="gpupipe.sources"):
        assert len(gpupipe.ImageFolder(tmp_path / "data").names) == 2
        assert len(gpupipe.FileList(tmp_path / "data" / "cat").names) == 1
    said = [r.getMessage() for r in caplog.records if ".jfif: 2" in r.getMessage()]
    assert len(said) == 2 and all("rename them .jpg" in m for m in said), caplog.text


# -- Kaggle's headers, and targets that are not classes -------------------------------------------------------------


@pytest.mark.parametrize(
    "header, rows, classes",
    [
        ("id,breed", "a,beagle\nb,pug\nc,beagle\n", ["beagle", "pug"]),  # 'breed' was a class, 'id' a missing file
        ("id_code,diagnosis", "a,0\nb,4\nc,2\n", ["0", "1", "2", "3", "4"]),  # refused as indices mixed with a name
        ("Id,Pawpularity", "a,63\nb,42\nc,28\n", [str(i) for i in range(64)]),
        ("image,level", "a,1\nb,0\nc,1\n", ["0", "1"]),
    ],
)
def test_kaggle_headers(tmp_path, header, rows, classes):
    _images(tmp_path, ["a.jpg", "b.jpg", "c.jpg"])
    csv = tmp_path / "train.csv"
    csv.write_text(f"{header}\n{rows}")
    source = gpupipe.FileList(csv, suffix=".jpg")
    assert source.names == [str(tmp_path / f"{n}.jpg") for n in "abc"] and source.classes == classes
    assert [classes[i] for i in source.labels] == [line.split(",")[1] for line in rows.split()]


def test_real_valued_targets_are_refused(tmp_path):
    """``id,score`` with ``0.73``: each value became a class (numbered in sorted order: 0.25 was class 0); it is
    refused, saying how to read such targets: the images without labels, whose labels then index the values."""
    paths = _images(tmp_path, ["a.jpg", "b.jpg", "c.jpg", "d.jpg"])
    csv = tmp_path / "train.csv"
    csv.write_text("id,score\na.jpg,0.73\nb.jpg,0.5\nc.jpg,1e-3\nd.jpg,1.0\n")
    with pytest.raises(ValueError, match=r"train.csv:2: .*'0.73' is a number.*FileList\(paths\).*values\[labels\]"):
        gpupipe.FileList(csv)
    assert gpupipe.FileList(csv, classes=["0.5", "0.73", "1.0", "1e-3"]).labels.tolist() == [1, 0, 3, 2]
    values = torch.tensor([0.73, 0.5, 1e-3, 1.0])  # the recipe the message gives
    loader = gpupipe.loader(
        gpupipe.FileList(paths), batch_size=4, pipeline=[gpupipe.ops.Decode(), gpupipe.ops.Resize((8, 8))],
        dtype=torch.uint8, backend="torchvision",
    )  # fmt: skip
    images, labels = next(iter(loader))
    assert torch.equal(values[labels], values[images[:, 0, 0, 0].long() // 20])


def test_values_mixing_integers_are_refused_and_integer_names_still_read(tmp_path):
    """A score column holding ``0.5`` beside ``1`` (an int cell) is a number column, named as one (not "indices
    mixed with names"); labels that are integers written as strings (``str(label)``) are class names, as before."""
    paths = _images(tmp_path, ["a.jpg", "b.jpg", "c.jpg"])
    csv = tmp_path / "scores.csv"
    csv.write_text("a.jpg,0.5\nb.jpg,1\nc.jpg,0.25\n")
    with pytest.raises(ValueError, match=r"scores.csv:1: the label '0.5' is a number.*values\[labels\]"):
        gpupipe.FileList(csv)
    named = gpupipe.FileList(list(zip(map(str, paths), ["3", "1", "2"])))
    assert named.classes == ["1", "2", "3"] and named.labels.tolist() == [2, 0, 1]


def test_rows_repeated_alike_are_said(tmp_path, caplog):
    """A CSV concatenated twice (or ``train.csv`` + ``extra.csv`` sharing rows) lists an image twice with the
    same label: read as often as listed, as torch's would, but no longer without a word (a k-fold split would
    put one image in two folds)."""
    _images(tmp_path, ["a.jpg", "b.jpg"])
    csv = tmp_path / "train.csv"
    csv.write_text("id,label\na.jpg,cat\nb.jpg,dog\na.jpg,cat\n")
    with caplog.at_level("WARNING", logger="gpupipe.sources"):
        source = gpupipe.FileList(csv)
    assert len(source.names) == 3 and source.labels.tolist() == [0, 1, 0]
    assert "1 image listed more than once" in caplog.text and "train.csv:2" in caplog.text, caplog.text
    assert "train.csv:4" in caplog.text


def test_one_hot_columns_say_how_to_read_them(tmp_path):
    """Plant Pathology's ``image_id,healthy,multiple_diseases,rust,scab`` (one column of 0s and 1s per class): the
    refusal said to keep two columns (``df[['id', 'label']]``), which has no label column to keep; it says how to
    make one (or a list of classes per image), with or without the header."""
    _images(tmp_path, ["a.jpg", "b.jpg"])
    csv = tmp_path / "train.csv"
    for text in ("image_id,healthy,rust,scab\na.jpg,0,0,1\nb.jpg,1,0,0\n", "a.jpg,0,0,1.0\nb.jpg,1,0,0\n"):
        csv.write_text(text)
        with pytest.raises(ValueError, match=r"train.csv:1: .*its last 3 columns hold 0s and 1s.*idxmax"):
            gpupipe.FileList(csv)
    csv.write_text("id,label,fold\na.jpg,cat,0\nb.jpg,dog,1\n")  # other extra columns: keep two, as before
    with pytest.raises(ValueError, match=r"train.csv:1: .*3 columns.*keep those two"):
        gpupipe.FileList(csv)


@pytest.mark.parametrize("name, text", [("paths.txt", "a.jpg\nb.jpg\n"), ("paths.csv", "path\na.jpg\nb.jpg\n")])
def test_a_list_of_paths_without_labels_says_how_to_read_it(tmp_path, name, text):
    """A list file of paths alone (a test split to predict on) said only "expected 'path label', got 'a.jpg'"."""
    paths = _images(tmp_path, ["a.jpg", "b.jpg"])
    listed = tmp_path / name
    listed.write_text(text)
    with pytest.raises(ValueError, match=rf"{name}:1: expected .*: the line has no label; .*gpupipe.FileList\(\[path"):
        gpupipe.FileList(listed)
    unlabelled = gpupipe.FileList(list(map(str, paths)))  # the way the message gives
    assert unlabelled.labels.tolist() == [0, 1] and unlabelled.classes == [str(p) for p in paths]
