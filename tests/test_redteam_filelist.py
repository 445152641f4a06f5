"""Red team: FileList after the multi-label parser rewrite, on the single-label list files users really have.

Each list file must read as it did before the rewrite (same samples, labels and classes) unless the old
reading was wrong; then the new one is asserted, with why. Wrong readings become errors naming the line.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import flat_folder, sample_ids

import gpupipe
from gpupipe.pack.__main__ import main as pack_main

#: (case, list file name, its text, [(path, label index)], classes): read alike before and after the rewrite.
AS_BEFORE = [
    (
        "imagenet val.txt",
        "val.txt",
        "ILSVRC2012_val_00000001.JPEG 2\nILSVRC2012_val_00000002.JPEG 0\n",
        [("ILSVRC2012_val_00000001.JPEG", 2), ("ILSVRC2012_val_00000002.JPEG", 0)],
        ["0", "1", "2"],
    ),
    (
        "imagenet wnids",
        "train.txt",
        "n01443537/x.JPEG n01443537\nn01440764/y.JPEG n01440764\n",
        [("n01443537/x.JPEG", 1), ("n01440764/y.JPEG", 0)],
        ["n01440764", "n01443537"],
    ),
    (
        "caltech",
        "list.txt",
        "101/accordion/image_0001.jpg 1\n101/airplanes/image_0001.jpg 0\n",
        [("101/accordion/image_0001.jpg", 1), ("101/airplanes/image_0001.jpg", 0)],
        ["0", "1"],
    ),
    ("kaggle id,label", "train.csv", "id,label\na.jpg,1\nb.jpg,0\n", [("a.jpg", 1), ("b.jpg", 0)], ["0", "1"]),
    (
        "quoted path with a comma",
        "l.csv",
        '"my,photo.jpg",cat\nb.jpg,dog\n',
        [("my,photo.jpg", 0), ("b.jpg", 1)],
        ["cat", "dog"],
    ),
    (
        "csv paths with spaces",
        "l.csv",
        "my photo.jpg,cat\nb c.jpg,dog\n",
        [("my photo.jpg", 0), ("b c.jpg", 1)],
        ["cat", "dog"],
    ),
    (
        "text paths with spaces",
        "l.txt",
        "my photo.jpg 3\nb c d.jpg 1\n",
        [("my photo.jpg", 3), ("b c d.jpg", 1)],
        ["0", "1", "2", "3"],
    ),
    (
        "text paths with commas",
        "l.txt",
        "photos/a,b.jpg 0\nmy, photo.jpg 1\nx;y.jpg 1\n",
        [("photos/a,b.jpg", 0), ("my, photo.jpg", 1), ("x;y.jpg", 1)],
        ["0", "1"],
    ),
    ("CRLF", "l.txt", "a.jpg 0\r\nb.jpg 1\r\n", [("a.jpg", 0), ("b.jpg", 1)], ["0", "1"]),
    ("CRLF csv", "l.csv", "path,label\r\na.jpg,cat\r\nb.jpg,dog\r\n", [("a.jpg", 0), ("b.jpg", 1)], ["cat", "dog"]),
    ("BOM", "l.txt", "\ufeffa.jpg 0\nb.jpg 1\n", [("a.jpg", 0), ("b.jpg", 1)], ["0", "1"]),
    ("trailing blank lines", "l.txt", "a.jpg 0\nb.jpg 1\n\n\n   \n", [("a.jpg", 0), ("b.jpg", 1)], ["0", "1"]),
    ("comments", "l.txt", "# path label\na.jpg 0\n#b.jpg 1\nc.jpg 1\n", [("a.jpg", 0), ("c.jpg", 1)], ["0", "1"]),
    ("tabs", "l.tsv", "a.jpg\t0\nb.jpg\t1\n", [("a.jpg", 0), ("b.jpg", 1)], ["0", "1"]),
    (
        "golden retriever",
        "l.csv",
        'path,label\na.jpg,"golden retriever"\nb.jpg,beagle\n',
        [("a.jpg", 1), ("b.jpg", 0)],
        ["beagle", "golden retriever"],
    ),
    ("leading zeros", "l.txt", "a.jpg 007\nb.jpg 003\n", [("a.jpg", 7), ("b.jpg", 3)], [str(i) for i in range(8)]),
    (
        "the same line twice",
        "l.txt",
        "a.jpg 0\na.jpg 0\nb.jpg 1\n",
        [("a.jpg", 0), ("a.jpg", 0), ("b.jpg", 1)],
        ["0", "1"],
    ),
    ("dot-dot", "sub/l.txt", "../x/a.jpg 0\nq/../b.jpg 1\n", [("x/a.jpg", 0), ("sub/b.jpg", 1)], ["0", "1"]),
    ("first row a file", "l.csv", "image.jpg,cat\nb.jpg,dog\n", [("image.jpg", 0), ("b.jpg", 1)], ["cat", "dog"]),
]


def read(source, base: Path) -> list:
    return [
        (Path(n).resolve().relative_to(base.resolve()).as_posix(), int(v)) for n, v in zip(source.names, source.labels)
    ]


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))
    return path


@pytest.mark.parametrize("case", AS_BEFORE, ids=[c[0] for c in AS_BEFORE])
def test_single_label_list_files_read_as_before(tmp_path, case):
    _, name, text, pairs, classes = case
    source = gpupipe.FileList(write(tmp_path, name, text))
    assert source.kind is gpupipe.TargetKind.LABEL
    assert (read(source, tmp_path), source.classes) == (pairs, classes)


def test_absolute_paths_and_root_are_kept(tmp_path):
    listing = write(tmp_path, "l.txt", f"{tmp_path / 'abs.jpg'} 1\nrel.jpg 0\n")
    source = gpupipe.FileList(listing, root=tmp_path / "images")
    assert source.names == [str(tmp_path / "abs.jpg"), str(tmp_path / "images" / "rel.jpg")]
    assert source.labels.tolist() == [1, 0]


# -- a first row that is a sample, not a header (was: dropped without a word) ----------------------------------


@pytest.mark.parametrize(
    "name, first",
    [
        ("l.csv", "image_0001,cat"),  # Kaggle ids without an extension
        ("l.csv", "a.jpg,class_1"),  # classes named class_1, class_2
        ("l.csv", "images/a.jpg,tag"),  # a class named like a column
        ("l.csv", "img_7.png,target"),
        ("l.txt", "image_1 class_1"),
        ("l.txt", "file1 label2"),
    ],
)
def test_a_first_row_that_is_a_sample_is_not_dropped_as_a_header(tmp_path, name, first):
    sep = "," if name.endswith(".csv") else " "
    source = gpupipe.FileList(write(tmp_path, name, f"{first}\nb.jpg{sep}dog\n"))
    path, label = first.split(sep)
    assert [Path(n).name for n in source.names] == [Path(path).name, "b.jpg"]
    assert [source.classes[i] for i in source.labels] == [label, "dog"]


@pytest.mark.parametrize(
    "header", ["image_id,label_name", "ImageID,LabelName", "filename,class", "id,label", "file_name,category_id"]
)
def test_a_header_is_still_skipped_and_said(tmp_path, header, caplog):
    with caplog.at_level(logging.INFO, logger="gpupipe"):
        source = gpupipe.FileList(write(tmp_path, "l.csv", f"{header}\na.jpg,1\nb.jpg,0\n"))
    assert [Path(n).name for n in source.names] == ["a.jpg", "b.jpg"] and source.labels.tolist() == [1, 0]
    assert [r.getMessage() for r in caplog.records if "header" in r.getMessage()] == [
        f"FileList: {tmp_path / 'l.csv'}:1 {header.split(',')!r} is read as a header, not as a sample"
    ]


# -- a single label in brackets stays one class (was: the whole list turned multi-label) ------------------------


@pytest.mark.parametrize("name", ["l.txt", "l.csv"])
def test_a_class_named_in_brackets_stays_a_single_label_class(tmp_path, name):
    sep = "," if name.endswith(".csv") else " "
    source = gpupipe.FileList(write(tmp_path, name, f"a.jpg{sep}[unk]\nb.jpg{sep}dog\nc.jpg{sep}[MASK]\n"))
    assert source.kind is gpupipe.TargetKind.LABEL
    assert source.classes == ["[MASK]", "[unk]", "dog"] and source.labels.tolist() == [1, 2, 0]


def test_brackets_beside_real_label_lists_are_still_lists(tmp_path):
    source = gpupipe.FileList(write(tmp_path, "l.csv", "a.jpg,\"['cat', 'dog']\"\nb.jpg,[dog]\n"))
    assert source.kind is gpupipe.TargetKind.MULTI_LABEL and source.classes == ["cat", "dog"]
    one = gpupipe.FileList(write(tmp_path, "m.txt", "a.jpg ['cat']\nb.jpg [dog]\n"))
    assert one.kind is gpupipe.TargetKind.MULTI_LABEL and one.classes == ["cat", "dog"]


# -- lines read wrongly before and after: now errors naming the line -------------------------------------------


@pytest.mark.parametrize(
    "name, text, line, said",
    [
        # CUB's images.txt is "id path": every image was its own class, named by its path.
        ("images.txt", "1 001.Albatross/a_0046.jpg\n2 001.Albatross/b_0009.jpg\n", 1, "image path"),
        ("swapped.csv", "label,path\ncat,a.jpg\ndog,b.png\n", 2, "image path"),
        # pandas writes an int column holding NaN as floats: 1.0 became the class "1.0", index 0.
        ("floats.csv", "id,label\na.jpg,1.0\nb.jpg,2.0\n", 2, "astype\\(int\\)"),
        ("floats.txt", "a.jpg 1.0\nb.jpg 0.0\n", 1, "astype\\(int\\)"),
        # ImageNet's LOC_val_solution.csv: a class and its boxes; each distinct string was a class.
        (
            "LOC_val_solution.csv",
            "ImageId,PredictionString\nv1,n02119789 255 142 454 329 n02119789 44 21 322 295\n",
            2,
            "box coordinates",
        ),
        # Kaggle CSVs with more columns: the hint was about quoting several labels.
        ("train.csv", "id,label,fold\na.jpg,1,0\n", 1, "3 columns"),
        ("eu.csv", "a.jpg;1\nb.jpg;0\n", 1, "';'"),
        ("three.tsv", "a.jpg\t1\tfold0\n", 1, "3 columns"),
    ],
)
def test_misread_list_files_are_refused_naming_the_line(tmp_path, name, text, line, said):
    listing = write(tmp_path, name, text)
    with pytest.raises(ValueError, match=rf"{name}:{line}: .*{said}"):
        gpupipe.FileList(listing)


def test_float_labels_with_classes_given_are_class_names(tmp_path):
    source = gpupipe.FileList(write(tmp_path, "v.txt", "a.jpg 1.0\nb.jpg 2.0\n"), classes=["1.0", "2.0"])
    assert source.labels.tolist() == [0, 1]


def test_tab_separated_labels_may_hold_spaces(tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"x")
    source = gpupipe.FileList(write(tmp_path, "l.tsv", "a.jpg\tgolden retriever\nmy b.jpg\tbeagle\n"))
    assert [Path(n).name for n in source.names] == ["a.jpg", "my b.jpg"]
    assert source.classes == ["beagle", "golden retriever"] and source.labels.tolist() == [1, 0]


# -- scale ------------------------------------------------------------------------------------------------------


_TIMED = """
import os, sys, time, gpupipe
def reference():  # what the parser before multi-label lists did per line, as a yardstick on a loaded machine
    t = time.perf_counter()
    with open(sys.argv[1], encoding="utf-8") as fh:
        rows = [line.rsplit(None, 1) for line in fh.read().splitlines()]
    names, labels = [os.path.join("/data", p) for p, _ in rows], [int(v) for _, v in rows]
    return time.perf_counter() - t
before = reference()
t = time.perf_counter()
s = gpupipe.FileList(sys.argv[1])
seconds = time.perf_counter() - t
print(len(s), len(s.classes), s.labels[-1], seconds, (before + reference()) / 2)
"""


def test_a_million_line_list_parses_in_a_few_seconds(tmp_path):
    """About 2 s on an idle core (the bare split-and-join it is measured against takes as long); bounded
    against that yardstick, so that other tests' load does not fail it while a quadratic step would."""
    rows = "".join(f"train/n{i % 1000:08d}/img_{i:07d}.JPEG {i % 1000}\n" for i in range(1_000_000))
    listing = write(tmp_path, "train.txt", rows)
    proc = subprocess.run([sys.executable, "-c", _TIMED, str(listing)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    count, classes, last, seconds, yardstick = proc.stdout.split()
    assert (int(count), int(classes), int(last)) == (1_000_000, 1000, 999)
    assert float(seconds) < 2.5 * float(yardstick) + 0.5, (seconds, yardstick)


# -- the pack CLI's --multi-label ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("imgs")
    flat_folder(root, 4, classes=1)
    return root


def test_pack_multi_label_packs_a_one_label_per_line_list_as_multi_hot(images, tmp_path):
    listing = write(images, "val.txt", "".join(f"class_0/s{i:04d}.png {'cat' if i % 2 else 'dog'}\n" for i in range(4)))
    assert pack_main([str(listing), str(tmp_path / "multi"), "--multi-label", "-q", "--workers", "1"]) == 0
    assert pack_main([str(listing), str(tmp_path / "single"), "-q", "--workers", "1"]) == 0
    pipeline = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]
    batches = [
        next(iter(gpupipe.loader(tmp_path / name, pipeline, batch_size=4, backend="torchvision", shuffle=False)))
        for name in ("multi", "single")
    ]
    (images, targets), (images_single, labels) = batches
    assert targets.dtype == torch.float32 and targets.shape == (4, 2)
    assert labels.dtype == torch.int64 and labels.shape == (4,)
    expected = {i: 0 if i % 2 else 1 for i in range(4)}  # classes ["cat", "dog"]: odd lines are cat
    assert {i: int(t.argmax()) for i, t in zip(sample_ids(images), targets)} == expected
    assert {i: int(v) for i, v in zip(sample_ids(images_single), labels)} == expected
    assert targets.sum(1).tolist() == [1.0] * 4


def test_pack_multi_label_on_a_folder_is_refused(images, tmp_path, capsys):
    with pytest.raises(SystemExit) as caught:
        pack_main([str(images), str(tmp_path / "out"), "--multi-label"])
    assert caught.value.code == 2 and "--multi-label reads a list file as SRC" in capsys.readouterr().err


def test_no_warning_or_error_on_a_plain_list(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="gpupipe"):
        gpupipe.FileList(write(tmp_path, "l.txt", "a.jpg 0\nb.jpg 1\n"))
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_pack_without_multi_label_names_the_flag_for_repeated_lines(images, tmp_path):
    listing = write(images, "long.txt", "class_0/s0000.png cat\nclass_0/s0001.png dog\nclass_0/s0000.png dog\n")
    with pytest.raises(ValueError, match=r"long\.txt.*pass --multi-label to merge") as caught:
        pack_main([str(listing), str(tmp_path / "out"), "-q", "--workers", "1"])
    assert "multi_label=True" not in str(caught.value)
    assert pack_main([str(listing), str(tmp_path / "merged"), "--multi-label", "-q", "--workers", "1"]) == 0
    source = gpupipe.Shards(tmp_path / "merged")
    assert len(source) == 2 and source.classes == ["cat", "dog"]


def test_pack_multi_label_with_verify_is_refused(images, tmp_path, capsys):
    with pytest.raises(SystemExit) as caught:
        pack_main(["--verify", str(tmp_path), "--multi-label"])
    assert caught.value.code == 2 and "--multi-label is for packing a list file" in capsys.readouterr().err
