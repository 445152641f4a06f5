"""A file where a folder or a list file is expected is named for what its bytes say it is, and
argument mistakes are reported in the loader's terms (its argument's name, not an internal class's)."""

import gzip
import io
import subprocess
import sys
import tarfile
import zipfile

import numpy as np
import pytest
from PIL import Image

import gpupipe
from gpupipe.errors import PathNotFound
from gpupipe.sources.sniff import NotAListFile, kind_of


def image_bytes(fmt):
    buf = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(buf, format=fmt)
    return buf.getvalue()


def tar_bytes():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("000.jpg")
        data = image_bytes("JPEG")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def zip_bytes():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("a.txt", "x")
    return buf.getvalue()


KINDS = {
    "a JPEG image": lambda: image_bytes("JPEG"),
    "a PNG image": lambda: image_bytes("PNG"),
    "a WebP image": lambda: image_bytes("WEBP"),
    "a GIF image": lambda: image_bytes("GIF"),
    "a BMP image": lambda: image_bytes("BMP"),
    "a TIFF image": lambda: image_bytes("TIFF"),
    "a tar archive": tar_bytes,
    "a zip archive": zip_bytes,
    "a gzip archive": lambda: gzip.compress(b"img/0.jpg 1\n"),
    "a binary file": lambda: b"\x00\x01\x02 some data",
}


@pytest.mark.parametrize("what", sorted(KINDS))
def test_a_file_is_named_by_its_bytes(what):
    assert kind_of(KINDS[what]()) == what


def test_text_lists_are_text_even_when_they_start_like_a_format():
    for text in (b"cats/000.jpg 0\n", b"BMW/001.jpg 3\nBMW/002.jpg 3\n", b"path,label\nGIF.jpg,1\n", "é/ü.jpg 1\n".encode()):
        assert kind_of(text) is None, text


@pytest.mark.parametrize("what", sorted(KINDS))
def test_the_loader_names_what_the_file_is(tmp_path, what):
    path = tmp_path / "data" / "cats" / "000.jpg"
    path.parent.mkdir(parents=True)
    path.write_bytes(KINDS[what]())
    with pytest.raises(NotAListFile) as info:
        gpupipe.loader(str(path), "train", batch_size=2)
    message = str(info.value)
    assert message.startswith(f"{path} is {what}, not a folder or a list file")
    assert isinstance(info.value, gpupipe.Error) and isinstance(info.value, ValueError)
    if what.endswith("image"):
        assert message.endswith(": pass the folder that holds the class folders")
    if what.endswith("archive"):
        assert "unpack it, or read WebDataset shards with gpupipe.sources.WebDataset" in message
    assert "\\udc" not in message and "expected 'path label'" not in message


def test_a_list_file_that_is_an_image_says_so(tmp_path):
    path = tmp_path / "list.txt"
    path.write_bytes(image_bytes("JPEG"))
    with pytest.raises(NotAListFile, match=r"list.txt is a JPEG image, not a list file \(text"):
        gpupipe.sources.FileList(path)


def test_a_real_list_file_still_loads(tmp_path, image_folder):
    listing = tmp_path / "train.txt"
    listing.write_text("".join(f"{p} {i % 3}\n" for i, p in enumerate(sorted(image_folder.rglob("*.jpg")))))
    assert len(gpupipe.sources.as_source(listing)) == 18


@pytest.mark.parametrize("command", [["gpupipe.pack", "{path}", "{out}"], ["gpupipe.bench", "--data", "{path}"]])
def test_the_commands_name_what_the_file_is(tmp_path, command):
    path = tmp_path / "cats" / "000.jpg"
    path.parent.mkdir()
    path.write_bytes(image_bytes("JPEG"))
    argv = [a.format(path=path, out=tmp_path / "out") for a in command]
    proc = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and last.endswith(
        f"{path} is a JPEG image, not a folder or a list file: pass the folder that holds the class folders")


@pytest.mark.parametrize("kwargs, message", [
    (dict(dtype="float"), "loader(dtype=...) must be one of ['bfloat16', 'float16', 'float32', 'uint8'], got 'float'"),
    (dict(channels_last="yes"), "loader(channels_last=...) must be a bool, got 'yes'"),
])
def test_loader_arguments_are_named_as_the_loader_takes_them(image_folder, kwargs, message):
    with pytest.raises(ValueError) as info:
        gpupipe.loader(image_folder, "train", batch_size=2, **kwargs)
    assert str(info.value) == message


def test_a_pipeline_that_is_no_pipeline_is_named(image_folder):
    with pytest.raises(ValueError, match=r"loader\(pipeline=\.\.\.\) must be a preset name or a list of ops, got 5"):
        gpupipe.loader(image_folder, 5, batch_size=2)


def test_a_webdataset_pattern_given_as_a_path_points_to_gpupipe_webdataset(tmp_path):
    for name in ("shard-{000..009}.tar", "shard-000.tar"):
        with pytest.raises(PathNotFound, match=r"does not exist: for the tars of a WebDataset, pass "
                                                       r"gpupipe\.WebDataset\("):
            gpupipe.loader(str(tmp_path / name), batch_size=2, backend="torchvision", device="cpu")
    with pytest.raises(PathNotFound, match=r"does not exist'?$"):
        gpupipe.loader(str(tmp_path / "photos"), batch_size=2, backend="torchvision", device="cpu")
