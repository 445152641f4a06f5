"""Issue 35 (9-12): masks keep their ids at every bit depth on every backend; a resume refuses
what it cannot keep; ``--verify`` of a pack without checksums; every config value bounded."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import gpupipe
from gpupipe import ops
from gpupipe.loading.config import MAX_EPOCH
from gpupipe.pack import PackSettings, pack, verify
from helpers import CPU_BACKENDS, flat_folder, sample_ids

H, W = 6, 8


def raw_png(ids: np.ndarray, depth: int) -> bytes:
    """A gray PNG of ``depth`` bits whose stored samples are ``ids`` (PIL cannot write 2/4-bit gray)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    rows = b""
    for row in ids:
        if depth == 16:
            rows += b"\0" + row.astype(">u2").tobytes()
        else:
            bits = "".join(format(int(v), f"0{depth}b") for v in row)
            bits += "0" * (-len(bits) % 8)
            rows += b"\0" + int(bits, 2).to_bytes(len(bits) // 8, "big")
    ihdr = struct.pack(">IIBBBBB", ids.shape[1], ids.shape[0], depth, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def palette_png(ids: np.ndarray, colours: int, bits=None, transparency=None) -> bytes:
    import io

    img = Image.fromarray(ids, "P")
    img.putpalette([(i * 53 + c * 91) % 256 for i in range(colours) for c in range(3)])
    out = io.BytesIO()
    extra = {"bits": bits} if bits else {}
    if transparency is not None:
        extra["transparency"] = transparency
    img.save(out, "PNG", **extra)
    return out.getvalue()


#: mode name -> (largest id, writer of the ids, the PNG's (colour type, bit depth))
MODES = {
    "palette-1bit": (1, lambda a: palette_png(a, 2, bits=1), (3, 1)),
    "palette-2bit": (3, lambda a: palette_png(a, 4, bits=2), (3, 2)),
    "palette-4bit": (15, lambda a: palette_png(a, 16), (3, 4)),
    "palette-8bit": (200, lambda a: palette_png(a, 256), (3, 8)),
    "palette-transparency": (9, lambda a: palette_png(a, 16, transparency=0), (3, 4)),
    "gray-1bit": (1, lambda a: raw_png(a, 1), (0, 1)),
    "gray-2bit": (3, lambda a: raw_png(a, 2), (0, 2)),
    "gray-4bit": (15, lambda a: raw_png(a, 4), (0, 4)),
    "gray-8bit": (200, lambda a: raw_png(a, 8), (0, 8)),
    "gray-16bit": (200, lambda a: raw_png(a, 16), (0, 16)),
}


def ids_of(k: int, top: int) -> np.ndarray:
    """Sample ``k``'s ids: every id 0..top appears (ascending from k), in a (H, W) grid."""
    return ((np.arange(H * W).reshape(H, W) + k) % (top + 1)).astype(np.uint8)


def seg_folder(root: Path, mode: str, count: int = 4) -> Path:
    top, write, layout = MODES[mode]
    for sub in ("images", "masks"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for k in range(count):
        Image.fromarray(np.full((H, W, 3), 40 * k, np.uint8)).save(root / "images" / f"s{k}.png")
        data = write(ids_of(k, top))
        assert (data[25], data[24]) == layout, "the file has the layout the case is about"
        (root / "masks" / f"s{k}.png").write_bytes(data)
    return root


def masks_of(root: Path, backend: str, **kw) -> torch.Tensor:
    source = gpupipe.SegmentationFolder(root / "images", root / "masks")
    loader = gpupipe.loader(source, [ops.Decode(), ops.CenterCrop((H, W)), ops.Output("uint8")], batch_size=4,
                            backend=backend, num_threads=1, shuffle=False, **kw)
    return next(iter(loader))[1]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_masks_are_class_ids_whatever_their_bit_depth(tmp_path, mode, backend):
    root = seg_folder(tmp_path, mode)
    top = MODES[mode][0]
    masks = masks_of(root, backend)
    assert masks.dtype == torch.int64
    expected = torch.from_numpy(np.stack([ids_of(k, top) for k in range(4)]).astype(np.int64))
    assert torch.equal(masks, expected), f"{mode}: ids kept exactly on {backend}"


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_packed_low_bit_mask_keeps_its_ids(tmp_path, backend):
    root = seg_folder(tmp_path / "seg", "palette-4bit")
    dst = tmp_path / "packed"
    pack(gpupipe.SegmentationFolder(root / "images", root / "masks"), dst, PackSettings(), workers=1, progress=False)
    loader = gpupipe.loader(dst, [ops.Decode(), ops.CenterCrop((H, W)), ops.Output("uint8")], batch_size=4,
                            backend=backend, num_threads=1, shuffle=False)
    images, masks = next(iter(loader))
    order = [round(int(v) / 40) for v in images[:, 0, 0, 0]]  # the packer shuffles: sample k is grey 40 * k
    assert sorted(order) == [0, 1, 2, 3]
    assert torch.equal(masks, torch.from_numpy(np.stack([ids_of(k, 15) for k in order]).astype(np.int64)))


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_masks_whose_values_cannot_be_kept_are_refused_naming_the_file(tmp_path, backend):
    root = seg_folder(tmp_path, "gray-8bit")
    Image.fromarray(np.zeros((H, W, 3), np.uint8)).save(root / "masks" / "s1.png")  # RGB
    (root / "masks" / "s2.png").write_bytes(raw_png(np.full((H, W), 300, np.uint16), 16))  # ids past 255
    with pytest.raises(gpupipe.SampleError) as err:
        masks_of(root, backend)
    assert "s1.png" in str(err.value) and "colour type 2" in str(err.value)
    source = gpupipe.SegmentationFolder(root / "images", root / "masks")
    loader = gpupipe.loader(source, [ops.Decode(), ops.CenterCrop((H, W)), ops.Output("uint8")], batch_size=1,
                            backend=backend, num_threads=1, shuffle=False, on_error="skip")
    seen = [m for _, m in loader]
    assert len(seen) == 2, "both found by the scan (a 16-bit mask is decoded there), before the run"
    reasons = {Path(s.path).name: s.reason for s in loader.skipped}
    assert set(reasons) == {"s1.png", "s2.png"}
    assert "0..255" in reasons["s2.png"] and "300" in reasons["s2.png"]


# -- 11: --verify without checksums -------------------------------------------------------------------


def test_verify_a_pack_whose_shards_have_no_sha256(tmp_path):
    from helpers import rewrite_manifest

    dst = tmp_path / "packed"
    pack(flat_folder(tmp_path / "folder", 6), dst, PackSettings(), workers=1, progress=False)
    rewrite_manifest(dst, lambda m: [s.pop("sha256") for s in m["shards"]])
    assert verify(dst) == []
    proc = subprocess.run([sys.executable, "-m", "gpupipe.pack", "--verify", str(dst)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "checksums were not available" in proc.stderr + proc.stdout
    # contents are still checked: a changed byte inside a member's data is found through the index
    tar = next(dst.glob("*.tar"))
    data = bytearray(tar.read_bytes())
    data[5] ^= 0xFF  # inside the first member's tar header (its name)
    tar.write_bytes(bytes(data))
    assert verify(dst), "a damaged tar header is found without checksums"
    tar.write_bytes(tar.read_bytes() + b"\0" * 512)
    assert any("bytes, the manifest says" in p for p in verify(dst)), "sizes are checked"


# -- 12: bounds ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [2**64, -1, 2**70])
def test_seed_is_bounded_when_the_config_is_made(tmp_path, seed):
    with pytest.raises(ValueError, match="seed"):
        gpupipe.loader(flat_folder(tmp_path, 4), "val", batch_size=2, backend="torchvision", seed=seed)


@pytest.mark.parametrize("field, value", [("batch_size", 2**40), ("prefetch", 2**40), ("num_threads", 2**40),
                                          ("max_pixels", 2**70), ("log_every", 2**70)])
def test_every_int_setting_is_bounded(field, value):
    with pytest.raises(ValueError, match=field):
        gpupipe.LoaderConfig(batch_size=2, **{field: value}) if field != "batch_size" else gpupipe.LoaderConfig(
            batch_size=value)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_the_largest_seed_and_epoch_work_on_every_backend(tmp_path, backend):
    folder = flat_folder(tmp_path, 4)
    pipeline = [ops.Decode(), ops.RandomResizedCrop(8), ops.Output("uint8")]
    loader = gpupipe.loader(folder, pipeline, batch_size=2, backend=backend, num_threads=1, seed=2**64 - 1)
    loader.set_epoch(MAX_EPOCH)
    assert len(list(loader)) == 2
    with pytest.raises(ValueError, match="epoch"):
        loader.set_epoch(MAX_EPOCH + 1)
    state = loader.state_dict()
    state["epoch"] = MAX_EPOCH + 1
    with pytest.raises(ValueError, match="epoch"):
        loader.load_state_dict(state)
    with pytest.raises(ValueError, match="epoch"):
        loader.set_epoch(2**63 - 1)  # worked on torchvision and overflowed on dali-cpu: one bound now


# -- 10: a resume refuses what it cannot keep ---------------------------------------------------------


def saved_state(folder, **kw):
    settings = {"batch_size": 4, "backend": "torchvision", "num_threads": 0, "seed": 3, **kw}
    loader = gpupipe.loader(folder, [ops.Decode(), ops.Resize((8, 8)), ops.Output("uint8")], **settings)
    it = iter(loader)
    next(it)
    return loader.state_dict()


def fresh(folder, **kw):
    settings = {"batch_size": 4, "backend": "torchvision", "num_threads": 0, "seed": 3, **kw}
    return gpupipe.loader(folder, [ops.Decode(), ops.Resize((8, 8)), ops.Output("uint8")], **settings)


@pytest.mark.parametrize("field, saved, loaded", [  # batch_size, drop_last: the rest is read (test_resume_resplit)
    ("shuffle", True, False), ("seed", 3, 4),
])
def test_a_state_refuses_a_loader_whose_settings_change_the_samples(tmp_path, field, saved, loaded):
    folder = flat_folder(tmp_path, 12)
    state = saved_state(folder, **{field: saved})
    with pytest.raises(ValueError, match=rf"{field} differs: the state has {field} {saved!r}, this loader {field} {loaded!r}"):
        fresh(folder, **{field: loaded}).load_state_dict(state)


def test_a_state_refuses_another_dataset(tmp_path):
    state = saved_state(flat_folder(tmp_path / "a", 12))
    with pytest.raises(ValueError, match="samples differs: the state has samples 12, this loader samples 13"):
        fresh(flat_folder(tmp_path / "b", 13)).load_state_dict(state)
    other = flat_folder(tmp_path / "c", 12)
    (other / "class_0" / "s0000.png").rename(other / "class_0" / "renamed.png")
    with pytest.raises(ValueError, match="dataset differs"):
        fresh(other).load_state_dict(state)


def test_a_state_resumes_the_same_dataset_moved_elsewhere(tmp_path, recwarn):
    import shutil

    folder = flat_folder(tmp_path / "a", 12)
    first = fresh(folder)
    it = iter(first)
    next(it)
    state = first.state_dict()
    rest = [sample_ids(images) for images, _ in it]
    moved = shutil.copytree(folder, tmp_path / "elsewhere" / "data")
    second = fresh(moved)
    second.load_state_dict(state)
    assert [sample_ids(images) for images, _ in second] == rest
    assert not [w for w in recwarn if "load_state_dict" in str(w.message)]


def test_an_old_state_without_the_fields_loads_with_a_warning(tmp_path):
    folder = flat_folder(tmp_path, 12)
    state = saved_state(folder)
    old = {k: state[k] for k in ("epoch", "batches_done", "seed", "rank", "world_size", "backend")}
    old["format"] = 2
    loader = fresh(folder)
    with pytest.warns(UserWarning, match="does not record batch_size, shuffle, drop_last, samples, dataset"):
        loader.load_state_dict(old)
    assert len(list(loader)) == 2, "it resumes after the batch taken"
