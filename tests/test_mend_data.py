"""Mending data-correctness leftovers (M1): EXIF orientations the header scan did not see, concatenated
tars, ``dir(gpupipe)``, the packer's Ctrl-C before any shard, a multi-label message; each test was failing
before its fix."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from helpers import CPU_BACKENDS
from PIL import Image
from exif_helpers import TURN, chunk, exif_block, jpeg_with_exif, png_with_exif, scene, turned_png
from wds_helpers import add, png

import gpupipe
from gpupipe.images import ImageRefused, decode_rgb, read_header
from gpupipe.targets.maskfiles import decode_mask

#: Where the decoders themselves are checked: the CPU backends here, DALI's GPU decoder on a GPU.
DECODING_BACKENDS = [*CPU_BACKENDS, pytest.param("dali", marks=pytest.mark.cuda, id="dali")]
# --- 1. a PNG's eXIf chunk after its pixels (allowed by PNG's third edition), and EXIF the decoders disagree on


def test_the_header_scan_sees_an_exif_chunk_after_the_pixels():
    image, _ = scene()
    data = turned_png(image, 6, after=True)
    assert decode_rgb(data).shape == (24, 40, 3)  # PIL reads the chunk after the pixels: turned upright
    header = read_header(io.BytesIO(data), 1 << 30)
    assert (header.orientation, header.oriented) == (6, (24, 40))


def test_a_jpeg_exif_segment_after_the_frame_header_is_seen():
    # PIL, torchvision and DALI all read an APP1 between the frame header and the scan.
    image, _ = scene()
    data = jpeg_with_exif(np.asarray(Image.fromarray(image).transpose(TURN[6])), ("after-frame", 6))
    assert decode_rgb(data).shape == (24, 40, 3)
    assert read_header(io.BytesIO(data), 1 << 30).oriented == (24, 40)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(png_with_exif(np.zeros((4, 6, 3), np.uint8), before=[6], after=[3]), id="png-6-then-3"),
        pytest.param(png_with_exif(np.zeros((4, 6, 3), np.uint8), before=[1], after=[6]), id="png-1-then-6"),
        pytest.param(png_with_exif(np.zeros((4, 6, 3), np.uint8), after=[None, 6]), id="png-none-then-6"),
        pytest.param(jpeg_with_exif(np.zeros((8, 16, 3), np.uint8), ("start", 1), ("start", 6)), id="jpeg-1-then-6"),
        pytest.param(jpeg_with_exif(np.zeros((8, 16, 3), np.uint8), ("start", 6), ("after-frame", 3)), id="jpeg-6-then-3"),
    ],
)
def test_exif_orientations_that_disagree_are_refused(data):
    # PIL takes one, DALI's parser another and its decoder a third: DALI gave scrambled pixels.
    with pytest.raises(ImageRefused, match="EXIF orientations"):
        read_header(io.BytesIO(data), 1 << 30)


def test_an_image_whose_exif_orientations_disagree_is_skipped_and_named(tmp_path):
    (tmp_path / "c").mkdir()
    Image.fromarray(np.zeros((6, 8, 3), np.uint8)).save(tmp_path / "c" / "good.png")
    (tmp_path / "c" / "bad.png").write_bytes(png_with_exif(np.zeros((6, 8, 3), np.uint8), before=[6], after=[8]))
    with pytest.raises(gpupipe.SampleError, match="bad.png"):
        gpupipe.loader(tmp_path, [gpupipe.Decode(), gpupipe.Resize((4, 4))], batch_size=1, backend="torchvision")
    loader = gpupipe.loader(
        tmp_path, [gpupipe.Decode(), gpupipe.Resize((4, 4))], batch_size=1, backend="torchvision", on_error="skip"
    )
    assert [Path(s.path).name for s in loader.skipped] == ["bad.png"]
    assert "EXIF orientations" in loader.skipped[0].reason
    assert len(list(loader)) == 1


def test_a_png_with_many_chunks_is_read_to_its_end(tmp_path):
    # Small IDAT chunks (8 KiB, libpng's default) put the eXIf chunk of a large PNG far from the start.
    image = np.random.default_rng(0).integers(0, 255, (300, 200, 3), np.uint8)
    data = turned_png(image, 6, after=True)
    body = data[8:]
    chunks, pos = [], 0
    while pos < len(body):
        length = int.from_bytes(body[pos : pos + 4], "big")
        kind, payload = body[pos + 4 : pos + 8], body[pos + 8 : pos + 8 + length]
        if kind == b"IDAT":
            chunks += [chunk(b"IDAT", payload[k : k + 100]) for k in range(0, len(payload), 100)]
        else:
            chunks.append(body[pos : pos + 12 + length])
        pos += 12 + length
    split = data[:8] + b"".join(chunks)
    assert len(chunks) > 1000
    assert decode_rgb(split).shape == (300, 200, 3)
    assert read_header(io.BytesIO(split), 1 << 30).oriented == (300, 200)


# --- 2. decode_mask reads the EXIF once


def test_decode_mask_reads_the_exif_once(monkeypatch):
    _, mask = scene()
    calls = []
    original = Image.Image.getexif

    def counted(self):
        calls.append(1)
        return original(self)

    monkeypatch.setattr(Image.Image, "getexif", counted)
    for where in ("before", "after"):
        calls.clear()
        assert np.array_equal(decode_mask(turned_png(mask, 6, **{where: True})), mask), where
        assert len(calls) == 1, where


# --- 3. concatenated tars (cat a.tar b.tar > c.tar)


def _wds_tar(path: Path, first: int, count: int) -> None:
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for k in range(first, first + count):
            add(tar, f"s{k:03d}.png", png(10 * k))
            add(tar, f"s{k:03d}.cls", str(k % 2).encode())


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_every_member_of_concatenated_tars_is_read(tmp_path, backend):
    _wds_tar(tmp_path / "a.tar", 0, 3)
    _wds_tar(tmp_path / "b.tar", 3, 2)
    joined = tmp_path / "joined" / "c.tar"
    joined.parent.mkdir()
    joined.write_bytes((tmp_path / "a.tar").read_bytes() + (tmp_path / "b.tar").read_bytes())
    source = gpupipe.WebDataset(joined, cache_dir=tmp_path / "cache")
    assert [n.rsplit("#", 1)[1] for n in source.names] == [f"s{k:03d}.png" for k in range(5)]
    assert source.problems == []
    loader = gpupipe.loader(
        source, [gpupipe.Decode(), gpupipe.Resize((4, 4))], batch_size=5, backend=backend, shuffle=False,
        dtype="uint8",
    )
    images, labels = next(iter(loader))
    assert labels.tolist() == [0, 1, 0, 1, 0]
    assert images[:, 0, 0, 0].tolist() == [0, 10, 20, 30, 40]


def test_data_after_a_tars_end_marker_that_is_no_tar_is_reported(tmp_path):
    _wds_tar(tmp_path / "a.tar", 0, 2)
    (tmp_path / "a.tar").write_bytes((tmp_path / "a.tar").read_bytes() + b"not a tar header".ljust(512, b"!"))
    source = gpupipe.WebDataset(tmp_path / "a.tar", cache_dir=tmp_path / "cache")
    assert len(source.names) == 2
    assert [(Path(p.path).name, "after the end marker" in p.reason) for p in source.problems] == [("a.tar", True)]


# --- 4. dir(gpupipe)


def test_dir_lists_the_lazily_imported_names():
    assert set(gpupipe.__all__) <= set(dir(gpupipe))
    assert {"loader", "Loader", "DataLoader", "__version__"} <= set(dir(gpupipe))


# --- 5. Ctrl-C while the packer lists its inputs

_INTERRUPTED_SCAN = """
import os, runpy, signal, sys
import gpupipe.sources.files as files

real = os.scandir
def scandir(path):  # the listing is under way when Ctrl-C comes
    os.kill(os.getpid(), signal.SIGINT)
    return real(path)
files.os = type(sys)("os_during_listing")
files.os.__dict__.update(os.__dict__)
files.os.scandir = scandir
sys.argv = ["gpupipe.pack", sys.argv[1], sys.argv[2]]
runpy.run_module("gpupipe.pack", run_name="__main__")
"""


def test_ctrl_c_while_the_packer_lists_its_inputs_says_nothing_was_written(tmp_path):
    (tmp_path / "src" / "c").mkdir(parents=True)
    Image.fromarray(np.zeros((6, 8, 3), np.uint8)).save(tmp_path / "src" / "c" / "a.png")
    dst = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_SCAN, str(tmp_path / "src"), str(dst)],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert done.returncode == 128 + signal.SIGINT, done.stderr
    assert "Traceback" not in done.stderr
    assert "nothing was written" in done.stderr and "run the same command again" in done.stderr
    assert "finished shards are kept" not in done.stderr
    assert not dst.exists() or not any(dst.iterdir())


# --- 6. the message naming a multi-label FileList's too-large label


def test_a_multi_label_lists_too_large_label_names_its_file_and_value(tmp_path):
    entries = [(str(tmp_path / "a.jpg"), [0, 1]), (str(tmp_path / "b.jpg"), [2, 50_000_000])]
    with pytest.raises(ValueError) as raised:
        gpupipe.FileList(entries)
    message = str(raised.value)
    assert "50000000" in message and "b.jpg" in message
    assert "a label" not in message


# --- the packer reads an image's orientation by the scan's rule


def test_the_packer_refuses_exif_orientations_that_disagree():
    from gpupipe.pack.convert import ConvertSettings, convert_image

    for data in (jpeg_with_exif(np.zeros((8, 16, 3), np.uint8), ("start", 1), ("start", 6)),
                 png_with_exif(np.zeros((4, 6, 3), np.uint8), before=[6], after=[3])):
        with pytest.raises(ImageRefused, match="EXIF orientations"):
            convert_image(data, ConvertSettings())


@pytest.mark.parametrize("where", ["after", "before"])
def test_the_packer_turns_a_png_upright_wherever_its_exif_chunk_lies(where):
    from gpupipe.pack.convert import ConvertSettings, convert_image

    image, _ = scene()
    jpeg, decoded, written, copied = convert_image(turned_png(image, 6, **{where: True}), ConvertSettings())
    assert decoded == written == (40, 24) and not copied
    packed = np.asarray(Image.open(io.BytesIO(jpeg)).convert("L")).astype(int)
    assert packed.shape == (24, 40)
    assert packed[4:8, 5:13].min() > 200 and packed[12:, 20:].max() < 60  # the rectangle where it is displayed


def test_the_packer_does_not_copy_a_jpeg_whose_late_exif_segment_turns_it():
    from gpupipe.pack.convert import ConvertSettings, convert_image

    image, _ = scene()
    stored = np.asarray(Image.fromarray(image).transpose(TURN[6]))
    jpeg, decoded, written, copied = convert_image(jpeg_with_exif(stored, ("after-frame", 6)), ConvertSettings())
    assert decoded == written == (40, 24) and not copied
    assert Image.open(io.BytesIO(jpeg)).size == (40, 24)


def test_the_scan_reads_a_pngs_end_not_each_of_its_pixel_chunks():
    """A photo's pixels come in hundreds of IDAT chunks: the scan reads the chunks before them and the file's
    end (where an eXIf chunk after the pixels lies), not one header per chunk (the whole file on cold storage)."""
    from gpupipe.images import header_at

    noise = np.random.default_rng(0).integers(0, 256, (64, 80, 3), dtype=np.uint8)  # ~15 KB compressed
    data = turned_png(noise, 6, after=True)
    body, pos, parts = data[8:], 0, [data[:8]]
    while pos < len(body):  # the pixels in chunks of 64 bytes: hundreds of them
        length, kind = int.from_bytes(body[pos : pos + 4], "big"), body[pos + 4 : pos + 8]
        payload = body[pos + 8 : pos + 8 + length]
        parts += [chunk(b"IDAT", payload[k : k + 64]) for k in range(0, len(payload), 64)] if kind == b"IDAT" else \
            [body[pos : pos + 12 + length]]
        pos += 12 + length
    split = b"".join(parts)
    reads = []

    def read_at(offset, size):
        reads.append(offset)
        return split[offset : offset + size]

    header = header_at(read_at, lambda: io.BytesIO(split), 1 << 30, len(split))
    assert header.oriented == (64, 80) and len(parts) > 100
    assert len(reads) <= 4, len(reads)
    walked = []
    assert header_at(lambda o, n: walked.append(o) or split[o : o + n], lambda: io.BytesIO(split), 1 << 30) == header
    assert len(walked) > 100  # without the length, every chunk is walked: the same answer


def test_four_letters_in_a_pngs_end_are_no_exif_chunk_without_their_crc():
    from gpupipe.images import header_at

    image, _ = scene()
    data = png_with_exif(image)
    fake = b"\x00\x00\x00\x0ceXIf" + exif_block(6)[:12] + b"\x00\x00\x00\x00"  # a wrong CRC
    end = data.rindex(b"IEND") - 4
    data = data[:end] + chunk(b"tEXt", b"note\x00" + fake) + data[end:]
    header = header_at(lambda o, n: data[o : o + n], lambda: io.BytesIO(data), 1 << 30, len(data))
    assert header.orientation == 1 and header.oriented == (24, 40)
