"""Red team, sources (5): a user's own folders and list files as they really come: archives made on macOS
(``__MACOSX/``), folders from a Synology NAS (``@eaDir/`` thumbnails), a split folder left inside the training
folder, class names that differ only by case or by Unicode normal form, and list files saved by Excel or
PowerShell as UTF-16.

Each must give the images torchvision's ``ImageFolder`` or pandas would give, with the right labels, or a
clear error or warning naming the folder or file.
"""

from __future__ import annotations

import logging
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import gpupipe


def _image(path: Path, level: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((8, 8, 3), level, np.uint8)).save(path, format="JPEG")
    return path


def _read(source, root: Path) -> list[tuple[str, str]]:
    """``(path relative to root, class name)`` of every sample."""
    return sorted((str(Path(n).relative_to(root)), source.classes[k]) for n, k in zip(source.names, source.labels))


# -- system folders: never classes, never images ---------------------------------------------------------------


def test_macos_and_nas_system_folders_are_neither_classes_nor_images(tmp_path, caplog):
    """A zip made on macOS holds ``__MACOSX/<class>/._<image>`` (AppleDouble metadata): taken for a class (of no
    image), it shifted every label by one and added a class; a Synology NAS keeps ``@eaDir/<image>/SYNOPHOTO_THUMB_
    *.jpg`` thumbnails beside the photos: read as more photos of the class (and ``@eaDir`` at the top as a class)."""
    _image(tmp_path / "cat" / "1.jpg")
    _image(tmp_path / "dog" / "1.jpg")
    (tmp_path / "__MACOSX" / "cat").mkdir(parents=True)
    (tmp_path / "__MACOSX" / "cat" / "._1.jpg").write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    _image(tmp_path / "cat" / "@eaDir" / "1.jpg" / "SYNOPHOTO_THUMB_M.jpg")
    _image(tmp_path / "@eaDir" / "cat" / "SYNOPHOTO_THUMB_S.jpg")
    (tmp_path / "dog" / "#recycle").mkdir()
    _image(tmp_path / "dog" / "#recycle" / "deleted.jpg")
    with caplog.at_level(logging.WARNING, "gpupipe.sources"):
        source = gpupipe.ImageFolder(tmp_path)
    assert source.classes == ["cat", "dog"]
    assert _read(source, tmp_path) == [("cat/1.jpg", "cat"), ("dog/1.jpg", "dog")]
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "__MACOSX" in said and "@eaDir" in said and "#recycle" in said


def test_system_folders_are_left_out_of_unlabelled_folders(tmp_path):
    """A test folder to predict on from a NAS: the thumbnails are not predicted on."""
    _image(tmp_path / "a.jpg")
    _image(tmp_path / "@eaDir" / "a.jpg" / "SYNOPHOTO_THUMB_M.jpg")
    _image(tmp_path / "__MACOSX" / "b.jpg")
    source = gpupipe.FileList(tmp_path)
    assert source.classes == ["a.jpg"]


# -- a split folder inside the training folder ------------------------------------------------------------------


@pytest.mark.parametrize("split", ["val", "test", "Validation"])
def test_a_split_folder_beside_the_classes_is_refused(tmp_path, split):
    """``train/`` holding ``cat/ dog/ val/`` with ``val/cat``, ``val/dog``: ``val`` was read as a third class
    holding cats and dogs (torchvision does so too): wrong labels, silently."""
    for name in ("cat", "dog"):
        _image(tmp_path / name / "1.jpg")
        _image(tmp_path / split / name / "2.jpg")
    with pytest.raises(ValueError, match=rf"{split}/ holds folders cat/, dog/.*named as the classes beside it"):
        gpupipe.ImageFolder(tmp_path)


def test_a_class_named_as_a_split_is_read(tmp_path):
    """CIFAR-100 has a class ``train``; a ``train`` class folder with sub-folders of its own (not named as the
    other classes) is a class."""
    for name in ("bus", "car", "train"):
        _image(tmp_path / name / "1.jpg")
    _image(tmp_path / "train" / "steam" / "2.jpg")
    source = gpupipe.ImageFolder(tmp_path)
    assert source.classes == ["bus", "car", "train"]
    assert len(source.names) == 4


# -- class names alike but for case or Unicode normal form ------------------------------------------------------


def test_class_names_differing_only_by_normal_form_or_case_are_named(tmp_path, caplog):
    """``café`` written by macOS (NFD) beside ``café`` written elsewhere (NFC): two classes printed alike; ``Cat``
    beside ``cat``: one folder on macOS and Windows. Read as torchvision reads them, with a warning naming them."""
    nfc, nfd = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")
    _image(tmp_path / nfc / "1.jpg")
    _image(tmp_path / nfd / "2.jpg")
    _image(tmp_path / "Cat" / "3.jpg")
    _image(tmp_path / "cat" / "4.jpg")
    with caplog.at_level(logging.WARNING, "gpupipe.sources"):
        source = gpupipe.ImageFolder(tmp_path)
    assert source.classes == sorted([nfc, nfd, "Cat", "cat"])
    said = [r.getMessage() for r in caplog.records if "alike" in r.getMessage()]
    assert len(said) == 1
    assert ascii(nfd) in said[0] and ascii(nfc) in said[0] and "'Cat'" in said[0] and "'cat'" in said[0]


# -- list files saved as UTF-16 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
@pytest.mark.parametrize("name", ["labels.txt", "labels.csv"])
def test_a_utf16_list_file_is_read(tmp_path, encoding, name):
    """Excel's "Unicode Text" and PowerShell's ``>`` write UTF-16 with a byte-order mark: it was refused as "a
    binary file". Read as the UTF-8 file would be (tabs in the text, commas in the CSV)."""
    _image(tmp_path / "imgs" / "a.jpg")
    _image(tmp_path / "imgs" / "café 2.jpg")
    sep = "," if name.endswith(".csv") else "\t"
    text = f"path{sep}label\r\nimgs/a.jpg{sep}cat\r\nimgs/café 2.jpg{sep}chien noir\r\n"
    bom = "\ufeff" if encoding == "utf-16-be" else ""  # Python's utf-16 writes its own
    (tmp_path / name).write_bytes((bom + text).encode(encoding))
    source = gpupipe.FileList(tmp_path / name)
    assert _read(source, tmp_path) == [("imgs/a.jpg", "cat"), ("imgs/café 2.jpg", "chien noir")]


def test_utf16_without_bom_is_still_named_binary(tmp_path):
    (tmp_path / "labels.txt").write_bytes("a.jpg\tcat\n".encode("utf-16-le"))
    with pytest.raises(ValueError, match="binary file"):
        gpupipe.FileList(tmp_path / "labels.txt")


# -- CSV columns: a split or fold column -----------------------------------------------------------------------


@pytest.mark.parametrize("column", ["split", "fold", "is_valid"])
def test_a_split_column_is_named_with_how_to_select_rows(tmp_path, column):
    """Kaggle CSVs carry a ``fold``/``split``/``is_valid`` column. FileList reads two columns; the refusal named
    ``df[['id', 'label']]`` whatever the columns were called: it names the file's own columns and how to keep
    one split's rows."""
    _image(tmp_path / "a.jpg")
    (tmp_path / "train.csv").write_text(f"image_name,target,{column}\na.jpg,cat,0\n")
    with pytest.raises(ValueError, match=rf"df\[df\['{column}'\] == .*\]\[\['image_name', 'target'\]\]"):
        gpupipe.FileList(tmp_path / "train.csv")


def test_a_pandas_index_column_is_named(tmp_path):
    (tmp_path / "train.csv").write_text(",path,label\n0,a.jpg,cat\n")
    with pytest.raises(ValueError, match=r"index column.*index=False"):
        gpupipe.FileList(tmp_path / "train.csv")


@pytest.mark.parametrize("missing", ["NaN", "nan", "<NA>"])
def test_a_pandas_missing_label_is_named_empty(tmp_path, missing):
    """pandas writes a missing label as an empty cell, but ``df.astype(str)`` writes ``nan`` (``<NA>`` for a
    nullable column): it was read as a class name and refused as mixing names and indices, or read as a class
    ``nan``."""
    (tmp_path / "a.csv").write_text(f"path,label\na.jpg,1\nb.jpg,{missing}\n")
    with pytest.raises(ValueError, match=rf"a\.csv:3: the label {missing!r} is a missing value"):
        gpupipe.FileList(tmp_path / "a.csv")


# -- WebDataset labels written as floats ----------------------------------------------------------------------


def _tar(path: Path, members: list[tuple[str, bytes]]) -> Path:
    import io
    import tarfile

    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _jpeg() -> bytes:
    import io

    buffer = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buffer, format="JPEG")
    return buffer.getvalue()


@pytest.mark.parametrize("values", [["2.0", "10.0", "1.0"], ["0.25", "0.5", "0.75"]])
def test_webdataset_cls_labels_written_as_floats_are_refused(tmp_path, values):
    """``.cls`` members ``2.0``, ``10.0`` (a float column written out, as pandas writes an int column with a NaN)
    were read as class names numbered in sorted order: ``10.0`` became class 1, ``2.0`` class 2; values
    (``0.25``) each a class. Refused, naming a member; ``classes=`` reads them as names."""
    jpeg = _jpeg()
    members = [m for k, v in enumerate(values) for m in ((f"{k:04d}.jpg", jpeg), (f"{k:04d}.cls", f"{v}\n".encode()))]
    tar = _tar(tmp_path / "shard.tar", members)
    with pytest.raises(ValueError, match=rf"shard.tar#0000\.jpg.*{values[0]!r}.*classes="):
        gpupipe.WebDataset(tar, cache_dir=tmp_path / "cache")
    named = gpupipe.WebDataset(tar, cache_dir=tmp_path / "cache2", classes=sorted(values))
    assert [named.classes[k] for k in named.labels.tolist()] == values


# -- list files naming files in another Unicode normal form -----------------------------------------------------


@pytest.mark.parametrize("disk,written", [("NFD", "NFC"), ("NFC", "NFD")])
@pytest.mark.parametrize("name", ["labels.csv", "labels.txt"])
def test_list_paths_in_another_unicode_normal_form_are_found(tmp_path, disk, written, name):
    """Files unpacked from a macOS archive are named in NFD (``e`` + combining accent), a list written by pandas
    on Linux or Windows in NFC: ``café/1.jpg`` named no file and every such image was a missing file. Read in the
    form that names a file, as a Windows ``\\`` is; a file that exists as written is read as written."""
    folder = unicodedata.normalize(disk, "café")
    _image(tmp_path / folder / "1.jpg", 10)
    _image(tmp_path / "plain" / "2.jpg", 20)
    listed = unicodedata.normalize(written, "café")
    sep = "," if name.endswith(".csv") else " "
    (tmp_path / name).write_text(f"{listed}/1.jpg{sep}{listed}\nplain/2.jpg{sep}plain\n")
    source = gpupipe.FileList(tmp_path / name)
    assert source.names == [str(tmp_path / folder / "1.jpg"), str(tmp_path / "plain" / "2.jpg")]
    assert all(Path(n).is_file() for n in source.names)
    assert source.classes == sorted([listed, "plain"])  # labels are text: as written


@pytest.mark.parametrize("flat", ["test", "val"])
def test_splits_of_which_one_is_flat_are_refused(tmp_path, flat):
    """Kaggle's ``data/train/<class>/...`` beside ``data/test/*.jpg`` (no labels), or ImageNet's ``train/<wnid>/``
    beside its flat ``val/``: given ``data``, every training image was read as class ``train`` and the test
    images as class ``test``. Refused as the folder of splits is, naming the folder to pass."""
    _image(tmp_path / "train" / "cat" / "1.jpg")
    _image(tmp_path / "train" / "dog" / "1.jpg")
    _image(tmp_path / flat / "5.jpg")
    with pytest.raises(ValueError, match=rf"holds split folders .*{flat}/.*pass {tmp_path}/train"):
        gpupipe.ImageFolder(tmp_path)
    with pytest.raises(ValueError, match=rf"pass {tmp_path}/train"):
        gpupipe.loader(str(tmp_path), gpupipe.presets.val(8), batch_size=1, backend="torchvision")


def test_a_folder_of_gzipped_shards_says_to_decompress(tmp_path):
    """A folder of ``.tar.gz`` shards was refused as holding "no .tar file"; it says what it holds."""
    import gzip

    raw = _tar(tmp_path / "x.tar", [("0.jpg", _jpeg()), ("0.cls", b"0")]).read_bytes()
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "shard-000.tar.gz").write_bytes(gzip.compress(raw))
    with pytest.raises(ValueError, match=r"no \.tar file in the folder .*shards.*1 \.tar\.gz.*decompress"):
        gpupipe.WebDataset(tmp_path / "shards", cache_dir=tmp_path / "cache")


# -- one image in two classes through links ---------------------------------------------------------------------


def test_two_class_folders_that_are_one_folder_are_refused(tmp_path):
    """``dog`` a link to ``cat`` (a class folder linked in place of a copy): every cat was also read as a dog."""
    _image(tmp_path / "cat" / "1.jpg")
    _image(tmp_path / "bird" / "1.jpg")
    (tmp_path / "dog").symlink_to(tmp_path / "cat")
    with pytest.raises(ValueError, match=r"class folders 'cat' and 'dog' are one folder"):
        gpupipe.ImageFolder(tmp_path)


def test_a_linked_image_in_two_classes_is_named(tmp_path, caplog):
    """Class folders made of links into a pool of photos (``ln -s``): a photo linked into two classes is read
    once per class, as torchvision reads it, with a warning naming it and its classes."""
    pool = tmp_path / "pool"
    for k in range(3):
        _image(pool / f"{k}.jpg", 10 * k)
    root = tmp_path / "data"
    (root / "cat").mkdir(parents=True)
    (root / "dog").mkdir()
    (root / "cat" / "0.jpg").symlink_to(pool / "0.jpg")
    (root / "cat" / "1.jpg").symlink_to(pool / "1.jpg")
    (root / "dog" / "1.jpg").symlink_to(pool / "1.jpg")  # in both
    (root / "dog" / "2.jpg").symlink_to(pool / "2.jpg")
    _image(root / "dog" / "3.jpg")
    (root / "cat" / "3.jpg").symlink_to(root / "dog" / "3.jpg")  # a link to a file of the other class
    with caplog.at_level(logging.WARNING, "gpupipe.sources"):
        source = gpupipe.ImageFolder(root)
    assert len(source.names) == 6
    said = [r.getMessage() for r in caplog.records if "in two classes" in r.getMessage()]
    assert len(said) == 1 and "2 images" in said[0] and "'cat'" in said[0] and "'dog'" in said[0]


def test_links_to_images_of_one_class_are_not_named(tmp_path, caplog):
    pool = tmp_path / "pool"
    _image(pool / "0.jpg")
    root = tmp_path / "data"
    (root / "cat").mkdir(parents=True)
    _image(root / "dog" / "1.jpg")
    (root / "cat" / "0.jpg").symlink_to(pool / "0.jpg")
    (root / "cat" / "again.jpg").symlink_to(pool / "0.jpg")  # twice in one class: a duplicate, not two labels
    with caplog.at_level(logging.WARNING, "gpupipe.sources"):
        source = gpupipe.ImageFolder(root)
    assert len(source.names) == 3
    assert not [r for r in caplog.records if "two classes" in r.getMessage()]


def test_a_tar_whose_samples_are_apart_says_so(tmp_path):
    """``tar cf shard.tar .`` writes members in the folder's order, not by name: a key's image and label lie
    apart, and each half was "no image member" / "no .cls member for the label", though both are in the tar.
    Each says its members are apart, and how to write the tar."""
    jpeg = _jpeg()
    tar = _tar(
        tmp_path / "shard.tar",
        [("./a.jpg", jpeg), ("./b.jpg", jpeg), ("./a.cls", b"1\n"), ("./b.cls", b"0\n"), ("./c.jpg", jpeg)]
        + [("./c.cls", b"0")],
    )
    source = gpupipe.WebDataset(tar, cache_dir=tmp_path / "cache")
    assert [n.split("#")[1] for n in source.names] == ["./c.jpg"]
    said = sorted((p.path, p.reason) for p in source.problems)
    assert [name for name, _ in said] == [f"{tar}#./a", f"{tar}#./a", f"{tar}#./b", f"{tar}#./b"]
    assert all("apart in the tar" in reason and "--sort=name" in reason for _, reason in said)
    source = gpupipe.WebDataset(
        _tar(
            tmp_path / "two.tar", [("a.jpg", jpeg), ("b.jpg", jpeg), ("b.cls", b"0"), ("c.jpg", jpeg), ("c.cls", b"1")]
        ),
        cache_dir=tmp_path / "cache",
    )
    assert [n.split("#")[1] for n in source.names] == ["b.jpg", "c.jpg"]
    assert [str(p) for p in source.problems] == [f"{tmp_path}/two.tar#a: no .cls member for the label"]


def test_a_tab_separated_split_column_is_named_too(tmp_path):
    (tmp_path / "train.tsv").write_text("filepath\tlabel\tfold\na.jpg\tcat\t0\n")
    with pytest.raises(
        ValueError, match=r"train.tsv:1: .*3 columns.*df\[df\['fold'\] == VALUE\]\[\['filepath', 'label'\]\]"
    ):
        gpupipe.FileList(tmp_path / "train.tsv")


def test_extra_columns_without_a_header_name_no_data_as_columns(tmp_path):
    (tmp_path / "train.csv").write_text("a.jpg,cat,0\nb.jpg,dog,1\n")
    with pytest.raises(ValueError, match=r"3 columns.*keep those two \(pandas: df\[\[PATH_COLUMN, LABEL_COLUMN\]\]"):
        gpupipe.FileList(tmp_path / "train.csv")


@pytest.mark.parametrize(
    "label,said",
    [(np.float64(1.0), "class index as a float.*int\\(label\\)"), (float("nan"), "missing value \\(NaN\\).*dropna")],
)
def test_pairs_with_float_labels_say_why(tmp_path, label, said):
    """``zip(df.path, df.label)`` of a label column holding a NaN: floats, and ``nan`` where the label is missing."""
    with pytest.raises(ValueError, match=rf"label nan|label 1\.0.*{said}"):
        gpupipe.FileList([("a.jpg", label), ("b.jpg", 0)], root=tmp_path)


def test_a_utf16_list_that_does_not_decode_names_the_file(tmp_path):
    (tmp_path / "labels.txt").write_bytes(b"\xff\xfe" + "a.jpg\tcat\n".encode("utf-16-le") + b"\x00\xd8")
    with pytest.raises(ValueError, match=r"labels.txt: 'utf-16-le' codec can't decode"):
        gpupipe.FileList(tmp_path / "labels.txt")
