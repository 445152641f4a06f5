"""Red team, round 10: masks of every PNG layout, in folders and in packs; their ids through every geometric
op; the batch contract of masks.

Issue 35 (9): masks are class ids whatever their bit depth on every backend. The variants here: a pack
whose masks another writer made (or someone edited) in a layout the packer never writes (low-bit, palette,
16-bit, colour, a JPEG named ``.png``, animated): DALI's reader gave scaled values or a palette's colours
without a word, or crashed the pass with DALI's "batch must be representable as a tensor"; now a bad sample
on every backend naming the layout. Packing a folder with ``classes=`` checks the ids as reading it does; the
packer's ``max_size`` shrinks masks by the backends' pixel-centre rule. Animated masks, masks with a chunk
failing its CRC and damaged pixels are bad samples on both backends naming the mask (DALI's reasons named
only its decoder; libpng read what PIL refused). GIF masks are named where a PNG was expected. Ancillary
chunks (``tRNS``, ``gAMA``, ``sRGB``, ``iCCP``, ``bKGD``, ``sBIT``, ``hIST``, text) and Adam7 interlacing
keep the ids, and DALI prints no libpng warning for them.
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
import torch
from helpers import CPU_BACKENDS, replace_packed_member
from PIL import Image, ImageCms

import gpupipe
from gpupipe import ops
from gpupipe.pack import ConvertSettings, PackSettings, pack

H, W = 6, 8
#: a palette whose colours are not the indices (the ids must be the indices)
PALETTE = bytes((i * 53 + c * 91) % 256 for i in range(256) for c in range(3))
_ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _row(values: np.ndarray, depth: int) -> bytes:
    if depth == 16:
        return b"\0" + values.astype(">u2").tobytes()
    bits = "".join(format(int(v), f"0{depth}b") for v in values)
    bits += "0" * (-len(bits) % 8)
    return b"\0" + int(bits, 2).to_bytes(len(bits) // 8, "big")


def png(ids: np.ndarray, depth: int = 8, colour: int = 0, *, interlace: int = 0, extra=()) -> bytes:
    """A PNG of ``depth`` bits whose stored samples (gray) or indices (palette, ``colour=3``) are ``ids``,
    Adam7-interlaced with ``interlace=1``; ``extra`` chunks go before the pixels."""
    passes = _ADAM7 if interlace else [(0, 0, 1, 1)]
    rows = b"".join(_row(r, depth) for x0, y0, dx, dy in passes for r in ids[y0::dy, x0::dx] if r.size)
    ihdr = struct.pack(">IIBBBBB", ids.shape[1], ids.shape[0], depth, colour, 0, 0, interlace)
    plte = chunk(b"PLTE", PALETTE[: 3 * min(256, 1 << depth)]) if colour == 3 else b""
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + plte
        + b"".join(extra)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def pil_bytes(array: np.ndarray, mode: str | None, fmt: str = "PNG") -> bytes:
    out = io.BytesIO()
    Image.fromarray(array, mode).save(out, fmt)  # a bool array: mode "1" (inferred; given, PIL misreads it)
    return out.getvalue()


def ids_of(k: int, top: int = 3, shape=(H, W)) -> np.ndarray:
    """Sample ``k``'s ids: 0..top in a grid, shifted by ``k``."""
    return ((np.arange(shape[0] * shape[1]).reshape(shape) + k) % (top + 1)).astype(np.uint8)


def seg_folder(root: Path, masks: dict[int, bytes] | None = None, count: int = 3, top: int = 3) -> Path:
    """``count`` samples: image ``k`` is gray ``40 * k``, its mask ``masks[k]`` (default: 8-bit gray ids)."""
    for sub in ("images", "masks"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for k in range(count):
        Image.fromarray(np.full((H, W, 3), 40 * k, np.uint8)).save(root / "images" / f"s{k}.png")
        data = (masks or {}).get(k) or png(ids_of(k, top))
        (root / "masks" / f"s{k}.png").write_bytes(data)
    return root


def read(source, backend: str, batch_size: int = 3, **kw):
    """``[(k, mask)]`` of every delivered sample (``k`` from the image's gray) and the loader."""
    loader = gpupipe.loader(
        source,
        [ops.Decode(), ops.CenterCrop((H, W)), ops.Output("uint8")],
        batch_size=batch_size,
        backend=backend,
        num_threads=1,
        shuffle=False,
        **kw,
    )
    out = []
    for images, masks in loader:
        assert masks.dtype == torch.int64 and masks.shape == (len(images), H, W)
        out += [(round(int(images[i, 0, 0, 0]) / 40), masks[i].numpy()) for i in range(len(images))]
    return out, loader


# -- packs holding masks the packer never writes ---------------------------------------------------------


@pytest.fixture(scope="module")
def packed_seg(tmp_path_factory):
    root = tmp_path_factory.mktemp("packed-seg")
    seg_folder(root / "seg")
    pack(
        gpupipe.SegmentationFolder(root / "seg" / "images", root / "seg" / "masks"),
        root / "packed",
        PackSettings(),
        workers=1,
        progress=False,
    )
    with tarfile.open(root / "packed" / "shard-000000.tar") as tar:  # which sample member 00000001 is
        image = np.asarray(Image.open(io.BytesIO(tar.extractfile("00000001.jpg").read())))
    return root / "packed", round(int(image[0, 0, 0]) / 40)


#: layout -> (the mask's bytes from its ids, words the reason holds)
FOREIGN = {
    "palette-4bit": (lambda a: png(a, 4, 3), "4-bit palette"),
    "palette-8bit": (lambda a: png(a, 8, 3), "8-bit palette"),
    "gray-2bit": (lambda a: png(a, 2, 0), "2-bit gray"),
    "gray-16bit": (lambda a: png(a, 16, 0), "16-bit gray"),
    "rgb": (lambda a: pil_bytes(np.stack([a] * 3, -1), "RGB"), "8-bit RGB"),
    "jpeg": (lambda a: pil_bytes(a * 60, "L", "JPEG"), "not a PNG"),
    "animated": (lambda a: animated_png(a), "animated PNG"),
}


def animated_png(ids: np.ndarray) -> bytes:
    """An 8-bit gray APNG whose default image (``ids``, what PIL reads) is not one of its frames (``ids + 1``,
    the first of which DALI read)."""
    out = io.BytesIO()
    frame = Image.fromarray((ids + 1) % 4, "L")
    Image.fromarray(ids, "L").save(out, "PNG", save_all=True, append_images=[frame, frame], default_image=True)
    return out.getvalue()


@pytest.mark.parametrize("layout", list(FOREIGN))
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_packed_mask_in_a_layout_the_packer_never_writes_is_skipped_naming_it(packed_seg, tmp_path, layout, backend):
    """Before: on dali-cpu a palette or RGB member crashed the pass (DALI: "batch must be representable as
    a tensor"), a 2-bit or 16-bit one came scaled (0, 85, 170, 255 / all 0) without a word; a JPEG member
    was read as a mask on both backends."""
    import shutil

    packed, k = packed_seg
    packed = Path(shutil.copytree(packed, tmp_path / "packed"))
    write, words = FOREIGN[layout]
    replace_packed_member(packed, "00000001.png", write(ids_of(k)))
    seen, loader = read(str(packed), backend, batch_size=3, on_error="skip")
    assert [Path(s.path).name for s in loader.skipped] == ["shard-000000.tar#00000001.jpg"], loader.skipped
    reason = loader.skipped[0].reason
    assert words in reason, reason
    if layout != "animated":
        assert "8-bit gray" in reason and "gpupipe.pack" in reason, reason
    assert k not in {j for j, _ in seen}
    for j, mask in seen:
        assert np.array_equal(mask, ids_of(j)), f"sample {j}: its ids"
    with pytest.raises(gpupipe.SampleError, match=words):
        read(str(packed), backend)
    member = [i for i, name in enumerate(loader.source.names) if name.endswith("#00000001.jpg")]
    with pytest.raises(ValueError, match=words):  # loader.dataset[i] as the batches: it gave the ids of PIL's reading
        loader.dataset[member[0]]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_packed_8_bit_gray_mask_with_ancillary_chunks_is_read_as_it_is(packed_seg, tmp_path, backend):
    """A packed 8-bit gray mask is what a pack holds, whatever chunks it carries."""
    import shutil

    packed, k = packed_seg
    packed = Path(shutil.copytree(packed, tmp_path / "packed"))
    replace_packed_member(packed, "00000001.png", png(ids_of(k), extra=[chunk(b"gAMA", struct.pack(">I", 100000))]))
    seen, loader = read(str(packed), backend)
    assert loader.skipped == [] and sorted(j for j, _ in seen) == [0, 1, 2]
    assert all(np.array_equal(mask, ids_of(j)) for j, mask in seen)


def test_packing_a_folder_with_classes_refuses_a_mask_holding_ids_beyond_them(tmp_path):
    """``SegmentationFolder(classes=[4 names])`` with a mask holding 4 and 5: reading the folder names it (a
    bad sample), but packing it wrote the ids as they were, and the pack gave them to ``F.cross_entropy``
    (on a GPU: a device-side assert naming nothing). Now the packer skips and lists it with the same reason."""
    seg_folder(tmp_path / "seg", {1: png(ids_of(1, 5))})
    source = gpupipe.SegmentationFolder(
        tmp_path / "seg" / "images", tmp_path / "seg" / "masks", classes=["a", "b", "c", "d"]
    )
    summary = pack(source, tmp_path / "packed", PackSettings(), workers=1, progress=False)
    assert (summary.packed, summary.skipped) == (2, 1)
    [problem] = json.loads((tmp_path / "packed" / "manifest.json").read_text())["skipped"]
    assert problem["path"].endswith("s1.png") and "holds class id 4, 5, beyond the 4 classes" in problem["reason"]
    assert str(tmp_path / "seg" / "masks" / "s1.png") in problem["reason"]
    seen, _ = read(str(tmp_path / "packed"), "torchvision")
    assert sorted(j for j, _ in seen) == [0, 2] and all(np.array_equal(m, ids_of(j)) for j, m in seen)


def test_a_mask_shrunk_by_the_packer_reads_the_pixel_centres_as_every_backend_resizes_it(tmp_path):
    """``max_size`` 6 shrinks an 8x8 mask: row ``j`` is source row ``(2j + 1) * 8 // 12`` (0, 2, 3, 4, 6, 7),
    the rule the backends' mask resize follows (docs/targets.md). PIL's nearest resize, which the packer
    used, read 0, 2, 3, 4, 5, 7: on an edge between two rows (``(j + 0.5) * 8 / 6`` whole), at times the row above."""
    for sub in ("images", "masks"):
        (tmp_path / sub).mkdir()
    Image.fromarray(np.full((8, 8, 3), 90, np.uint8)).save(tmp_path / "images" / "a.png")
    rows = np.repeat(np.arange(8, dtype=np.uint8)[:, None], 8, 1)
    (tmp_path / "masks" / "a.png").write_bytes(png(rows))
    source = gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks")
    pack(source, tmp_path / "packed", PackSettings(ConvertSettings(max_size=6)), workers=1, progress=False)
    loader = gpupipe.loader(
        str(tmp_path / "packed"),
        [ops.Decode(), ops.CenterCrop((6, 6))],
        batch_size=1,
        backend="torchvision",
        shuffle=False,
    )
    [(_, masks)] = list(loader)
    assert masks[0, :, 0].tolist() == [0, 2, 3, 4, 6, 7] and masks[0].T.tolist() == [[0, 2, 3, 4, 6, 7]] * 6


def test_gif_masks_are_named_where_a_png_mask_is_expected(tmp_path):
    """Kaggle's Carvana masks are GIFs (``<id>_mask.gif``): the images' "no mask" problems and the error of
    a folder without any PNG mask said nothing of them (BMP and TIFF masks were named)."""
    seg_folder(tmp_path, count=3)
    for k in range(2):
        (tmp_path / "masks" / f"s{k}.png").unlink()
        Image.fromarray(ids_of(k), "L").save(tmp_path / "masks" / f"s{k}.gif")
    source = gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks")
    reasons = {Path(p.path).name: p.reason for p in source.problems}
    assert set(reasons) == {"s0.png", "s1.png"}
    assert f"{tmp_path / 'masks' / 's0.gif'} is not read: masks are read from PNG files only" in reasons["s0.png"]
    (tmp_path / "masks" / "s2.png").unlink()
    Image.fromarray(ids_of(2), "L").save(tmp_path / "masks" / "s2_mask.gif")
    with pytest.raises(ValueError, match=r"PNG files only, and the masks folder holds .*s0\.gif and 2 more"):
        gpupipe.SegmentationFolder(tmp_path / "images", tmp_path / "masks")


# -- masks that decode with ancillary chunks or interlaced -------------------------------------------------

TRNS_GRAY = chunk(b"tRNS", b"\0\3")
#: an RGB profile, as tools copy a photo's into its gray mask (libpng: "not permitted on grayscale PNG", a warning)
SRGB = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
PHYS = chunk(b"pHYs", struct.pack(">IIB", 2835, 2835, 1))
GAMMA = chunk(b"gAMA", struct.pack(">I", 100000)) + chunk(b"sRGB", b"\0")
PALETTE_EXTRAS = chunk(b"bKGD", b"\3") + chunk(b"sBIT", b"\5\5\5") + chunk(b"hIST", b"\0\1" * 256)

#: case -> (the largest id, the mask's bytes from its ids)
DECODED = {
    "gray-8bit-tRNS": (200, lambda a: png(a, 8, 0, extra=[TRNS_GRAY])),
    "gray-8bit-gAMA-sRGB": (200, lambda a: png(a, 8, 0, extra=[GAMMA])),
    "gray-8bit-sBIT-4": (15, lambda a: png(a, 8, 0, extra=[chunk(b"sBIT", b"\4")])),
    "gray-8bit-iCCP-rgb": (200, lambda a: png(a, 8, 0, extra=[chunk(b"iCCP", b"sRGB\0\0" + zlib.compress(SRGB))])),
    "gray-8bit-text-pHYs": (200, lambda a: png(a, 8, 0, extra=[chunk(b"tEXt", b"Software\0x"), PHYS])),
    "palette-8bit-bKGD-sBIT-hIST": (200, lambda a: png(a, 8, 3, extra=[PALETTE_EXTRAS])),
    "palette-8bit-tRNS-gAMA": (200, lambda a: png(a, 8, 3, extra=[chunk(b"tRNS", bytes(range(256))), GAMMA])),
    "gray-1bit-adam7": (1, lambda a: png(a, 1, 0, interlace=1)),
    "gray-4bit-adam7": (15, lambda a: png(a, 4, 0, interlace=1)),
    "gray-8bit-adam7": (200, lambda a: png(a, 8, 0, interlace=1)),
    "gray-16bit-adam7": (200, lambda a: png(a, 16, 0, interlace=1)),
    "palette-2bit-adam7": (3, lambda a: png(a, 2, 3, interlace=1)),
    "palette-8bit-adam7": (200, lambda a: png(a, 8, 3, interlace=1)),
    "mode-1": (1, lambda a: pil_bytes(a.astype(bool), None)),
}


@pytest.mark.parametrize("case", list(DECODED))
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_ancillary_chunks_and_interlacing_keep_the_ids(tmp_path, case, backend, capfd):
    """... and print nothing: a palette mask's ``bKGD``, ``sBIT`` and ``hIST`` made libpng, under DALI, print
    "bKGD: invalid" and two more lines for every mask read, each epoch."""
    top, write = DECODED[case]
    root = seg_folder(tmp_path, {k: write(ids_of(k, top)) for k in range(3)}, top=top)
    seen, loader = read(gpupipe.SegmentationFolder(root / "images", root / "masks"), backend)
    assert loader.skipped == [] and sorted(j for j, _ in seen) == [0, 1, 2]
    for j, mask in seen:
        assert np.array_equal(mask, ids_of(j, top)), f"{case}: sample {j}'s ids on {backend}"
    assert "libpng" not in capfd.readouterr().err


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_an_animated_png_mask_is_a_bad_sample_naming_it(tmp_path, backend):
    """An APNG mask whose default image is not one of its frames: DALI read the first frame, torchvision
    (PIL) the default image, each without a word; now a bad sample on both, found by the scan."""
    root = seg_folder(tmp_path, {1: animated_png(ids_of(1))})
    seen, loader = read(gpupipe.SegmentationFolder(root / "images", root / "masks"), backend, on_error="skip")
    assert [Path(s.path).name for s in loader.skipped] == ["s1.png"]
    assert "animated PNG" in loader.skipped[0].reason and str(root / "masks" / "s1.png") in loader.skipped[0].reason
    assert all(np.array_equal(mask, ids_of(j)) for j, mask in seen) and 1 not in {j for j, _ in seen}


def damaged_pixels(ids: np.ndarray) -> bytes:
    """An 8-bit gray PNG whose compressed pixels are damaged, every chunk's CRC right (only a decoder sees it)."""
    rows = b"".join(b"\0" + r.tobytes() for r in ids)
    data = bytearray(zlib.compress(rows))
    data[len(data) // 2] ^= 0x55
    ihdr = struct.pack(">IIBBBBB", ids.shape[1], ids.shape[0], 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", bytes(data)) + chunk(b"IEND", b"")


def bad_crc(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + b"\0\0\0\0"


@pytest.mark.parametrize(
    "case, mask, words",
    [
        ("damaged pixels", damaged_pixels(ids_of(1)), ""),
        ("gAMA CRC", png(ids_of(1), extra=[bad_crc(b"gAMA", struct.pack(">I", 100000))]), "'gAMA' chunk fails its CRC"),
        ("tEXt CRC, palette", png(ids_of(1), 8, 3, extra=[bad_crc(b"tEXt", b"a\0b")]), "'tEXt' chunk fails its CRC"),
    ],
)
def test_a_damaged_mask_is_named_as_the_mask_on_both_backends_alike(tmp_path, case, mask, words):
    """Damaged pixels: DALI's skipped reason said only "DALI's decoder refused it", beside the image's path
    (the image is fine); now it names the mask and why. A metadata chunk failing its CRC: DALI (libpng) read
    the mask with a warning, torchvision (PIL) refused it as "cannot identify image file <_io.BytesIO ...>":
    now a bad sample on both, saying which chunk."""
    pytest.importorskip("nvidia.dali")
    root = seg_folder(tmp_path, {1: mask})
    reasons = {}
    for backend in ("dali-cpu", "torchvision"):
        seen, loader = read(gpupipe.SegmentationFolder(root / "images", root / "masks"), backend, on_error="skip")
        assert [Path(s.path).name for s in loader.skipped] == ["s1.png"], (backend, loader.skipped)
        reasons[backend] = loader.skipped[0].reason
        assert all(np.array_equal(mask, ids_of(j)) for j, mask in seen) and 1 not in {j for j, _ in seen}
    for reason in reasons.values():
        assert f"mask {root / 'masks' / 's1.png'}" in reason and words in reason and "BytesIO" not in reason, reasons
    with pytest.raises(ValueError, match=f"mask {root / 'masks' / 's1.png'}"):
        loader.dataset[1]


# -- geometry: ids kept, ignore_index as fill, elongated masks ------------------------------------------------

GEOMETRY = {
    "resize": [ops.Resize((11, 14))],
    "random-resize-crop": [ops.RandomResize(5, 30), ops.RandomCrop((11, 14))],
    "random-resized-crop": [ops.RandomResizedCrop((11, 14))],
    "crop-padded": [ops.RandomCrop((16, 20))],
    "flips": [ops.Resize((11, 14)), ops.HorizontalFlip(0.5), ops.VerticalFlip(0.5)],
    "rotation": [ops.Resize((11, 14)), ops.RandomRotation(40)],
    "affine": [ops.Resize((11, 14)), ops.RandomAffine(degrees=30, translate=(0.2, 0.2), scale=(0.7, 1.3), shear=10)],
    "zoom-out": [ops.RandomZoomOut(side_range=(1.5, 3), p=1.0), ops.Resize((11, 14))],
    "pad-to": [ops.Resize((11, 14)), ops.PadTo(20)],
}


@pytest.fixture(scope="module")
def elongated(tmp_path_factory):
    """Masks of ids {0, 3, 7} at 13x17, 1x23, 23x1, 2x40 and 9x9 (a 4-bit palette, a 1-pixel line ...)."""
    root = tmp_path_factory.mktemp("elongated")
    rng = np.random.default_rng(0)
    for sub in ("images", "masks"):
        (root / sub).mkdir()
    for k, shape in enumerate([(13, 17), (1, 23), (23, 1), (2, 40), (9, 9)]):
        Image.fromarray(rng.integers(0, 255, (*shape, 3), dtype=np.uint8)).save(root / "images" / f"s{k}.png")
        ids = np.array([0, 3, 7], np.uint8)[rng.integers(0, 3, shape)]
        (root / "masks" / f"s{k}.png").write_bytes(png(ids, 4, 3) if k % 2 else png(ids))
    return root


@pytest.mark.parametrize("geometry", list(GEOMETRY))
def test_every_geometric_op_keeps_the_ids_and_fills_with_ignore_index_alike_on_both_backends(elongated, geometry):
    pytest.importorskip("nvidia.dali")
    batches = {}
    for backend in ("dali-cpu", "torchvision"):
        source = gpupipe.SegmentationFolder(elongated / "images", elongated / "masks", ignore_index=9)
        loader = gpupipe.loader(
            source,
            [ops.Decode(), *GEOMETRY[geometry], ops.Output("uint8")],
            batch_size=2,
            backend=backend,
            num_threads=1,
            shuffle=False,
            seed=3,
        )
        batches[backend] = [masks for _, masks in loader]
        assert [len(m) for m in batches[backend]] == [2, 2, 1]
        values = set(torch.unique(torch.cat([m.flatten() for m in batches[backend]])).tolist())
        assert values <= {0, 3, 7, 9}, f"{geometry} on {backend}: ids no mask holds: {values - {0, 3, 7, 9}}"
        if geometry in ("crop-padded", "zoom-out", "pad-to", "rotation"):
            assert 9 in values, f"{geometry} fills with ignore_index"
    assert all(torch.equal(a, b) for a, b in zip(batches["dali-cpu"], batches["torchvision"])), geometry


# -- the batch contract of masks -----------------------------------------------------------------------------


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("batch_size, drop_last, sizes", [(1, False, [1, 1, 1]), (2, False, [2, 1]), (2, True, [2])])
def test_masks_are_int64_b_h_w_at_every_batch_size_with_and_without_drop_last(
    tmp_path, backend, batch_size, drop_last, sizes
):
    root = seg_folder(tmp_path, {k: png(ids_of(k, 15), 4, 3) for k in range(3)}, top=15)
    loader = gpupipe.loader(
        gpupipe.SegmentationFolder(root / "images", root / "masks"),
        [ops.Decode(), ops.CenterCrop((H, W)), ops.Normalize()],
        batch_size=batch_size,
        backend=backend,
        num_threads=1,
        shuffle=False,
        drop_last=drop_last,
        dtype="float16",
    )
    got = list(loader)
    assert [len(m) for _, m in got] == sizes and len(loader) == len(sizes)
    k = 0
    for images, masks in got:
        assert images.dtype == torch.float16 and images.shape == (len(masks), 3, H, W)
        assert masks.dtype == torch.int64 and masks.shape == (len(images), H, W) and masks.is_contiguous()
        for mask in masks:
            assert np.array_equal(mask.numpy(), ids_of(k, 15))
            k += 1
