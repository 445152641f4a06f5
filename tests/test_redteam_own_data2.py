"""Red team, second look: users' ordinary labelled data that ``FileList``'s own-data heuristics must read as
torch and pandas users expect (no false refusals), and what they must still refuse or name.

Each case is a real vocabulary (ImageNet, Stanford Dogs and Cars, CelebA's -1/1 attributes) written as a user
writes it: a CSV, a text list, or ``(path, label)`` pairs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import gpupipe


def _images(folder: Path, count: int) -> list[str]:
    """``count`` small PNGs ``0.png`` .. in ``folder``, each of its own gray level; their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(count):
        path = folder / f"{k}.png"
        Image.fromarray(np.full((8, 8, 3), 20 * k, np.uint8)).save(path)
        paths.append(str(path))
    return paths


# -- class names that are compound nouns: a word first in one name and last in another -----------------------

COMPOUND_NAMES = {
    # torchvision's ImageNet weights.meta["categories"]: "car" ends one name and starts another
    "imagenet": ["sports car", "car wheel", "timber wolf", "wolf spider", "brain coral", "coral reef", "tench"],
    "dogs": ["bull mastiff", "Boston bull", "French bulldog", "English setter", "Old English sheepdog"],
    "cars": [  # Stanford Cars: a body type or trim at another place in a longer name
        "Chevrolet Silverado 1500 Hybrid Crew Cab 2012",
        "Chevrolet Tahoe Hybrid SUV 2012",
        "BMW 3 Series Wagon 2012",
        "Ford E-Series Wagon Van 2012",
        "Ram C/V Cargo Van Minivan 2012",
        "GMC Savana Van 2012",
        "Land Rover Range Rover SUV 2012",
    ],
}


@pytest.mark.parametrize("vocabulary", sorted(COMPOUND_NAMES))
def test_compound_class_names_are_not_taken_for_tags(tmp_path, vocabulary):
    """A word at another place in two class names (``sports car``, ``car wheel``), or twice in one (``Land Rover
    Range Rover``), was refused as "looks like tags"; a name shares one word so, tags share several. Read as
    one class name each, in pairs and in a CSV."""
    names = COMPOUND_NAMES[vocabulary]
    paths = _images(tmp_path, len(names))
    csv = tmp_path / "labels.csv"
    csv.write_text("path,label\n" + "".join(f"{p},{n}\n" for p, n in zip(paths, names)))
    for source in (gpupipe.FileList(list(zip(paths, names))), gpupipe.FileList(csv)):
        assert source.classes == sorted(names)
        assert [source.classes[k] for k in source.labels.tolist()] == names



def test_imagenet_class_names_read_as_one_class_each():
    """torchvision's 1,000 ImageNet category names, one per image, read as 1,000 classes in sorted order
    (``sports car`` beside ``car wheel`` was refused as tags); the files are not opened to build a source."""
    from torchvision.models import ResNet18_Weights

    names = ResNet18_Weights.IMAGENET1K_V1.meta["categories"]
    source = gpupipe.FileList([(f"/data/{i}.jpg", name) for i, name in enumerate(names)])
    assert source.classes == sorted(names)
    assert [source.classes[k] for k in source.labels.tolist()] == names

def test_tags_sharing_several_words_are_still_refused(tmp_path):
    """Tags in another order or with other tags around them (two words each at another place) stay refused."""
    paths = _images(tmp_path, 3)
    tags = ["haze primary", "agriculture clear haze primary water", "road"]
    with pytest.raises(ValueError, match=r"'haze primary'.*'agriculture clear haze primary water'.*multi_label"):
        gpupipe.FileList(list(zip(paths, tags)))
    assert gpupipe.FileList(list(zip(paths, tags)), multi_label=True).classes == [
        "agriculture",
        "clear",
        "haze",
        "primary",
        "road",
        "water",
    ]


# -- numbers as class names: CelebA's -1/1 attribute columns --------------------------------------------------


@pytest.mark.parametrize("suffix", [".txt", ".csv"])
def test_minus_one_and_one_labels(tmp_path, suffix):
    """A binary column of -1 and 1 (CelebA's ``list_attr_celeba.txt``): refused as "outside the class range"
    without a way out; the refusal names classes=['-1', '1'], which reads each number as the class it names,
    as ``classes=['1', '2']`` does for 1 and 2."""
    paths = _images(tmp_path, 3)
    sep = " " if suffix == ".txt" else ","
    listing = tmp_path / ("attr" + suffix)
    listing.write_text("".join(f"{p}{sep}{v}\n" for p, v in zip(paths, ["-1", "1", "-1"])))
    with pytest.raises(ValueError, match=r"label -1 of .*outside the class range 0..1.*classes=\['-1', '1'\]"):
        gpupipe.FileList(listing)
    source = gpupipe.FileList(listing, classes=["-1", "1"])
    assert source.classes == ["-1", "1"] and source.labels.tolist() == [0, 1, 0]


# -- ImageNet's synset names hold commas ----------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".csv", ".txt"])
def test_synset_names_with_commas_are_named(tmp_path, suffix, caplog):
    """``"tiger, Panthera tigris"`` (LOC_synset_mapping.txt's names, quoted by pandas) was read, silently, as
    two labels per image that never come apart; a warning names it and the ways to read it."""
    paths = _images(tmp_path, 4)
    names = ["tiger, Panthera tigris", "tabby, tabby cat", "tiger, Panthera tigris", "tench, Tinca tinca"]
    listing = tmp_path / ("synsets" + suffix)
    quote = '"' if suffix == ".csv" else ""
    sep = "," if suffix == ".csv" else "\t"
    listing.write_text("".join(f"{p}{sep}{quote}{n}{quote}\n" for p, n in zip(paths, names)))
    source = gpupipe.FileList(listing)
    assert source.kind is gpupipe.TargetKind.MULTI_LABEL  # as documented: ',' separates labels
    said = [r.getMessage() for r in caplog.records if "never come apart" in r.getMessage()]
    assert len(said) == 1 and "'tiger', 'Panthera tigris'" in said[0] and "str.split(',').str[0]" in said[0]
    caplog.clear()
    gpupipe.FileList(listing, multi_label=True)
    assert not [r for r in caplog.records if "never come apart" in r.getMessage()]


def test_labels_that_come_together_and_apart_are_not_named(tmp_path, caplog):
    """Real several labels per image (``cat,dog`` beside ``dog``) raise no such warning."""
    paths = _images(tmp_path, 3)
    source = gpupipe.FileList(list(zip(paths, [["cat", "dog"], ["dog"], ["bird", "cat"]])))
    assert source.classes == ["bird", "cat", "dog"]
    assert not [r for r in caplog.records if "never come apart" in r.getMessage()]


def test_a_class_name_with_commas_after_a_space(tmp_path):
    """``0.png tiger, Panthera tigris`` in a text list: the refusal suggested ``tiger,,Panthera,tigris``; it
    suggests the labels without doubled commas, and a tab for one class name."""
    path = _images(tmp_path, 1)[0]
    listing = tmp_path / "l.txt"
    listing.write_text(f"{path} tiger, Panthera tigris\n")
    said = r"0.png tiger,Panthera,tigris\); if they name one class, put a tab .*0.png<TAB>tiger, Panthera tigris\)"
    with pytest.raises(ValueError, match=said):
        gpupipe.FileList(listing)


# -- multi_label=True on a list of one label per image --------------------------------------------------------


def test_a_validation_list_of_class_names_with_spaces(tmp_path):
    """``multi_label=True, classes=train.classes`` on a validation list of one label per image (as the docs say
    to read one) split ``golden retriever`` into two words and refused them as unknown; a label that is one of
    ``classes`` is that class."""
    paths = _images(tmp_path, 3)
    train = tmp_path / "train.csv"
    train.write_text(f"path,labels\n{paths[0]},golden retriever;beagle\n{paths[1]},beagle\n")
    classes = gpupipe.FileList(train).classes
    assert classes == ["beagle", "golden retriever"]
    val = tmp_path / "val.csv"
    val.write_text(f"path,labels\n{paths[2]},golden retriever\n{paths[1]},beagle\n")
    for entries in (val, [(paths[2], "golden retriever"), (paths[1], "beagle")]):
        source = gpupipe.FileList(entries, multi_label=True, classes=classes)
        assert [s.tolist() for s in source.label_lists] == [[1], [0]]
    tags = tmp_path / "tags.csv"  # a label that is no class is split into its words, as before
    tags.write_text(f"path,labels\n{paths[2]},beagle golden retriever\n")
    with pytest.raises(ValueError, match=r"labels \['golden', 'retriever'\] are not among classes"):
        gpupipe.FileList(tags, multi_label=True, classes=classes)


# -- class ids counted from 1 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".txt", ".csv"])
def test_labels_counted_from_one_are_named(tmp_path, suffix, caplog):
    """Oxford Pets' ``list.txt``, CUB's and Flowers-102's labels count from 1: read as indices, class '0' holds
    no image and the model needs one output more than the dataset has classes (a 3-class head fails on label
    3), silently; a warning names it and ``classes=['1', '2', '3']``, which reads each number as its class."""
    paths = _images(tmp_path, 4)
    sep = " " if suffix == ".txt" else ","
    listing = tmp_path / ("list" + suffix)
    listing.write_text("".join(f"{p}{sep}{v}\n" for p, v in zip(paths, ["1", "3", "2", "3"])))
    source = gpupipe.FileList(listing)
    assert source.classes == ["0", "1", "2", "3"] and source.labels.tolist() == [1, 3, 2, 3]  # as torch reads them
    said = [r.getMessage() for r in caplog.records if "count from 1" in r.getMessage()]
    assert len(said) == 1 and "classes=['1', '2', '3']" in said[0]
    caplog.clear()
    named = gpupipe.FileList(listing, classes=["1", "2", "3"])
    assert named.labels.tolist() == [0, 2, 1, 2] and not caplog.records
    gpupipe.FileList(list(zip(paths, [0, 1, 2, 2])))  # from 0: no warning
    assert not [r for r in caplog.records if "count from 1" in r.getMessage()]
