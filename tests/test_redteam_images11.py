"""Red team (images11): image files as users have them, read by every CPU backend as torchvision's ImageFolder reads
them (``PIL.Image.open(path).convert("RGB")``), or refused by the scan on every backend alike, named with why.

Each file is generated here (48x64). Arithmetic-coded JPEGs, RLE8 BMPs and odd chroma subsampling are held by
``test_redteam_firsthour7.py``; EXIF, CMYK, 16-bit PNGs, GIFs and multi-page TIFFs by ``test_redteam_decode.py``.
"""

from __future__ import annotations

import io
import json
import struct
import tarfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from decode_quirks import H, W, encoded
from helpers import CPU_BACKEND_NAMES, DECODE_TOLERANCE, needs_dali, textured_image
from PIL import Image, ImageCms

import gpupipe
from gpupipe.ops import CenterCrop, Decode, Output
from gpupipe.pack import pack

#: Levels a backend may differ from PIL on a file (every other file: identical pixels): a palette TIFF's colour map
#: holds 16-bit entries, and a 16-bit RGB TIFF 16-bit samples, which DALI rounds to 8 bits where PIL keeps their high
#: byte.
LEVELS = {"tiff_palette_as.jpg": 1, "tiff_rgb16_as.jpg": 1}
#: Why the scan refuses each file on every backend (``python -m gpupipe.pack`` converts each as PIL reads it).
REFUSED = {
    "apng_default_apart.png": "an animated PNG whose default image is not one of its frames: PIL and torchvision "
    "read the default image, DALI the first frame; python -m gpupipe.pack converts it as PIL reads it",
    "apng_partial.png": "an animated PNG whose first frame is not the whole image (against the standard): PIL fails "
    "on it, DALI reads it; save it again as a PNG",
    "tiff_bilevel_as.jpg": "a bilevel (1-bit) TIFF without a BitsPerSample tag: DALI's decoder fails on it; python -m "
    "gpupipe.pack converts it as PIL reads it",
    "tiff_la_as.jpg": "a TIFF of LA pixels: DALI's decoder reads it other than PIL does; python -m gpupipe.pack "
    "converts it as PIL reads it",
    "tiff_lab_as.jpg": "a TIFF of LAB pixels: DALI's decoder reads it other than PIL does; python -m gpupipe.pack "
    "converts it as PIL reads it",
    "rgb555.bmp": "a 16-bit BMP: DALI's decoder reads it other than PIL does; python -m gpupipe.pack converts it "
    "as PIL reads it",
    "rgb565.bmp": "a 16-bit BMP: DALI's decoder reads it other than PIL does; python -m gpupipe.pack converts it "
    "as PIL reads it",
    "rle4.bmp": "a run-length coded (RLE4) BMP: DALI's decoder reads it other than PIL does; python -m gpupipe.pack "
    "converts it as PIL reads it",
    "tiff_gray4_as.jpg": "a TIFF of 4-bit samples: DALI's decoder fails on it; python -m gpupipe.pack converts it as "
    "PIL reads it",
    "tiff_planar_as.jpg": "a TIFF of colour planes stored apart (PlanarConfiguration 2): DALI's decoder mixes them up; "
    "python -m gpupipe.pack converts it as PIL reads it",
    "maxval15_as.pgm.jpg": "a PNM of maxval 15: DALI's decoder does not scale it as PIL does; python -m gpupipe.pack "
    "converts it as PIL reads it",
    "maxval4095_as.ppm.jpg": "a PNM of maxval 4095: DALI's decoder does not scale it as PIL does; python -m "
    "gpupipe.pack converts it as PIL reads it",
}


def bmp(bits: int, rows: list[bytes], compression: int = 0, extra: bytes = b"", core: bool = False) -> bytes:
    """A BMP of ``W`` x ``H`` pixels written by hand (PIL writes no 16-bit, RLE or OS/2 one): ``rows`` bottom row
    first, each padded to 4 bytes (unless run-length coded); ``extra``: its bit masks or palette."""
    data = b"".join(row + b"\0" * (-len(row) % 4 if compression in (0, 3) else 0) for row in rows)  # RLE: unpadded
    if core:  # OS/2's 12-byte header
        header = struct.pack("<IHHHH", 12, W, H, 1, bits)
    else:
        header = struct.pack("<IiiHHIIiiII", 40, W, H, 1, bits, compression, len(data), 2835, 2835, 0, 0)
    start = 14 + len(header) + len(extra)
    return b"BM" + struct.pack("<IHHI", start + len(data), 0, 0, start) + header + extra + data


def tiff(data: bytes, bits: int, samples: int, planar: int = 1) -> bytes:
    """An uncompressed little-endian TIFF of ``W`` x ``H`` in one strip, ``samples`` per pixel of ``bits`` each
    (gray or RGB), written by hand (PIL writes no 16-bit RGB, 4-bit or planar TIFF)."""
    body = data + b"\0" * (len(data) & 1)
    count = 10 if planar == 2 else 9
    bits_at = 8 + len(body) + 2 + 12 * count + 4  # the BitsPerSample values, after the directory
    tags = {256: (3, 1, W), 257: (3, 1, H), 258: (3, samples, bits if samples == 1 else bits_at), 259: (3, 1, 1)}
    tags.update({262: (3, 1, 2 if samples == 3 else 1), 273: (4, 1, 8), 277: (3, 1, samples), 278: (3, 1, H)})
    tags.update({279: (4, 1, len(data)), **({284: (3, 1, planar)} if planar == 2 else {})})
    entries = b"".join(
        struct.pack("<HHI", tag, kind, n) + (struct.pack("<HH", v, 0) if kind == 3 and n == 1 else struct.pack("<I", v))
        for tag, (kind, n, v) in sorted(tags.items())
    )
    directory = struct.pack("<H", count) + entries + b"\0" * 4
    return (
        b"II*\0" + struct.pack("<I", 8 + len(body)) + body + directory + struct.pack(f"<{samples}H", *[bits] * samples)
    )


def first_frame_resized(apng: bytes, width: int, height: int) -> bytes:
    """``apng`` with its first frame control (``fcTL``) claiming ``width`` x ``height``, its CRC made good."""
    data = bytearray(apng)
    at = data.find(b"fcTL")
    data[at + 8 : at + 16] = struct.pack(">II", width, height)
    data[at + 30 : at + 34] = struct.pack(">I", zlib.crc32(bytes(data[at : at + 30])))  # fcTL holds 26 bytes
    return bytes(data)


def pnm(magic: bytes, maxval: int, values: np.ndarray) -> bytes:
    """A binary PGM (``P5``, ``(H, W)``) or PPM (``P6``, ``(H, W, 3)``) of ``maxval``, a comment in its header."""
    body = values.astype(">u2" if maxval > 255 else np.uint8).tobytes()
    return b"%s\n# written by hand\n%d %d\n%d\n" % (magic, W, H, maxval) + body


def formats(rgb: np.ndarray) -> dict[str, bytes]:
    """Files every backend must read as PIL reads them (48x64)."""
    img = Image.fromarray(rgb)
    alpha = np.tile(np.linspace(0, 255, W, dtype=np.uint8), (H, 1))
    alpha[:, :8] = 0  # fully transparent, over colour that is kept
    rgba = Image.fromarray(np.dstack([rgb, alpha]), "RGBA")
    other = [Image.fromarray(255 - rgb), Image.fromarray(rgb[::-1].copy())]
    xyz = ImageCms.ImageCmsProfile(ImageCms.createProfile("XYZ")).tobytes()  # far from sRGB: applied, it shows
    palette = img.quantize(16)
    nibbles = rgb[..., 1] >> 4
    grays16 = b"".join(bytes([v * 17] * 3 + [0]) for v in range(16))
    grays256 = b"".join(bytes([v] * 3 + [0]) for v in range(256))
    rle8 = [b"".join(bytes([1, v]) for v in row) + b"\0\0" for row in rgb[::-1, :, 1]]  # runs of one pixel
    rle8[-1] = rle8[-1][:-2] + b"\0\1"  # the end of the bitmap
    return {
        "apng_default_framed.png": encoded(img, "PNG", save_all=True, append_images=other),
        "webp_alpha_lossy.webp": encoded(rgba, "WEBP", quality=90),
        "webp_alpha_exact.webp": encoded(rgba, "WEBP", lossless=True, exact=True),
        "webp_anim_alpha.webp": encoded(rgba, "WEBP", lossless=True, exact=True, save_all=True, append_images=other),
        "webp_anim_lossy.webp": encoded(img, "WEBP", quality=90, save_all=True, append_images=other),
        "icc_xyz.jpg": encoded(img, "JPEG", quality=95, icc_profile=xyz),
        "icc_xyz.png": encoded(img, "PNG", icc_profile=xyz),
        "icc_xyz.webp": encoded(img, "WEBP", lossless=True, icc_profile=xyz),
        "bilevel.bmp": encoded(img.convert("1"), "BMP"),
        "rgba.bmp": encoded(rgba, "BMP"),
        "bilevel.png": encoded(img.convert("1"), "PNG"),
        "palette_alpha_table.png": encoded(palette, "PNG", transparency=bytes(range(0, 256, 16))),
        "bilevel_as.pbm.jpg": encoded(img.convert("1"), "PPM"),
        "gray_as.pgm.jpg": encoded(img.convert("L"), "PPM"),
        "rgba_as.jp2.jpg": encoded(rgba, "JPEG2000"),
        "tiff_g4_as.jpg": encoded(img.convert("1"), "TIFF", compression="group4"),
        "tiff_packbits_as.jpg": encoded(img, "TIFF", compression="packbits"),
        "tiff_deflate_as.jpg": encoded(img, "TIFF", compression="tiff_adobe_deflate"),
        "tiff_jpeg_as.jpg": encoded(img, "TIFF", compression="jpeg"),
        "tiff_rgba_as.jpg": encoded(rgba, "TIFF"),
        "tiff_cmyk_as.jpg": encoded(img.convert("CMYK"), "TIFF"),
        "tiff_gray_as.jpg": encoded(img.convert("L"), "TIFF"),
        "tiff_palette_as.jpg": encoded(palette, "TIFF"),
        "tiff_rgb16_as.jpg": tiff((rgb.astype("<u2") * 257 + 100).tobytes(), 16, 3),
        "xrgb.bmp": bmp(32, [np.hstack([row[:, ::-1], np.zeros((W, 1), np.uint8)]).tobytes() for row in rgb[::-1]]),
        "palette4.bmp": bmp(4, [bytes(r[0::2] << 4 | r[1::2]) for r in nibbles[::-1]], extra=grays16),
        "rle8.bmp": bmp(8, rle8, compression=1, extra=grays256),
        "os2.bmp": bmp(24, [row[:, ::-1].tobytes() for row in rgb[::-1]], core=True),
        "maxval65535_as.ppm.jpg": pnm(b"P6", 65535, rgb.astype(np.uint16) * 257 + 100),
        "plain_as.ppm.jpg": b"P3\n%d %d\n255\n" % (W, H) + " ".join(map(str, rgb.ravel())).encode() + b"\n",
    }


def refused(rgb: np.ndarray) -> dict[str, bytes]:
    """Files the loaders' decoders read other than PIL (48x64)."""
    img = Image.fromarray(rgb)
    other = [Image.fromarray(255 - rgb), Image.fromarray(rgb[::-1].copy())]
    rows = [
        (row[:, 0].astype(np.uint16), row[:, 1].astype(np.uint16), row[:, 2].astype(np.uint16)) for row in rgb[::-1]
    ]
    masks565 = struct.pack("<III", 0xF800, 0x07E0, 0x001F)
    grays16 = b"".join(bytes([v * 17] * 3 + [0]) for v in range(16))
    rle4 = [
        b"".join(bytes([2, a << 4 | b]) for a, b in zip(row[0::2], row[1::2])) + b"\0\0" for row in rgb[::-1, :, 1] >> 4
    ]
    rle4[-1] = rle4[-1][:-2] + b"\0\1"
    nibbles = rgb[..., 1] >> 4
    return {
        # the default image (PIL's frame 0) is the IDAT image; DALI decodes the first fcTL frame (255 levels apart)
        "apng_default_apart.png": encoded(img, "PNG", save_all=True, append_images=other, default_image=True),
        # the first frame (the default image) claims 32x24 of the 48x64 image: PIL fails on it, DALI delivered it
        "apng_partial.png": first_frame_resized(encoded(img, "PNG", save_all=True, append_images=other), 32, 24),
        "tiff_bilevel_as.jpg": encoded(img.convert("1"), "TIFF"),  # DALI: "nvImageCodec failure: '#3'" mid-epoch
        "tiff_la_as.jpg": encoded(img.convert("LA"), "TIFF"),  # DALI: 255 levels apart
        "tiff_lab_as.jpg": encoded(img.convert("LAB"), "TIFF"),  # DALI: 80 levels apart
        "rgb555.bmp": bmp(16, [(r >> 3 << 10 | g >> 3 << 5 | b >> 3).astype("<u2").tobytes() for r, g, b in rows]),
        "rgb565.bmp": bmp(  # DALI: 7 levels apart (PIL fills 5 and 6 bits up to 8 with their high bits)
            16, [(r >> 3 << 11 | g >> 2 << 5 | b >> 3).astype("<u2").tobytes() for r, g, b in rows], 3, masks565
        ),
        "rle4.bmp": bmp(4, rle4, compression=2, extra=grays16),  # DALI: "Invalid sample_type: 0" mid-epoch
        "tiff_gray4_as.jpg": tiff(bytes(nibbles[:, 0::2] << 4 | nibbles[:, 1::2]), 4, 1),  # DALI: fails mid-epoch
        "tiff_planar_as.jpg": tiff(np.ascontiguousarray(rgb.transpose(2, 0, 1)).tobytes(), 8, 3, planar=2),  # 255 apart
        "maxval15_as.pgm.jpg": pnm(b"P5", 15, rgb[..., 0] >> 4),  # DALI: 240 levels apart
        "maxval4095_as.ppm.jpg": pnm(b"P6", 4095, rgb.astype(np.uint16) * 16),  # DALI: 239 levels apart
    }


def pil_loader(data: bytes) -> np.ndarray:
    """torchvision's ``datasets.folder.pil_loader``: ``(H, W, 3)`` uint8."""
    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(img.convert("RGB"))


def read(root: Path, backend: str, size=(H, W), device: str = "cpu"):
    """``({file name: (h, w, 3) uint8}, {file name: reason skipped})``, a batch of one at a time."""
    pipeline = [Decode(), CenterCrop(size=size), Output(dtype="uint8")]
    settings = dict(batch_size=1, shuffle=False, num_threads=1, on_error="skip", device=device)
    loader = gpupipe.loader(root, pipeline, backend=backend, **settings)
    at_build = {Path(s.path).name: s.reason for s in loader.skipped}
    if (root / "sources.tsv").exists():  # a pack: its samples in key order, each with the file it came from
        names = [Path(line.split("\t")[1]).name for line in (root / "sources.tsv").read_text().splitlines()[1:]]
    else:
        names = [Path(p).name for p in gpupipe.ImageFolder(root).paths if Path(p).name not in at_build]
    images = [batch[0][0].permute(1, 2, 0).numpy() for batch in loader]
    assert len(images) == len(names)
    assert {Path(s.path).name: s.reason for s in loader.skipped} == at_build, "every refusal known at build"
    return dict(zip(names, images)), at_build


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("images11")
    rgb = textured_image(np.random.default_rng(11), H, W)
    files = {**formats(rgb), **refused(rgb)}
    (root / "data" / "a").mkdir(parents=True)
    for name, data in files.items():
        (root / "data" / "a" / name).write_bytes(data)
    return root, files


@pytest.mark.parametrize("backend", CPU_BACKEND_NAMES)
def test_files_decoders_read_unlike_pil_are_refused_by_the_scan_on_every_backend_naming_why(folder, backend):
    # An APNG whose default image is not a frame was read by torchvision (PIL) as its default image and by DALI
    # as its first frame; a bilevel TIFF failed on DALI mid-epoch; LA and LAB TIFFs came out 255 and 80 apart.
    root, files = folder
    images, skipped = read(root / "data", backend)
    assert skipped == REFUSED
    assert set(images) == set(formats(textured_image(np.random.default_rng(11), H, W)))


@pytest.mark.parametrize("backend", CPU_BACKEND_NAMES)
@pytest.mark.filterwarnings("ignore:Palette images with Transparency")  # PIL's own, in the reference
def test_formats_users_have_read_as_torchvision_imagefolder_reads_them(folder, backend):
    root, files = folder
    images, _ = read(root / "data", backend)
    for name, image in images.items():
        want = pil_loader(files[name])
        assert image.shape == want.shape == (H, W, 3), name
        assert np.abs(image.astype(int) - want).max() <= LEVELS.get(name, 0), (name, np.abs(image - want).max())


def test_the_packer_converts_the_refused_files_as_pil_reads_them(folder, tmp_path):
    root, files = folder
    (tmp_path / "data" / "a").mkdir(parents=True)
    for name in REFUSED:
        (tmp_path / "data" / "a" / name).write_bytes(files[name])
    pack(tmp_path / "data", tmp_path / "packed", workers=1, progress=False)
    manifest = json.loads((tmp_path / "packed" / "manifest.json").read_text())
    assert [Path(s["path"]).name for s in manifest["skipped"]] == ["apng_partial.png"]  # PIL fails on it too
    for backend in CPU_BACKEND_NAMES:
        images, skipped = read(tmp_path / "packed", backend)
        assert skipped == {} and set(images) == set(REFUSED) - {"apng_partial.png"}, backend
        for name, image in images.items():  # re-encoded as JPEG: close to PIL's reading, not to DALI's
            assert np.abs(image.astype(int) - pil_loader(files[name])).mean() < 6, (backend, name)


def test_a_webdataset_tar_holding_them_is_read_alike_on_every_backend(folder, tmp_path):
    # The scan of a tar's members gives the same refusals as the folder's scan (the same reasons, named by member).
    root, files = folder
    tar_path = tmp_path / "shard-000.tar"
    keep = ["apng_default_framed.png", "apng_default_apart.png", "tiff_la_as.jpg", "rgb565.bmp", "xrgb.bmp"]
    members = {name: f"s{k}.png" if name.endswith(".png") else f"s{k}.jpg" for k, name in enumerate(keep)}
    with tarfile.open(tar_path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for k, name in enumerate(keep):
            for member, data in ((members[name], files[name]), (f"s{k}.cls", b"0")):  # (WebDataset: .jpg, .png)
                info = tarfile.TarInfo(member)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    source = gpupipe.WebDataset(tar_path, cache_dir=tmp_path / "cache")
    pipeline = [Decode(), CenterCrop(size=(H, W)), Output(dtype="uint8")]
    for backend in CPU_BACKEND_NAMES:
        loader = gpupipe.loader(source, pipeline, batch_size=1, backend=backend, shuffle=False, on_error="skip")
        images = [batch[0][0].permute(1, 2, 0).numpy() for batch in loader]
        skipped = {s.path.rsplit("#", 1)[1]: s.reason for s in loader.skipped}
        assert skipped == {members[name]: REFUSED[name] for name in keep if name in REFUSED}, backend
        assert len(images) == 2
        for image, name in zip(images, ["apng_default_framed.png", "xrgb.bmp"]):
            assert np.array_equal(image, pil_loader(files[name])), (backend, name)


@pytest.mark.cuda
@needs_dali
def test_the_gpu_backend_refuses_them_and_reads_the_rest_as_pil(folder):
    root, files = folder
    images, skipped = read(root / "data", "dali", device="cuda")
    assert skipped == REFUSED
    for name, image in images.items():  # nvJPEG and the GPU's own decoders: held to the GPU's decode tolerance
        assert np.abs(image.astype(int) - pil_loader(files[name])).mean() <= DECODE_TOLERANCE["cuda"], name
