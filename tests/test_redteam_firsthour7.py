"""Red team (firsthour7): a newcomer's own folders, read directly and through ``python -m gpupipe.pack``.

JPEG codings and depths cameras, scanners and old tools write (arithmetic coding, 4:1:1 / 4:4:0 / 4:1:0
chroma, RGB-coded, 12-bit, hierarchical), RLE-compressed BMPs, 16-bit PNGs with alpha, lossy WebP with
alpha; file names with spaces, newlines, leading dashes and unicode, very long paths, link loops, dangling
links, unreadable files and folders; a disk that fills up while packing. Each is read as PIL (torchvision's
``ImageFolder``) reads it on every CPU backend and in packs, or refused naming the file and why, alike.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from decode_quirks import H, W, encoded
from exif_helpers import chunk
from helpers import CPU_BACKEND_NAMES, textured_image
from PIL import Image
from test_redteam_decode import decode_all, reference

from gpupipe.images import ImageRefused, read_header
from gpupipe.pack import PackError, PackSettings, pack, verify
from gpupipe.pack.journal import write_whole

ROOT = Path(__file__).resolve().parents[1]
NO_DECODER = "no decoder gpupipe or PIL uses reads it; convert it to an 8-bit JPEG or a PNG"


def rgb_image() -> np.ndarray:
    return textured_image(np.random.default_rng(7), H, W)


def sof_changed(jpeg: bytes, marker: int, precision: int = 8) -> bytes:
    """A baseline JPEG whose frame header says another process (``marker``) or sample ``precision``, as a
    12-bit (extended, ``SOF1``) or hierarchical (``SOF5``) JPEG's does."""
    data = bytearray(jpeg)
    at = data.find(b"\xff\xc0")
    data[at + 1], data[at + 4] = marker, precision
    return bytes(data)


def png_raw(values: np.ndarray, colour: int) -> bytes:
    """A 16-bit PNG of colour type ``colour`` (4: gray and alpha, 6: RGBA), written by hand (PIL writes neither)."""
    rows = values.reshape(values.shape[0], -1).astype(">u2")
    raw = b"".join(b"\x00" + row.tobytes() for row in rows)
    ihdr = struct.pack(">IIBBBBB", values.shape[1], values.shape[0], 16, colour, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def rle8_bmp(img: Image.Image) -> bytes:
    """An 8-bit BMP compressed with run lengths (``BI_RLE8``), as Windows tools write one."""
    pal = img.quantize(200)
    idx, palette = np.asarray(pal), (pal.getpalette() or []) + [0] * 768
    body = bytearray()
    for row in idx[::-1]:  # bottom row first
        c = 0
        while c < len(row):
            n = 1
            while c + n < len(row) and n < 255 and row[c + n] == row[c]:
                n += 1
            body += bytes([n, row[c]])
            c += n
        body += b"\x00\x00"  # end of line
    body += b"\x00\x01"  # end of bitmap
    colours = b"".join(bytes([palette[3 * i + 2], palette[3 * i + 1], palette[3 * i], 0]) for i in range(256))
    offset = 14 + 40 + len(colours)
    info = struct.pack("<IiiHHIIiiII", 40, img.width, img.height, 1, 8, 1, len(body), 2835, 2835, 256, 0)
    return b"BM" + struct.pack("<IHHI", offset + len(body), 0, 0, offset) + info + colours + bytes(body)


def lossless_jpeg(pixels: np.ndarray) -> bytes:
    """A lossless JPEG (``SOF3``, predictor 1: the sample to the left; above, in the first column) of ``(H, W)``
    gray or ``(H, W, 3)`` pixels, Huffman-coded by hand (one table: categories 0..16, 5-bit codes)."""
    x = (pixels if pixels.ndim == 3 else pixels[..., None]).astype(np.int64)
    h, w, comps = x.shape
    pred = np.empty_like(x)
    pred[0, 0], pred[0, 1:], pred[1:, 0], pred[1:, 1:] = 128, x[0, :-1], x[:-1, 0], x[1:, :-1]
    bits = []
    for d in (x - pred).ravel().tolist():  # interleaved: each pixel's components in turn
        size = abs(d).bit_length()
        bits.append(format(size, "05b") + (format(d if d > 0 else d + (1 << size) - 1, f"0{size}b") if size else ""))
    stream = "".join(bits)
    stream += "1" * (-len(stream) % 8)
    coded = bytes(int(stream[i : i + 8], 2) for i in range(0, len(stream), 8)).replace(b"\xff", b"\xff\x00")

    def segment(marker: int, body: bytes) -> bytes:
        return bytes([0xFF, marker]) + struct.pack(">H", len(body) + 2) + body

    dht = bytes([0, 0, 0, 0, 0, 17] + [0] * 11) + bytes(range(17))
    sof = struct.pack(">BHHB", 8, h, w, comps) + b"".join(bytes([c + 1, 0x11, 0]) for c in range(comps))
    sos = bytes([comps]) + b"".join(bytes([c + 1, 0]) for c in range(comps)) + bytes([1, 0, 0])
    return b"\xff\xd8" + segment(0xC4, dht) + segment(0xC3, sof) + segment(0xDA, sos) + coded + b"\xff\xd9"


def cjpeg(ppm: bytes, *args: str) -> bytes:
    return subprocess.run(["cjpeg", "-quality", "95", *args], input=ppm, capture_output=True, check=True).stdout


def read_alike(rgb: np.ndarray) -> dict[str, bytes]:
    """Files PIL reads that every backend and the packer must read as PIL does (48x64)."""
    img = Image.fromarray(rgb)
    half = np.full((H, W), 128, np.uint8)
    files = {
        "rle8.bmp": rle8_bmp(img),
        "rgba16.png": png_raw(np.dstack([rgb.astype(np.uint16) * 257, np.full((H, W), 40000, np.uint16)]), 6),
        "la16.png": png_raw(np.dstack([rgb[..., 0].astype(np.uint16) * 257, np.full((H, W), 9, np.uint16)]), 4),
        "alpha_lossy.webp": encoded(Image.fromarray(np.dstack([rgb, half]), "RGBA"), "WEBP", quality=90),
        "gray2.png": encoded(Image.fromarray((rgb[..., 0] // 64 * 85).astype(np.uint8)), "PNG", bits=2),
        "UPPER.JPG": encoded(img, "JPEG", quality=95),
        "Mixed.Jpeg": encoded(img, "JPEG", quality=95),
        "jpeg_as.png": encoded(img, "JPEG", quality=95),
        "jpeg_as.bmp": encoded(img, "JPEG", quality=95),
    }
    if shutil.which("cjpeg"):  # libjpeg-turbo's encoder writes what PIL's cannot
        ppm = encoded(img, "PPM")
        files |= {
            "arithmetic.jpg": cjpeg(ppm, "-arithmetic"),
            "arithmetic_progressive.jpg": cjpeg(ppm, "-arithmetic", "-progressive"),
            "sub411.jpg": cjpeg(ppm, "-sample", "4x1"),
            "sub440.jpg": cjpeg(ppm, "-sample", "1x2"),
            "sub410.jpg": cjpeg(ppm, "-sample", "4x2"),
            "rgb_coded.jpg": cjpeg(ppm, "-rgb"),
        }
    return files


def no_decoder(rgb: np.ndarray) -> dict[str, bytes]:
    jpeg = encoded(Image.fromarray(rgb), "JPEG", quality=95)
    return {"twelve_bit.jpg": sof_changed(jpeg, 0xC1, 12), "hierarchical.jpg": sof_changed(jpeg, 0xC5)}


def lossless(rgb: np.ndarray) -> dict[str, bytes]:
    """Lossless JPEGs, which PIL reads and the loaders' decoders do not (the packer converts them)."""
    return {"lossless_gray.jpg": lossless_jpeg(rgb[..., 1]), "lossless_rgb.jpg": lossless_jpeg(rgb)}


LOSSLESS = "a lossless JPEG: the loaders' decoders do not read it; python -m gpupipe.pack converts it"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("own")
    rgb = rgb_image()
    files = {**read_alike(rgb), **no_decoder(rgb), **lossless(rgb)}
    (root / "data" / "photos").mkdir(parents=True)
    for name, data in files.items():
        (root / "data" / "photos" / name).write_bytes(data)
    pack(root / "data", root / "packed", workers=1, progress=False)
    return root, files


def test_jpegs_no_decoder_reads_are_what_the_test_says():
    # The two forged files are what PIL (torchvision's ImageFolder) cannot read: no test of a file PIL reads.
    for name, data in no_decoder(rgb_image()).items():
        with pytest.raises((OSError, SyntaxError, ValueError)):
            reference(data)
        assert name
    rgb = rgb_image()  # and the lossless JPEGs written here are what PIL reads, sample for sample
    assert np.array_equal(reference(lossless(rgb)["lossless_rgb.jpg"]), rgb)
    assert np.array_equal(reference(lossless(rgb)["lossless_gray.jpg"]), np.repeat(rgb[..., 1:2], 3, axis=2))


@pytest.mark.parametrize("backend", CPU_BACKEND_NAMES)
def test_12_bit_hierarchical_and_lossless_jpegs_are_refused_by_the_scan_naming_why(folder, backend):
    # Before: the scan passed both; a 12-bit JPEG failed mid-epoch ("cannot decode: Unsupported JPEG data
    # precision 12" on torchvision, "DALI's decoder refused it" on dali-cpu), after the loader was built.
    root, _ = folder
    _, skipped = decode_all(root / "data", backend)  # asserts every refusal is known when the loader is built
    assert skipped == {
        "twelve_bit.jpg": f"a 12-bit JPEG: {NO_DECODER}",
        "hierarchical.jpg": f"a hierarchical JPEG (frame marker 0xC5): {NO_DECODER}",
        # Before: read by the scan, then "cannot decode: Unsupported color conversion request" (torchvision) and
        # "DALI's decoder refused it" (dali-cpu) mid-epoch, where torchvision's ImageFolder (PIL) reads them.
        "lossless_gray.jpg": LOSSLESS,
        "lossless_rgb.jpg": LOSSLESS,
    }


def test_the_packer_gives_the_same_reason_for_a_jpeg_no_decoder_reads(folder):
    # Before: the pack's manifest said "not an image (unrecognised format)" for the 12-bit JPEG.
    root, _ = folder
    manifest = json.loads((root / "packed" / "manifest.json").read_text())
    assert {Path(s["path"]).name: s["reason"] for s in manifest["skipped"]} == {
        "twelve_bit.jpg": f"a 12-bit JPEG: {NO_DECODER}",
        "hierarchical.jpg": f"a hierarchical JPEG (frame marker 0xC5): {NO_DECODER}",
    }
    with pytest.raises(ImageRefused, match="12-bit JPEG"):
        read_header(open(root / "data" / "photos" / "twelve_bit.jpg", "rb"), 10**8)  # noqa: SIM115


@pytest.mark.parametrize("backend", CPU_BACKEND_NAMES)
def test_codings_pil_reads_are_read_as_pil_reads_them_on_every_backend(folder, backend):
    root, files = folder
    images, _ = decode_all(root / "data", backend)
    for name in read_alike(rgb_image()):
        assert name in images, name
        assert np.array_equal(images[name], reference(files[name])), name


@pytest.mark.parametrize("backend", CPU_BACKEND_NAMES)
def test_codings_pil_reads_are_packed_with_their_pixels(folder, backend):
    root, files = folder
    images, skipped = decode_all(root / "packed", backend)
    assert skipped == {}
    # Lossless JPEGs re-encoded (before: an RGB one was copied as it was, and failed in every loader of the pack)
    for name in [*read_alike(rgb_image()), *lossless(rgb_image())]:  # JPEGs: 8x8 block means within 3 levels
        blocks = (images[name].astype(float) - reference(files[name])).reshape(6, 8, 8, 8, 3).mean((1, 3))
        assert np.abs(blocks).mean() < 3.0, (name, np.abs(blocks).mean())


def test_a_disk_filling_up_says_to_free_space_and_rerun(tmp_path):
    # A write refused with ENOSPC (the kernel's /dev/full refuses every write so) under a file the packer writes.
    # Before: "cannot write PATH: No space left on device", and nothing said what to do next.
    target = tmp_path / "manifest.json"
    (tmp_path / "manifest.json.tmp").symlink_to("/dev/full")
    with pytest.raises(PackError) as caught:
        write_whole(target, "{}" * 10_000)
    assert str(caught.value) == (
        f"cannot write {target}: No space left on device; free space on that disk and run the same command again: "
        "it goes on after the last finished shard (or pack into a folder on a disk with room)"
    )
    assert not target.exists() and not (tmp_path / "manifest.json.tmp").exists()


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir(exist_ok=True)
    if not shutil.which("mount") or os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    return done.returncode == 0


def test_a_pack_onto_a_full_disk_stops_on_one_line_and_resumes_when_there_is_room(tmp_path):
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "200k"):
        pytest.skip("cannot mount a small tmpfs here (not root, or no mount permission)")
    try:
        src = tmp_path / "src"
        rng = np.random.default_rng(0)
        for c in ("a", "b"):
            (src / c).mkdir(parents=True)
            for i in range(16):
                Image.fromarray(rng.integers(0, 255, (96, 128, 3), dtype=np.uint8)).save(src / c / f"{i}.jpg")
        command = [sys.executable, "-m", "gpupipe.pack", str(src), str(disk / "out"), "-q", "--shard-size", "64KB"]
        full = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert full.returncode == 2
        assert full.stderr.startswith("error: cannot write ")  # into the folder, or one of its files
        assert full.stderr.count("\n") == 1 and str(disk / "out") in full.stderr
        assert full.stderr.endswith(
            ": No space left on device; free space on that disk and run the same command again: it goes on after "
            "the last finished shard (or pack into a folder on a disk with room)\n"
        )
        assert not list((disk / "out").glob("*.tmp"))
        subprocess.run(["mount", "-o", "remount,size=4m", str(disk)], check=True)
        again = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert again.returncode == 0, again.stderr
        assert "resumed after" in again.stdout
        assert verify(disk / "out") == []
        pack(src, tmp_path / "whole", PackSettings(shard_size=64 * 1024), workers=1, progress=False)
        for name in ("manifest.json", "sources.tsv", "shard-000000.tar"):
            assert (disk / "out" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


#: File names a user's folders hold: spaces, leading dashes (read as flags by a shell), unicode, a newline, a
#: tab, a backslash, a question mark, upper- and mixed-case extensions.
NAMES = (
    "a b.jpg",
    "-rf.jpg",
    "--help.png",
    "ünï cödé.jpg",
    "new\nline.jpg",
    "tab\there.png",
    "back\\slash.jpg",
    "what?.jpg",
    "SHOUT.JPG",
    "m.Jpeg",
)


def named_folder(root: Path) -> dict[str, np.ndarray]:
    """``root/cat/<NAMES>`` and ``root/dog/<long path>/...``: ``{path: (h, w, 3) pixels}``."""
    rng, made = np.random.default_rng(3), {}
    deep = root / "dog" / ("x" * 200) / ("y" * 200) / ("z" * 200)  # a path of 1,000+ characters
    deep.mkdir(parents=True)
    (root / "cat").mkdir()
    for path in [root / "cat" / n for n in NAMES] + [deep / ("w" * 240 + ".jpg"), root / "dog" / "0.png"]:
        rgb = textured_image(rng, 32, 40)
        Image.fromarray(rgb).save(path, "PNG" if path.suffix == ".png" else "JPEG", quality=95)
        made[str(path)] = reference(path.read_bytes())
    return made


@pytest.mark.parametrize("backend", CPU_BACKEND_NAMES)
def test_odd_file_names_and_long_paths_are_read_as_imagefolder_reads_them(tmp_path, backend):
    import torchvision

    import gpupipe
    from gpupipe.ops import CenterCrop, Decode, Output

    made = named_folder(tmp_path / "data")
    theirs = torchvision.datasets.ImageFolder(str(tmp_path / "data"))
    loader = gpupipe.loader(
        tmp_path / "data",
        [Decode(), CenterCrop(size=(32, 40)), Output(dtype="uint8")],
        backend=backend,
        batch_size=1,
        shuffle=False,
        num_threads=1,
    )
    assert [(p, int(y)) for p, y in zip(loader.source.paths, loader.source.labels)] == theirs.samples
    for (path, label), (images, labels) in zip(theirs.samples, loader):
        assert int(labels[0]) == label
        assert np.array_equal(images[0].permute(1, 2, 0).numpy(), made[path]), path
    assert loader.skipped == []


_READ_ALL = """
import json, sys
from pathlib import Path
import gpupipe
from gpupipe.ops import CenterCrop, Decode, Output
from gpupipe.pack import pack
root, out = Path(sys.argv[1]), {}
for backend in sys.argv[3:]:
    loader = gpupipe.loader(root / "data", [Decode(), CenterCrop(size=(32, 40)), Output(dtype="uint8")],
                            backend=backend, batch_size=2, shuffle=False, on_error="skip", num_threads=1)
    out[backend] = [sum(len(b[1]) for b in loader), {Path(s.path).name: s.reason for s in loader.skipped}]
try:  # on_error="raise", the default: refused, naming every file and folder
    gpupipe.loader(root / "data", "val", backend=sys.argv[3], batch_size=2)
except gpupipe.SampleError as err:
    out["raised"] = str(err)
pack(root / "data", root / sys.argv[2], workers=1, progress=False)
manifest = json.loads((root / sys.argv[2] / "manifest.json").read_text())
out["pack"] = [manifest["totals"]["samples"], {Path(s["path"]).name: s["reason"] for s in manifest["skipped"]}]
print(json.dumps(out))
"""


def test_link_loops_dangling_links_and_unreadable_files_and_folders_are_named_never_followed_or_lost(tmp_path):
    # Run without the right to read what its mode forbids (root: DAC override dropped), as a user runs it.
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: a chmod 000 file stays readable")
    caps = "-dac_override,-dac_read_search"
    prefix = ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}"] if os.geteuid() == 0 else []
    rng = np.random.default_rng(5)
    for path in ["cat/1.jpg", "cat/2.jpg", "dog/1.jpg", "dog/locked.jpg", "dog/shut/in.jpg"]:
        (tmp_path / "data" / path).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(textured_image(rng, 32, 40)).save(tmp_path / "data" / path, quality=95)
    (tmp_path / "data" / "dog" / "loop").symlink_to("..")  # back to data/: every class again, for ever
    (tmp_path / "data" / "dog" / "dangling.jpg").symlink_to("moved-away.jpg")
    (tmp_path / "data" / "dog" / "empty.jpg").write_bytes(b"")
    (tmp_path / "data" / "dog" / "locked.jpg").chmod(0)
    (tmp_path / "data" / "dog" / "shut").chmod(0)
    try:
        done = subprocess.run(
            [*prefix, sys.executable, "-c", _READ_ALL, str(tmp_path), "packed", *CPU_BACKEND_NAMES],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=ROOT,
        )
    finally:
        (tmp_path / "data" / "dog" / "shut").chmod(0o755)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.splitlines()[-1])
    bad = {
        "dangling.jpg": "cannot read: No such file or directory",
        "empty.jpg": "empty file (0 bytes)",
        "locked.jpg": "cannot read: Permission denied",
        # Before: only a warning named it; its images were in no skipped list, and missing from the manifest's.
        "shut": "cannot list the folder: Permission denied; its images are left out",
    }
    for where in [*CPU_BACKEND_NAMES, "pack"]:
        assert got[where] == [3, bad], where
    assert "link loop" in done.stderr
    assert all(f"{tmp_path / 'data' / 'dog' / name}: {why}" in got["raised"] for name, why in bad.items())


def test_a_file_skipped_while_it_was_being_written_is_not_kept_out_by_the_rerun(tmp_path):
    # A folder packed while a copy into it was under way: the half-written file is skipped as truncated. Before:
    # the same command run again once the copy was done said "resumed after 1 finished shard" and kept it out,
    # its reason still "truncated". Now the rerun names the file and what to do; a fresh pack includes it.
    rng = np.random.default_rng(9)
    (tmp_path / "data" / "a").mkdir(parents=True)
    for i in range(3):
        Image.fromarray(textured_image(rng, 32, 40)).save(tmp_path / "data" / "a" / f"{i}.jpg", quality=95)
    whole = encoded(Image.fromarray(textured_image(rng, 32, 40)), "JPEG", quality=95)
    growing = tmp_path / "data" / "a" / "copying.jpg"
    growing.write_bytes(whole[:-20])  # its last bytes not there yet
    dst = tmp_path / "packed"
    assert pack(tmp_path / "data", dst, workers=1, progress=False).skipped == 1
    assert pack(tmp_path / "data", dst, workers=1, progress=False).skipped == 1  # nothing changed: the same pack
    growing.write_bytes(whole)
    with pytest.raises(PackError) as caught:
        pack(tmp_path / "data", dst, workers=1, progress=False)
    assert str(caught.value) == (
        f"{growing} was skipped by the earlier run (truncated JPEG (no end-of-image marker)) and has changed since "
        f"(a file still being written then?): to pack it, delete {dst} and run the command again (or pack into a "
        "new folder)"
    )
    shutil.rmtree(dst)
    assert pack(tmp_path / "data", dst, workers=1, progress=False).packed == 4


def test_the_next_command_printed_for_a_folder_with_spaces_or_a_dash_is_one_word_to_paste(tmp_path):
    # Before: "next: python -m gpupipe.bench --data my packs/out" (the shell splits it in two), and "--data -out"
    # (read as a flag); the demo's "python examples/train_imagefolder.py my demo" alike.
    import shlex

    from gpupipe.demo.__main__ import next_step as demo_next
    from gpupipe.pack.__main__ import next_step as pack_next

    (tmp_path / "my photos" / "a").mkdir(parents=True)
    Image.fromarray(textured_image(np.random.default_rng(1), 32, 40)).save(tmp_path / "my photos" / "a" / "1.jpg")
    for dst in ("my packs/out", "-out"):
        done = subprocess.run(
            [sys.executable, "-m", "gpupipe.pack", "-q", "--", "my photos", dst],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        words = shlex.split(done.stdout.splitlines()[-1].split(";")[0])
        assert words[:4] == ["next:", "python", "-m", "gpupipe.bench"] and words[4] == "--data", words
        assert (tmp_path / words[5]).resolve() == (tmp_path / dst).resolve() and not words[5].startswith("-")
        assert done.stdout.splitlines()[-1] == pack_next(dst, 1)
    words = shlex.split(demo_next("segmentation", Path("my demo"), ROOT / "examples").removeprefix("next: "))
    assert words == ["python", "examples/train_segmentation.py", "my demo/images", "my demo/masks"]


def test_more_workers_than_cpus_or_inputs_packs_without_forking_a_process_per_worker(tmp_path):
    # Before: --workers 512 for 3 images forked 512 processes (on any machine: a pool of that size).
    rng = np.random.default_rng(2)
    (tmp_path / "data" / "a").mkdir(parents=True)
    for i in range(3):
        Image.fromarray(textured_image(rng, 32, 40)).save(tmp_path / "data" / "a" / f"{i}.jpg", quality=95)
    script = (
        "import sys, concurrent.futures as cf; from gpupipe.pack import pack\n"
        "sizes = []; init = cf.ProcessPoolExecutor.__init__\n"
        "def counted(self, max_workers=None, *a, **k): sizes.append(max_workers); init(self, max_workers, *a, **k)\n"
        "cf.ProcessPoolExecutor.__init__ = counted\n"
        "summary = pack(sys.argv[1], sys.argv[2], workers=512, progress=False)\n"
        "print(summary.packed, sizes)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "data"), str(tmp_path / "packed")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "3 [3]"
    assert verify(tmp_path / "packed") == []
