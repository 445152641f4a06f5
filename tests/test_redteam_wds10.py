"""Red team, round 10: WebDataset tars laid out as users' own tools write them (GNU tar, ``tarfile``, links,
sparse members, label names as users spell them, globs and ``::`` in shard specs), read on ``dali-cpu`` and
``torchvision`` alike with the exact samples, labels and skipped members."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
from helpers import CPU_BACKENDS
from PIL import Image
from wds_helpers import add, png

import gpupipe

PIPELINE = [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")]


def image(value: int, fmt: str = "PNG") -> bytes:
    """A flat grey 12x16 image in ``fmt``."""
    out = io.BytesIO()
    Image.fromarray(np.full((12, 16, 3), value, np.uint8)).save(out, fmt)
    return out.getvalue()


def member(name: str, kind: bytes, target: str = "") -> tarfile.TarInfo:
    """A member that is no regular file: a link to ``target``, a folder, a FIFO."""
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def write(path: Path, members, fmt=tarfile.PAX_FORMAT) -> Path:
    """A tar of ``members``: ``(name, bytes)`` pairs or ``TarInfo`` without data."""
    with tarfile.open(path, "w", format=fmt) as tar:
        for item in members:
            if isinstance(item, tarfile.TarInfo):
                tar.addfile(item)
            else:
                add(tar, *item)
    return path


def read(source, backend: str) -> tuple[list, list]:
    """``[(grey level / 10, label)]`` in order, and the names of the skipped samples (after the ``#``)."""
    loader = gpupipe.loader(
        source, PIPELINE, batch_size=2, backend=backend, num_threads=1, shuffle=False, on_error="skip"
    )
    seen = [(round(float(x.float().mean()) / 10), int(y)) for xs, ys in loader for x, y in zip(xs, ys)]
    return seen, sorted(s.path.split("#", 1)[1] for s in loader.skipped)


def problems(source) -> dict:
    return {p.path.split("#", 1)[1] if "#" in p.path else Path(p.path).name: p.reason for p in source.problems}


# -- layouts users' tools write: read alike on both backends --------------------------------------------------


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_layouts_of_gnu_tar_and_tarfile_give_the_exact_samples_on_every_backend(tmp_path, backend):
    long_key = "d" * 70 + "/" + "k" * 90  # a GNU long name (over 100 characters)
    members = [
        member("train", tarfile.DIRTYPE),
        member("train/cls", tarfile.DIRTYPE),
        ("train/cls/0001.jpg", image(10, "JPEG")),
        ("train/cls/0001.cls", b"1"),
        ("./0002.png", image(20)),
        ("./0002.cls", b"2"),  # GNU tar's ./ prefix: the key keeps it
        ("0003.JPEG", image(30, "JPEG")),
        ("0003.Cls", b"0"),  # upper case extensions
        ("0004.webp", image(40, "WEBP")),
        ("0004.cls", b"1"),
        ("0005.png", image(50)),
        ("0005.jpg", image(60, "JPEG")),
        ("0005.cls", b"2"),  # jpg comes first in image=
        (long_key + ".png", image(70)),
        (long_key + ".cls", b"0"),
        ("été/ключ.png", image(80)),
        ("été/ключ.cls", b"1"),  # a pax header holds the name
        ("0006.png", image(90)),
        ("0006.cls", b"2"),
        ("0006.idx", b"0 1"),  # other members ignored
    ]
    source = gpupipe.WebDataset(write(tmp_path / "a.tar", members), cache_dir=tmp_path / "c")
    assert not source.problems
    assert read(source, backend) == ([(1, 1), (2, 2), (3, 0), (4, 1), (6, 2), (7, 0), (8, 1), (9, 2)], [])


def test_gnu_long_names_in_a_gnu_format_tar_are_read(tmp_path):
    key = "x" * 120
    source = gpupipe.WebDataset(
        write(tmp_path / "a.tar", [(key + ".png", image(10)), (key + ".cls", b"3")], tarfile.GNU_FORMAT),
        cache_dir=tmp_path / "c",
    )
    assert source.names == [f"{tmp_path / 'a.tar'}#{key}.png"] and source.labels.tolist() == [3]


# -- label members named as users name them ------------------------------------------------------------------


@pytest.mark.parametrize("label", ["cls", "CLS", ".cls", " Cls "])
def test_the_label_member_is_matched_whatever_its_case_or_leading_dot(tmp_path, label):
    tar = write(tmp_path / "a.tar", [("a.png", image(10)), ("a.CLS", b"1"), ("b.png", image(20)), ("b.cls", b"0")])
    source = gpupipe.WebDataset(tar, label=label, cache_dir=tmp_path / "c")
    assert source.labels.tolist() == [1, 0] and not source.problems


def test_a_json_label_without_a_field_is_refused_naming_the_form(tmp_path):
    tar = write(tmp_path / "a.tar", [("a.png", image(10)), ("a.json", b'{"label": 3}')])
    with pytest.raises(ValueError, match=r"label='json' .*'json:<field>'.*json:label"):
        gpupipe.WebDataset(tar, label="json", cache_dir=tmp_path / "c")


def test_a_json_field_keeps_its_case(tmp_path):
    tar = write(tmp_path / "a.tar", [("a.png", image(10)), ("a.JSON", b'{"Meta": {"Label": 3}}')])
    source = gpupipe.WebDataset(tar, label="JSON:Meta.Label", cache_dir=tmp_path / "c")
    assert source.labels.tolist() == [3]


def test_a_label_in_another_member_than_asked_is_named(tmp_path):
    tar = write(tmp_path / "a.tar", [("a.png", image(10)), ("a.txt", b"1"), ("b.png", image(20)), ("b.txt", b"0")])
    with pytest.raises(ValueError, match=r"no \.cls member for the label: the sample holds \.txt.*label='txt'"):
        gpupipe.WebDataset(tar, cache_dir=tmp_path / "c")


# -- members that are no regular file: listed by name, never followed ---------------------------------------


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_links_and_special_members_are_listed_by_name_and_never_followed(tmp_path, backend):
    outside = tmp_path / "secret.png"
    outside.write_bytes(image(200))
    tar = write(
        tmp_path / "a.tar",
        [
            ("a.png", image(10)),
            ("a.cls", b"1"),
            member("b.png", tarfile.SYMTYPE, str(outside)),
            ("b.cls", b"0"),
            member("c.png", tarfile.LNKTYPE, "a.png"),  # a hard link to a member before it: its data
            ("c.cls", b"0"),
            member("g.png", tarfile.LNKTYPE, "../../secret.png"),  # to no member: listed
            ("g.cls", b"0"),
            member("d.png", tarfile.SYMTYPE, "../../secret.png"),
            ("d.cls", b"1"),
            member("e.png", tarfile.FIFOTYPE),
            ("e.cls", b"1"),
            ("f.png", image(30)),
            ("f.cls", b"2"),
        ],
    )
    source = gpupipe.WebDataset(tar, cache_dir=tmp_path / "c")
    found = {}
    for p in source.problems:
        found.setdefault(p.path.split("#", 1)[1], []).append(p.reason)
    # the member, and its sample left without an image: both listed
    refused = ["b", "b.png", "d", "d.png", "e", "e.png", "g", "g.png"]
    assert sorted(found) == refused, found
    assert found["b"] == ["no image member (.jpg, .jpeg, .png, .webp)"]
    assert found["b.png"] == [
        f"a symbolic link (to {str(outside)!r}): links are not followed; a WebDataset "
        "sample's files are regular members of the tar"
    ]
    assert "a hard link (to '../../secret.png')" in found["g.png"][0]
    assert "a FIFO" in found["e.png"][0]
    seen, skipped = read(source, backend)
    assert seen == [(1, 1), (1, 0), (3, 2)] and skipped == refused


def test_a_sparse_member_is_refused_by_name_never_read_by_offset(tmp_path):
    if shutil.which("tar") is None:
        pytest.skip("GNU tar is not installed")
    folder = tmp_path / "files"
    folder.mkdir()
    out = io.BytesIO()
    Image.fromarray(np.zeros((200, 200, 3), np.uint8)).save(out, "PPM")  # black: zeros, written as a hole
    data = out.getvalue()
    head = data.index(b"\n255\n") + 5
    with open(folder / "a.ppm", "wb") as fh:
        fh.write(data[:head])
        fh.seek(len(data) - 1)
        fh.write(data[-1:])
    (folder / "a.cls").write_text("1")
    (folder / "b.ppm").write_bytes(image(40, "PPM"))
    (folder / "b.cls").write_text("0")
    (folder / "pad.bin").write_bytes(os.urandom(200_000))  # the sparse member's stated size fits in the tar
    for fmt in ("gnu", "posix"):
        tar = tmp_path / f"{fmt}.tar"
        subprocess.run(
            ["tar", "-S", f"--format={fmt}", "-cf", str(tar), "a.ppm", "a.cls", "b.ppm", "b.cls", "pad.bin"],
            cwd=folder,
            check=True,
        )
        with tarfile.open(tar) as t:
            assert t.getmember("a.ppm").sparse is not None, "GNU tar wrote a sparse member"
        source = gpupipe.WebDataset(tar, image="ppm", cache_dir=tmp_path / "c")
        assert problems(source)["a.ppm"] == (
            "a sparse member (tar --sparse): its data is not stored as written; write the tar without --sparse"
        ), fmt
        assert problems(source)["a"] == "no image member (.ppm)"  # its sample, left without its image
        assert [n.split("#")[1] for n in source.names] == ["b.ppm"]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_zero_byte_image_is_named_empty_on_every_backend(tmp_path, backend):
    tar = write(tmp_path / "a.tar", [("a.png", b""), ("a.cls", b"1"), ("b.png", image(20)), ("b.cls", b"0")])
    source = gpupipe.WebDataset(tar, cache_dir=tmp_path / "c")
    loader = gpupipe.loader(source, PIPELINE, batch_size=1, backend=backend, num_threads=1, on_error="skip")
    list(loader)
    assert [(s.path.split("#")[1], s.reason) for s in loader.skipped] == [("a.png", "an empty file (0 bytes)")]


# -- shard specs -------------------------------------------------------------------------------------------


@pytest.fixture
def shards(tmp_path):
    """``s-0.tar`` .. ``s-2.tar`` of 1, 3 and 2 samples (keys ``k<n>``, label ``n % 3``), and ``x.tar``."""
    n = 0
    for t, count in enumerate([1, 3, 2]):
        write(
            tmp_path / f"s-{t}.tar",
            [
                (f"k{n + i}.{ext}", png(n + i) if ext == "png" else str((n + i) % 3).encode())
                for i in range(count)
                for ext in ("png", "cls")
            ],
        )
        n += count
    write(tmp_path / "x.tar", [("k9.png", png(9)), ("k9.cls", b"0")])
    return tmp_path


def keys(source) -> list:
    return [n.rsplit("#", 1)[1].split(".")[0] for n in source.names]


def test_a_local_glob_reads_its_tars_in_name_order(shards):
    want = ["k0", "k1", "k2", "k3", "k4", "k5"]
    assert keys(gpupipe.WebDataset(str(shards / "s-*.tar"), cache_dir=shards / "c")) == want
    assert keys(gpupipe.WebDataset(str(shards / "s-[0-2].tar"), cache_dir=shards / "c")) == want
    assert keys(gpupipe.WebDataset([str(shards / "x.tar"), str(shards / "s-?.tar")], cache_dir=shards / "c")) == [
        "k9",
        *want,
    ]


def test_a_glob_matching_nothing_is_refused_naming_it(shards):
    with pytest.raises(ValueError, match=r"no file matches .*t-\*\.tar"):
        gpupipe.WebDataset(str(shards / "t-*.tar"), cache_dir=shards / "c")


def test_double_colons_join_patterns_as_in_webdataset(shards):
    spec = f"{shards}/s-{{0..1}}.tar::{shards}/x.tar"
    assert keys(gpupipe.WebDataset(spec, cache_dir=shards / "c")) == ["k0", "k1", "k2", "k3", "k9"]


def test_a_text_list_of_shards_is_refused_saying_how_to_pass_it(shards):
    listing = shards / "shards.txt"
    listing.write_text("".join(f"{shards}/s-{t}.tar\n" for t in range(3)))
    with pytest.raises(
        ValueError,
        match=r"shards\.txt: a text file, not a tar \(a list of shards\?\).*"
        r"read_text\(\)\.split\(\)",
    ):
        gpupipe.WebDataset(listing, cache_dir=shards / "c")


@pytest.mark.parametrize("text", [b"1 2", b"1,4", b"3\n5\n", b"0;2", b"a dog\non grass\n"])
def test_a_label_member_holding_several_values_is_refused_not_made_a_class(tmp_path, text):
    tar = write(tmp_path / "a.tar", [("a.png", image(10)), ("a.cls", text), ("b.png", image(20)), ("b.cls", b"1")])
    source = gpupipe.WebDataset(tar, cache_dir=tmp_path / "c")
    assert source.classes == ["0", "1"] and source.labels.tolist() == [1]
    reason = problems(source)["a.cls"]
    if text[:1].isdigit():
        assert "holds several values, not one class label" in reason and "FileList" in reason, reason
    else:
        assert reason == "the label member holds 2 lines, not one class label (a caption?)"


def test_a_json_label_field_indexes_a_list_by_number(tmp_path):
    tar = write(
        tmp_path / "a.tar",
        [("a.png", image(10)), ("a.json", b'{"labels": [2, 5]}'), ("b.png", image(20)), ("b.json", b'{"labels": [1]}')],
    )
    source = gpupipe.WebDataset(tar, label="json:labels.0", cache_dir=tmp_path / "c")
    assert source.labels.tolist() == [2, 1]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_macos_metadata_members_are_named_as_such(tmp_path, backend):
    tar = write(
        tmp_path / "a.tar",
        [
            ("._0001.png", b"\x00\x05\x16\x07 AppleDouble"),
            ("0001.png", image(10)),
            ("0001.cls", b"1"),
            (".DS_Store", b"x"),
            ("d/._0002.png", b"\x00\x05"),
            ("d/0002.png", image(20)),
            ("d/0002.cls", b"0"),
            ("README", b"text"),
        ],
    )
    source = gpupipe.WebDataset(tar, cache_dir=tmp_path / "c")
    hidden = "a hidden file (macOS metadata? COPYFILE_DISABLE=1 tar leaves it out): not part of a WebDataset sample"
    assert problems(source) == {
        "._0001.png": hidden,
        ".DS_Store": hidden,
        "d/._0002.png": hidden,
        "README": "no extension: not part of a WebDataset sample",
    }
    assert read(source, backend) == ([(1, 1), (2, 0)], [".DS_Store", "._0001.png", "README", "d/._0002.png"])


def test_double_colons_in_an_ipv6_url_are_not_a_join():
    from gpupipe.sources.wdsspec import expand_shards

    assert expand_shards("http://[::1]:8000/s-{0..1}.tar::http://[fe80::2]/x.tar") == [
        "http://[::1]:8000/s-0.tar",
        "http://[::1]:8000/s-1.tar",
        "http://[fe80::2]/x.tar",
    ]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_hard_linked_files_in_a_gnu_tar_are_each_a_sample(tmp_path, backend):
    if shutil.which("tar") is None:
        pytest.skip("GNU tar is not installed")
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "0001.png").write_bytes(image(10))
    (folder / "0001.cls").write_text("1")
    os.link(folder / "0001.png", folder / "0002.png")  # one image in two samples (deduplicated by hard links)
    (folder / "0002.cls").write_text("2")
    (folder / "0003.png").write_bytes(image(30))
    os.link(folder / "0001.cls", folder / "0003.cls")
    subprocess.run(["tar", "--sort=name", "-cf", str(tmp_path / "a.tar"), "."], cwd=folder, check=True)
    with tarfile.open(tmp_path / "a.tar") as t:
        assert t.getmember("./0002.png").islnk() and t.getmember("./0003.cls").islnk()
    source = gpupipe.WebDataset(tmp_path / "a.tar", cache_dir=tmp_path / "c")
    assert not source.problems and source.labels.tolist() == [1, 2, 1]
    assert read(source, backend) == ([(1, 1), (1, 2), (3, 1)], [])


@pytest.mark.parametrize("spec", ["", "  ", "{shards}/x.tar::", "::{shards}/x.tar"])
def test_an_empty_name_is_refused_not_read_as_the_current_folder(shards, monkeypatch, spec):
    monkeypatch.chdir(shards)  # a folder of tars: an empty name read as it would read them all
    with pytest.raises(ValueError, match="an empty tar name"):
        gpupipe.WebDataset(spec.format(shards=shards), cache_dir=shards / "c")
