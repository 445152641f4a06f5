"""Red team (R17): decoding quirks of photos from phones and the web, on every CPU backend and in packs.

Each file is generated here (48x64 as displayed) and read through ``gpupipe.loader`` on ``torchvision`` and
``dali-cpu``, and through ``gpupipe.pack`` then a loader over the pack; the pixels must be the reference's
(PIL with the EXIF orientation applied, as the bad-data page promises) and the same on every backend, or
the file is refused by the scan on every backend alike, named with its reason.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from decode_quirks import (
    STORED,
    XMP,
    H,
    W,
    encoded,
    exif,
    long_orientation,
    png16,
    png_xmp,
    top_down,
    without_adobe_marker,
    ycck,
)
from helpers import CPU_BACKEND_NAMES, DECODE_TOLERANCE, needs_dali, textured_image
from PIL import Image, ImageCms, ImageOps

import gpupipe
from gpupipe.ops import CenterCrop, Decode, Output
from gpupipe.pack import pack

#: Levels a backend may differ from another on a file (every other file: identical pixels).
#: DALI's CMYK conversion rounds one level apart from libjpeg-turbo's where it turns the image; DALI scales
#: 16-bit colour to 8 bits rounded (v / 257), PIL keeps the high byte.
LEVELS = {"cmyk_exif6.jpg": 1, "rgb16.png": 1}
#: Refused by the scan on every backend, with their reasons (the packer converts the first four and the float TIFF).
OTHER_FORMAT = (
    "an image in {} format, named {}: the loaders read only JPEG, PNG, BMP, WebP, TIFF, PNM and JPEG 2000 "
    "(DALI decodes no other); python -m gpupipe.pack converts it"
)
REFUSED = {
    "gif_as.jpg": OTHER_FORMAT.format("GIF", ".jpg"),
    "ico_as.png": OTHER_FORMAT.format("ICO", ".png"),
    "tga_as.jpg": OTHER_FORMAT.format("TGA", ".jpg"),
    "pcx_as.jpg": OTHER_FORMAT.format("PCX", ".jpg"),
    "pages_as.jpg": "a TIFF of 2 pages: which one to read is the user's call; split it first",
    "float_as.jpg": "a TIFF of F pixels (not 8-bit): the loaders read 8-bit images only; python -m gpupipe.pack "
    "converts it (each image's own min..max stretched to 0..255)",
    "cmyk_no_adobe.jpg": "a CMYK JPEG without an Adobe marker: decoders disagree on its colours (DALI inverts "
    "its inks, libjpeg-turbo and PIL do not); python -m gpupipe.pack converts it as PIL reads it",
    "truncated.jpg": "truncated JPEG (no end-of-image marker)",
    "truncated.png": "truncated PNG (no IEND chunk)",
}


def quirks(rgb: np.ndarray) -> dict[str, bytes]:
    """Every quirk (48x64 as displayed) that must decode to its reference on every backend."""
    img = Image.fromarray(rgb)
    alpha = np.tile(np.linspace(0, 255, W, dtype=np.uint8), (H, 1))
    files = {}
    for o, turn in STORED.items():
        files[f"exif{o}.jpg"] = encoded(img.transpose(turn), "JPEG", quality=95, exif=exif(o))
        files[f"exif{o}.png"] = encoded(img.transpose(turn), "PNG", exif=exif(o))
    six = img.transpose(STORED[6])
    palette = img.quantize(64)
    frames = [Image.fromarray(255 - rgb), Image.fromarray(rgb[::-1].copy())]
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    files.update(
        {
            "cmyk.jpg": encoded(img.convert("CMYK"), "JPEG", quality=95),
            "cmyk_exif6.jpg": encoded(six.convert("CMYK"), "JPEG", quality=95, exif=exif(6)),
            "ycck.jpg": ycck(rgb),
            "gray.jpg": encoded(img.convert("L"), "JPEG", quality=95),
            "gray_exif6.jpg": encoded(six.convert("L"), "JPEG", quality=95, exif=exif(6)),
            "gray.png": encoded(img.convert("L"), "PNG"),
            "gray16.png": png16(np.random.default_rng(1).integers(0, 65536, (H, W)).astype(np.uint16)),
            "dark16.png": png16((np.arange(H * W).reshape(H, W) % 200).astype(np.uint16)),  # every value < 256
            "rgb16.png": png16(rgb.astype(np.uint16) * 257 + np.random.default_rng(2).integers(-128, 128, rgb.shape)),
            "rgba.png": encoded(Image.fromarray(np.dstack([rgb, alpha]), "RGBA"), "PNG"),
            "la.png": encoded(Image.fromarray(np.dstack([rgb[..., 1], alpha]), "LA"), "PNG"),
            "palette_trns.png": encoded(palette, "PNG", transparency=3),
            "palette4.png": encoded(img.quantize(16), "PNG", bits=4),
            "bilevel.png": encoded(img.convert("1"), "PNG"),
            "gray_trns.png": encoded(img.convert("L"), "PNG", transparency=100),
            "rgb_trns.png": encoded(img, "PNG", transparency=(10, 20, 30)),
            "progressive.jpg": encoded(img, "JPEG", quality=95, progressive=True),
            "restart.jpg": encoded(img, "JPEG", quality=95, restart_marker_blocks=1),
            "sub444.jpg": encoded(img, "JPEG", quality=95, subsampling=0),
            "sub422.jpg": encoded(img, "JPEG", quality=95, subsampling=1),
            "sub420.jpg": encoded(img, "JPEG", quality=95, subsampling=2),
            "junk.jpg": encoded(img, "JPEG", quality=95) + b"\x00JUNK" * 99,
            "icc.jpg": encoded(img, "JPEG", quality=95, icc_profile=srgb),
            "png_as.jpg": encoded(img, "PNG"),
            "webp_as.jpg": encoded(img, "WEBP", lossless=True),
            "webp_exif6.webp": encoded(six, "WEBP", lossless=True, exif=exif(6)),
            "anim.webp": encoded(img, "WEBP", lossless=True, save_all=True, append_images=frames),  # the first frame
            "tiff_as.jpg": encoded(img, "TIFF"),
            "tiff_exif6.jpg": encoded(six, "TIFF", tiffinfo={0x0112: 6}),  # PIL turns a TIFF upright as it opens it
            "plain.bmp": encoded(img, "BMP"),
            "bgra.bmp": encoded(Image.fromarray(np.dstack([rgb, alpha]), "RGBA"), "BMP"),
            "palette.bmp": encoded(palette, "BMP"),
            "top_down.bmp": top_down(encoded(img, "BMP")),
            "apng.png": encoded(img, "PNG", save_all=True, append_images=frames),  # the first frame
            "mpo_exif6.jpg": encoded(six, "MPO", save_all=True, append_images=frames[:1], quality=95, exif=exif(6)),
            "jp2_as.jpg": encoded(img, "JPEG2000"),
            "ppm_as.jpg": encoded(img, "PPM"),
            "pgm16_as.png": encoded(Image.fromarray((np.arange(H * W).reshape(H, W) * 21).astype(np.uint16)), "PPM"),
        }
    )
    return files


def refused(rgb: np.ndarray) -> dict[str, bytes]:
    img = Image.fromarray(rgb)
    jpeg, png = encoded(img, "JPEG", quality=95), encoded(img, "PNG")
    return {
        "gif_as.jpg": encoded(img, "GIF", save_all=True, append_images=[Image.fromarray(255 - rgb)]),
        "ico_as.png": encoded(img, "ICO", sizes=[(W, H)]),
        "tga_as.jpg": encoded(img, "TGA"),
        "pcx_as.jpg": encoded(img, "PCX"),
        "pages_as.jpg": encoded(img, "TIFF", save_all=True, append_images=[Image.fromarray(255 - rgb)]),
        "float_as.jpg": encoded(Image.fromarray(rgb[..., 0].astype(np.float32)), "TIFF"),
        "cmyk_no_adobe.jpg": without_adobe_marker(encoded(img.convert("CMYK"), "JPEG", quality=95)),
        "truncated.jpg": jpeg[: len(jpeg) // 2],
        "truncated.png": png[: len(png) - 40],
    }


def reference(data: bytes) -> np.ndarray:
    """What a user sees: PIL's decode, EXIF orientation applied, the first frame, alpha dropped, 16-bit gray
    scaled to 8 bits rounded (as DALI scales it), ``(H, W, 3)`` uint8."""
    with Image.open(io.BytesIO(data)) as img:
        img = ImageOps.exif_transpose(img)
        if img.mode.startswith("I"):
            img = Image.fromarray(((np.asarray(img).astype(np.int64) * 255 + 32767) // 65535).astype(np.uint8))
        return np.asarray(img.convert("RGBA" if img.mode == "P" else img.mode).convert("RGB"))


def decode_all(root: Path, backend: str, size=(H, W), device="cpu"):
    """``({file name: (h, w, 3) uint8}, {file name: reason skipped})`` of every file of the folder or pack."""
    pipeline = [Decode(), CenterCrop(size=size), Output(dtype="uint8")]
    settings = dict(batch_size=8, shuffle=False, num_threads=1, on_error="skip")
    loader = gpupipe.loader(root, pipeline, backend=backend, device=device, **settings)
    skipped_at_build = {Path(s.path).name: s.reason for s in loader.skipped}
    images = torch.cat([b[0] for b in loader]).permute(0, 2, 3, 1).cpu().numpy()
    if (root / "sources.tsv").exists():  # a pack: its samples in key order, each with the file it came from
        names = [Path(line.split("\t")[1]).name for line in (root / "sources.tsv").read_text().splitlines()[1:]]
    else:  # a folder: its files, less those the scan refused (a file failing later is replaced in its slot)
        names = [Path(p).name for p in gpupipe.ImageFolder(root).paths if Path(p).name not in skipped_at_build]
    assert len(images) == len(names)
    skipped = {Path(s.path).name: s.reason for s in loader.skipped}
    assert skipped == skipped_at_build, "every refusal is known when the loader is built, on every backend"
    return {n: image for n, image in zip(names, images) if n not in skipped}, skipped


@pytest.fixture(scope="module")
def decoded(tmp_path_factory):
    """The quirk folder decoded on every CPU backend, directly and through a pack."""
    root = tmp_path_factory.mktemp("quirks")
    rgb = textured_image(np.random.default_rng(0), H, W)
    files = {**quirks(rgb), **refused(rgb)}
    (root / "data" / "photos").mkdir(parents=True)
    for name, data in files.items():
        (root / "data" / "photos" / name).write_bytes(data)
    pack(root / "data", root / "packed", workers=1, progress=False)
    manifest = json.loads((root / "packed" / "manifest.json").read_text())
    packed_skipped = {Path(s["path"]).name: s["reason"] for s in manifest["skipped"]}
    out = {"root": root, "quirks": list(quirks(rgb)), "files": files, "packed-skipped": packed_skipped}
    for backend in CPU_BACKEND_NAMES:
        out[backend] = decode_all(root / "data", backend)
        out[f"pack-{backend}"] = decode_all(root / "packed", backend)
    return out


@pytest.mark.parametrize("backend", CPU_BACKEND_NAMES)
def test_every_quirk_decodes_to_what_the_user_sees(decoded, backend):
    images, _ = decoded[backend]
    for name in decoded["quirks"]:
        want = reference(decoded["files"][name])
        assert name in images, name
        got = images[name].astype(int)
        assert got.shape == want.shape == (H, W, 3), name
        assert np.abs(got - want).max() <= LEVELS.get(name, 0), (name, np.abs(got - want).max())


@pytest.mark.cuda
@needs_dali
def test_every_quirk_decodes_to_what_the_user_sees_on_the_gpu(decoded):
    # nvJPEG has its own IDCT and chroma upsampling: held to the GPU's decode tolerance (mean levels)
    images, skipped = decode_all(decoded["root"] / "data", "dali", device="cuda")
    assert skipped == REFUSED
    for name in decoded["quirks"]:
        want = reference(decoded["files"][name])
        assert images[name].shape == want.shape, name
        assert np.abs(images[name].astype(int) - want).mean() <= DECODE_TOLERANCE["cuda"], name


def test_every_backend_gives_the_same_pixels_from_the_folder_and_from_the_pack(decoded):
    first, *others = CPU_BACKEND_NAMES
    for other in others:
        for name, image in decoded[first][0].items():
            assert np.abs(decoded[other][0][name].astype(int) - image).max() <= LEVELS.get(name, 0), name
        assert decoded[f"pack-{other}"][0].keys() == decoded[f"pack-{first}"][0].keys()
        for name, image in decoded[f"pack-{first}"][0].items():
            assert np.array_equal(decoded[f"pack-{other}"][0][name], image), name
    for name, image in decoded[f"pack-{first}"][0].items():  # re-encoded as JPEG (quality 90): close, not equal
        blocks = (image.astype(float) - reference(decoded["files"][name])).reshape(6, 8, 8, 8, 3).mean((1, 3))
        assert np.abs(blocks).mean() < 3.0, (name, np.abs(blocks).mean())  # 8x8 block means


@pytest.mark.parametrize("backend", CPU_BACKEND_NAMES)
def test_formats_a_backend_decodes_otherwise_are_refused_by_the_scan_naming_the_format(decoded, backend):
    # A GIF named .jpg was delivered by torchvision (PIL) and failed on dali-cpu mid-epoch ("nvImageCodec
    # failure: '#4'"); a float TIFF came out 110 levels apart; a TIFF's pages were read by the loaders
    # and refused by the packer.
    assert decoded[backend][1] == REFUSED
    assert decoded[f"pack-{backend}"][1] == {}


def test_the_packer_converts_the_formats_the_loaders_refuse_and_refuses_the_rest_alike(decoded):
    refused_by_both = {"pages_as.jpg", "truncated.jpg", "truncated.png"}
    assert decoded["packed-skipped"] == {name: REFUSED[name] for name in refused_by_both}
    packed = decoded[f"pack-{CPU_BACKEND_NAMES[0]}"][0]
    assert set(REFUSED) - refused_by_both <= set(packed)


@pytest.mark.parametrize("backend", CPU_BACKEND_NAMES)
def test_16_bit_gray_is_scaled_as_dali_scales_it_whatever_its_values(tmp_path, backend):
    # The torchvision backend kept a dark 16-bit PNG's values (0..199) where DALI gives round(v / 257) (0 or 1),
    # and took the high byte of a bright one (DALI rounds): the same file, other pixels.
    values = np.arange(H * W, dtype=np.int64).reshape(H, W)
    (tmp_path / "data" / "a").mkdir(parents=True)
    cases = {"dark.png": values % 200, "ramp.png": values * 21}
    for name, v in cases.items():
        (tmp_path / "data" / "a" / name).write_bytes(png16(v.astype(np.uint16)))
    images, skipped = decode_all(tmp_path / "data", backend)
    assert skipped == {}
    for name, v in cases.items():
        assert np.array_equal(images[name], np.repeat((v * 255 + 32767) // 65535, 3).reshape(H, W, 3)), name
    pack(tmp_path / "data", tmp_path / "packed", workers=1, progress=False)  # the packer's reading too (then JPEG)
    packed, _ = decode_all(tmp_path / "packed", backend)
    assert np.abs(packed["dark.png"].astype(int)).mean() < 2  # not the raw values 0..199


@pytest.mark.parametrize("backend", CPU_BACKEND_NAMES)
def test_one_pixel_and_one_pixel_wide_images(tmp_path, backend):
    (tmp_path / "data" / "a").mkdir(parents=True)
    wanted = {}
    for name, (h, w) in {"dot": (1, 1), "row": (1, 4000), "column": (4000, 1)}.items():
        rgb = textured_image(np.random.default_rng(h), max(h, 8), max(w, 8))[:h, :w]
        for ext in ("jpg", "png"):
            path = tmp_path / "data" / "a" / f"{name}.{ext}"
            Image.fromarray(rgb).save(path, quality=95)
            full = reference(path.read_bytes())
            top, left = CenterCrop(size=(1, 1)).anchor(h, w)
            wanted[path.name] = full[top : top + 1, left : left + 1]
    images, skipped = decode_all(tmp_path / "data", backend, size=(1, 1))
    assert skipped == {} and images.keys() == wanted.keys()
    for name, want in wanted.items():
        assert np.array_equal(images[name], want), name
    pack(tmp_path / "data", tmp_path / "packed", workers=1, progress=False)
    packed, skipped = decode_all(tmp_path / "packed", backend, size=(1, 1))
    assert skipped == {} and packed.keys() == wanted.keys()
    for name, want in wanted.items():
        assert np.abs(packed[name].astype(int) - want).max() <= 12, name  # re-encoded as JPEG


def _photos_with_targets(root: Path):
    """A box photographed at EXIF orientations 1..8 (stored turned), its COCO box and its mask (both drawn on
    the photo as displayed; the mask has no EXIF)."""
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    images, boxes = [], []
    for o in range(1, 9):
        pixels, mask = np.full((H, W, 3), 20, np.uint8), np.zeros((H, W), np.uint8)
        x, y, bw, bh = 4 + 3 * o, 5 + o, 20, 12
        pixels[y : y + bh, x : x + bw], mask[y : y + bh, x : x + bw] = 230, 2
        stored = Image.fromarray(pixels).transpose(STORED[o]) if o > 1 else Image.fromarray(pixels)
        stored.save(root / "images" / f"o{o}.jpg", quality=95, exif=exif(o))
        Image.fromarray(mask).save(root / "masks" / f"o{o}.png")
        images.append({"id": o, "file_name": f"o{o}.jpg", "width": W, "height": H})
        boxes.append({"id": o, "image_id": o, "category_id": 1, "bbox": [x, y, bw, bh], "area": 1, "iscrowd": 0})
    coco = {"images": images, "annotations": boxes, "categories": [{"id": 1, "name": "box"}]}
    (root / "ann.json").write_text(json.dumps(coco))
    return gpupipe.CocoDetection(root / "images", root / "ann.json"), gpupipe.SegmentationFolder(
        root / "images", root / "masks"
    )


def test_boxes_and_masks_stay_on_the_pixels_of_an_exif_rotated_photo(tmp_path):
    coco, segmentation = _photos_with_targets(tmp_path / "data")
    pack(coco, tmp_path / "packed-coco", workers=1, progress=False)
    pack(segmentation, tmp_path / "packed-seg", workers=1, progress=False)
    pipeline = [Decode(), CenterCrop(size=(30, 50))]
    for source in (coco, segmentation, tmp_path / "packed-coco", tmp_path / "packed-seg"):
        for backend in CPU_BACKEND_NAMES:
            loader = gpupipe.loader(source, pipeline, batch_size=8, backend=backend, shuffle=False, dtype="uint8")
            images, target = next(iter(loader))
            bright = images.float().mean(1) > 128
            for k in range(8):
                if isinstance(target, dict):  # boxes
                    x0, y0, x1, y1 = target["boxes"][k, 0].round().int().tolist()
                    drawn = torch.zeros_like(bright[k])
                    drawn[y0:y1, x0:x1] = True
                else:
                    drawn = target[k] == 2
                assert torch.equal(drawn, bright[k]), (source, backend, k)


@pytest.mark.parametrize("backend", CPU_BACKEND_NAMES)
def test_an_exif_rotated_photo_is_cropped_as_its_upright_twin(tmp_path, backend):
    # torchvision decoded a turned JPEG fully and resized it, and its upright twin at 1/2..1/8 scale in the DCT
    # (4 levels apart on average, and a phone's photos, mostly turned, lost the faster decode).
    shown = textured_image(np.random.default_rng(9), 192, 256)
    pipeline = [Decode(), gpupipe.RandomResizedCrop((24, 32), scale=(0.2, 0.4)), Output(dtype="uint8")]
    crops = []
    for o in (1, 2, 3, 5, 6, 8):
        (tmp_path / f"o{o}" / "a").mkdir(parents=True)
        stored = Image.fromarray(shown).transpose(STORED[o]) if o > 1 else Image.fromarray(shown)
        stored.save(tmp_path / f"o{o}" / "a" / "photo.jpg", quality=95, exif=exif(o))
        loader = gpupipe.loader(tmp_path / f"o{o}", pipeline, batch_size=1, backend=backend, device="cpu", seed=3)
        crops.append(next(iter(loader))[0].float())  # one sample, one seed: the same window
    for o, crop in zip((2, 3, 5, 6, 8), crops[1:]):
        assert (crop - crops[0]).abs().mean() < 1.0, o


def test_orientations_only_pil_reads_are_read_alike_everywhere(tmp_path):
    # PIL's exif_transpose turns these; DALI and torchvision.io do not: the scan, the packer and every backend
    # must read them one way (upright), or crops are planned on one size and cut from another. An XMP
    # orientation in a PNG or WebP was applied by torchvision (PIL) and the scan, not by DALI.
    rgb = textured_image(np.random.default_rng(4), H, W)
    (tmp_path / "data" / "a").mkdir(parents=True)
    img = Image.fromarray(rgb)
    xmp_app1 = b"http://ns.adobe.com/xap/1.0/\x00" + XMP
    jpeg = encoded(img, "JPEG", quality=95)
    files = {
        "long6.jpg": long_orientation(jpeg, 6),
        "xmp6.jpg": jpeg[:2] + b"\xff\xe1" + (len(xmp_app1) + 2).to_bytes(2, "big") + xmp_app1 + jpeg[2:],
        "xmp6.png": encoded(img, "PNG", pnginfo=png_xmp()),
        "xmp6.webp": encoded(img, "WEBP", lossless=True, xmp=XMP),
    }
    for name, data in files.items():
        (tmp_path / "data" / "a" / name).write_bytes(data)
    pack(tmp_path / "data", tmp_path / "packed", workers=1, progress=False)
    for backend in CPU_BACKEND_NAMES:
        images, skipped = decode_all(tmp_path / "data", backend)
        assert skipped == {} and images.keys() == files.keys()
        for name, image in images.items():
            stored = np.asarray(Image.open(io.BytesIO(files[name])).convert("RGB"))
            assert np.array_equal(image, stored), (backend, name)
        packed, _ = decode_all(tmp_path / "packed", backend)
        for name, image in packed.items():
            assert np.abs(image.astype(int) - rgb).mean() < 6.0, (backend, name)  # re-encoded, not turned (~80)
