"""What the tests share: backend/device parameter lists, tolerances, and tiny generated images.

Tests import from here, never from ``conftest.py`` (which holds fixtures only).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np
import pytest
import torch
from PIL import Image

HAS_CUDA = torch.cuda.is_available()
HAS_DALI = importlib.util.find_spec("nvidia") is not None and importlib.util.find_spec("nvidia.dali") is not None

needs_cuda = pytest.mark.cuda
needs_dali = pytest.mark.skipif(not HAS_DALI, reason="DALI is not installed")


def backend_param(backend: str, device: str = "cpu"):
    """A ``(backend, device)`` parameter with the marks it needs (``cuda``, DALI installed)."""
    marks = ([needs_cuda] if device == "cuda" else []) + ([needs_dali] if backend.startswith("dali") else [])
    return pytest.param(backend, device, marks=marks, id=f"{backend}-{device}")


#: Every (backend, device) pair; the CUDA ones are skipped without a GPU.
BACKEND_DEVICES = [backend_param(b, d) for b, d in
                   (("dali-cpu", "cpu"), ("torchvision", "cpu"), ("dali", "cuda"), ("torchvision", "cuda"),
                    ("dali-cpu", "cuda"))]
#: The DALI ones (held to torchvision in the parity tests).
DALI_BACKEND_DEVICES = [p for p in BACKEND_DEVICES if p.values[0].startswith("dali")]
#: The DALI ones that run on the CPU.
CPU_DALI = [p for p in DALI_BACKEND_DEVICES if p.values[1] == "cpu"]
#: The backends that run without a GPU, one parameter each (for tests that take no device).
CPU_BACKENDS = [pytest.param("dali-cpu", marks=needs_dali, id="dali-cpu"), pytest.param("torchvision", id="torchvision")]
#: The same backends by name, those installed only: for one ``torchrun`` launch that runs each in turn (a
#: launch costs ~10 s of imports on the 2-core VM; one per backend doubled that).
CPU_BACKEND_NAMES = [p.values[0] for p in CPU_BACKENDS if HAS_DALI or not p.values[0].startswith("dali")]

#: Mean absolute difference (uint8 levels) allowed between a decode and PIL's reference, per device.
#: CPU: both backends decode with libjpeg-turbo and agree exactly (0.5 allows rounding in colour
#: conversions). CUDA: nvJPEG and the hardware decoder use their own IDCT and chroma upsampling;
#: DALI's documentation does not bound the difference, and 6 levels is PROVISIONAL until measured
#: on a GPU (the GPU proof reports the measured value).
DECODE_TOLERANCE = {"cpu": 0.5, "cuda": 6.0}


def textured_image(rng: np.random.Generator, height: int, width: int, tint: Sequence[float] = (1, 1, 1)) -> np.ndarray:
    """A smooth random image (blurred noise plus a gradient): ``(H, W, 3)`` uint8."""
    coarse = rng.random((max(2, height // 8), max(2, width // 8), 3))
    img = np.asarray(Image.fromarray((coarse * 255).astype(np.uint8)).resize((width, height), Image.BICUBIC), np.float32)
    y, x = np.mgrid[0:height, 0:width]
    img += (x / width * 60)[..., None] - 30
    img *= np.asarray(tint, np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def write_image(path: Path, array: np.ndarray, quality: int = 92) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() in (".jpg", ".jpeg"):
        Image.fromarray(array).save(path, quality=quality)
    else:
        Image.fromarray(array).save(path)
    return path


def make_image_folder(
    root: Path,
    counts: Dict[str, int],
    *,
    sizes: Tuple[int, int] = (48, 96),
    seed: int = 0,
    ext: str = ".jpg",
) -> List[Tuple[Path, int]]:
    """Writes ``root/<class>/<i>.jpg`` for each class; returns ``(path, label)`` sorted like ImageFolder."""
    rng = np.random.default_rng(seed)
    written = []
    for label, name in enumerate(sorted(counts)):
        for i in range(counts[name]):
            h, w = (int(v) for v in rng.integers(sizes[0], sizes[1], 2))
            written.append((write_image(root / name / f"img_{i:03d}{ext}", textured_image(rng, h, w)), label))
    return written


def flat_folder(root: Path, count: int, classes: int = 3, size: Tuple[int, int] = (20, 24)) -> Path:
    """``count`` PNGs whose colour encodes the sample index; sample i is in class ``i % classes``.

    The index is coded in steps of 16 levels (R: i % 16, G: i // 16), so it
    survives JPEG re-encoding; :func:`sample_ids` reads it back.
    """
    for i in range(count):
        folder = root / f"class_{i % classes}"
        folder.mkdir(parents=True, exist_ok=True)
        colour = ((i % 16) * 16 + 8, (i // 16) * 16 + 8, 77)
        Image.fromarray(np.full((*size, 3), colour, np.uint8)).save(folder / f"s{i:04d}.png")
    return root


def sample_ids(images: torch.Tensor) -> list:
    """The sample indices :func:`flat_folder` coded into uint8 ``(B, 3, H, W)`` images."""
    steps = ((images[:, :, 0, 0].to(torch.float32) - 8) / 16).round().to(torch.int64)
    return (steps[:, 0] + 16 * steps[:, 1]).tolist()


def read_ids_and_labels(source) -> dict:
    """``{"ids", "labels"}`` of every sample of ``source`` (a :func:`flat_folder`, packed or not), in order,
    read by the ``torchvision`` backend at 8x8 px."""
    import gpupipe

    loader = gpupipe.loader(source, [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")],
                            batch_size=8, backend="torchvision", num_threads=1, shuffle=False)
    ids, labels = [], []
    for images, targets in loader:
        ids += sample_ids(images)
        labels += [int(v) for v in targets]
    return {"ids": ids, "labels": labels}


def collect(loader) -> list:
    return [(images, targets) for images, targets in loader]


def rank_loader(source, world: int = 1, rank: int = 0, **kw):
    """Rank ``rank`` of ``world`` simulated in this process (explicit ``rank`` / ``world_size``), reading ``source``
    at 8x8 uint8 (``pipeline=`` for another) in batches of 2 with seed 7 on ``torchvision`` unless ``kw`` say
    otherwise."""
    import gpupipe

    kw = {"batch_size": 2, "seed": 7, "backend": "torchvision", **kw}
    pipeline = kw.pop("pipeline", [gpupipe.Decode(), gpupipe.Resize((8, 8)), gpupipe.Output("uint8")])
    threads = 0 if kw["backend"] == "torchvision" else 1
    return gpupipe.loader(source, pipeline, num_threads=threads, rank=rank, world_size=world, device="cpu", **kw)


def rank_loaders(source, world: int, **kw) -> list:
    """Every rank of ``world`` (``rank_loader``)."""
    return [rank_loader(source, world, rank, **kw) for rank in range(world)]


def read_in_step(loaders, batches=None, its=None) -> Tuple[list, list]:
    """Reads every rank in step (as DDP does), ``batches`` batches or to the end (from the iterators ``its``, else
    new passes): ``[(id, image, target)]`` in order (ids as :func:`sample_ids` reads them), and the iterators."""
    its = its or [iter(loader) for loader in loaders]
    got: list = []
    for _ in range(batches if batches is not None else 10**6):
        more = [b for b in (next(it, None) for it in its) if b is not None]
        if not more:
            break
        for images, targets in more:
            got += zip(sample_ids(images), images, targets)
    return got, its


def rewrite_manifest(dst: Path, edit) -> dict:
    """Edits a packed folder's manifest with ``edit(manifest)`` and re-signs it (its checksum), as
    someone who edits it on purpose would: the readers must then catch what the edit did."""
    import json

    from gpupipe.shards import format as shardfmt

    path = Path(dst) / shardfmt.MANIFEST
    manifest = json.loads(path.read_text())
    edit(manifest)
    manifest["checksum"] = shardfmt.checksum(manifest)
    path.write_text(json.dumps(manifest))
    return manifest



def replace_packed_member(packed: Path, member: str, data: bytes) -> None:
    """Rewrites shard 0 of ``packed`` with ``member`` holding ``data``, its index and its manifest entry made to
    agree (as a writer of its own with a bug, or someone on purpose, would)."""
    import hashlib
    import io
    import tarfile

    from gpupipe.shards import format as shardfmt

    tar_path, index = packed / "shard-000000.tar", packed / "shard-000000.idx"
    with tarfile.open(tar_path) as tar:
        members = [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(tar_path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, body in members:
            body = data if name == member else body
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    entries: dict = {}
    with tarfile.open(tar_path) as tar:
        for m in tar.getmembers():
            key, ext = m.name.split(".", 1)
            entries.setdefault(key, {})[ext] = shardfmt.Member(m.name, m.offset_data, m.size)
    shardfmt.write_index(index, list(entries.values()))

    def edit(manifest):
        shard = manifest["shards"][0]
        shard.update(bytes=tar_path.stat().st_size, sha256=hashlib.sha256(tar_path.read_bytes()).hexdigest(),
                     index_sha256=hashlib.sha256(index.read_bytes()).hexdigest())
        manifest["totals"]["bytes"] = shard["bytes"]

    rewrite_manifest(packed, edit)

#: Detection test objects: category id -> colour. Category ids are out of order on purpose
#: (labels are numbered in sorted id order: 3 -> 0 red, 7 -> 1 green, 11 -> 2 blue).
OBJECT_COLOURS = {3: (250, 30, 30), 7: (30, 250, 30), 11: (30, 30, 250)}


def make_detection_set(root: Path, count: int, *, seed: int = 0, size_range=(70, 120)) -> Tuple[Path, Path]:
    """PNG images with up to three bright, non-overlapping rectangles on a dark background, and
    their COCO annotations (every third image has none: an empty target).

    Returns:
        ``(images folder, annotation file)``.
    """
    rng = np.random.default_rng(seed)
    images, annotations = [], []
    (root / "images").mkdir(parents=True, exist_ok=True)
    for i in range(count):
        h, w = (int(v) for v in rng.integers(*size_range, size=2))
        pixels = np.full((h, w, 3), 12, np.uint8)
        taken = np.zeros((h, w), bool)
        for category, colour in OBJECT_COLOURS.items():
            if i % 3 == 2:
                break
            for _ in range(50):  # rejection sampling: a free spot with a 3-pixel gap to the others
                bw, bh = int(rng.integers(14, w // 2)), int(rng.integers(14, h // 2))
                x, y = int(rng.integers(0, w - bw + 1)), int(rng.integers(0, h - bh + 1))
                if not taken[max(0, y - 3):y + bh + 3, max(0, x - 3):x + bw + 3].any():
                    break
            else:
                continue
            taken[y:y + bh, x:x + bw] = True
            pixels[y:y + bh, x:x + bw] = colour
            annotations.append({"id": len(annotations) + 1, "image_id": 100 + i, "category_id": category,
                                "bbox": [x, y, bw, bh], "area": bw * bh, "iscrowd": 0})
        Image.fromarray(pixels).save(root / "images" / f"img{i:03d}.png")
        images.append({"id": 100 + i, "file_name": f"img{i:03d}.png", "width": w, "height": h})
    categories = [{"id": c, "name": n} for c, n in ((11, "blue"), (3, "red"), (7, "green"))]
    path = root / "annotations.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return root / "images", path


def object_pixels(images: torch.Tensor) -> torch.Tensor:
    """``(B, 3, H, W)`` bool: where each label's colour shows (its channel well above the others; holds
    through the SSD preset's colour distortion, and the grey zoom-out fill is no colour)."""
    x = images.float()
    if x.max() <= 1.5:
        x = x * 255
    out = []
    for c in range(3):
        others = torch.stack([x[:, k] for k in range(3) if k != c]).amax(dim=0)
        out.append((x[:, c] > 50) & (x[:, c] - others > 35))
    return torch.stack(out, dim=1)


def two_ranks(tmp_path: Path, body: str, timeout: int = 300) -> List:
    """Runs ``body`` in two ``torchrun`` ranks (gloo; ``dist``, ``torch``, ``gpupipe`` and these
    helpers imported); ``body`` sets ``result``, which comes back per rank (JSON). A rank that hangs
    dumps every thread's stack after ``timeout - 60`` seconds and exits."""
    script = tmp_path / "worker.py"
    script.write_text(
        "import faulthandler, json, sys, torch, torch.distributed as dist\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import gpupipe\nfrom helpers import sample_ids\n"
        f"faulthandler.dump_traceback_later({timeout - 60}, exit=True)\n"
        "dist.init_process_group('gloo')\n"
        + textwrap.dedent(body).strip() + "\n"
        f"with open({str(tmp_path)!r} + f'/rank{{dist.get_rank()}}.json', 'w') as fh:\n"
        "    json.dump(result, fh)\n"
        "dist.destroy_process_group()\n")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(script)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


def load_example(name: str):
    """``examples/<name>.py`` imported as a module (the tests call its functions); its folder goes on
    ``sys.path``, as when the script is run, for the examples' shared ``_common``."""
    folder = str(Path(__file__).parents[1] / "examples")
    if folder not in sys.path:
        sys.path.append(folder)
    spec = importlib.util.spec_from_file_location(f"example_{name}", Path(folder) / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rest_and_resumed(first, second) -> Tuple[list, list]:
    """Takes one batch from ``first`` and saves its state; returns the rest of that epoch as ``first``
    gives it and as ``second`` gives it after loading the state: two lists of ``(images, targets)``."""
    it = iter(first)
    next(it)
    state = first.state_dict()
    rest = list(it)
    second.load_state_dict(state)
    return rest, list(second)


def env_without(folder: Path, modules: Sequence[str]) -> Dict[str, str]:
    """An environment for a child Python in which importing each of ``modules`` fails as if it
    were not installed (a package of that name raising ModuleNotFoundError shadows the real one)."""
    for name in modules:
        (folder / name).mkdir(parents=True, exist_ok=True)
        (folder / name / "__init__.py").write_text(
            f"raise ModuleNotFoundError({'No module named ' + repr(name)!r}, name={name!r})\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))}


#: A user's op in one file (tests/test_op_registry.py, tests/test_extension_points.py write it to tmp_path).
TOY_OP = '''
"""A user's op, in one file: the class, its planner and its lowering on each backend."""
from dataclasses import dataclass

import numpy as np

from gpupipe.ops import Op, register


@dataclass(frozen=True)
class ToyInvert(Op):
    """Inverts the image (255 - x) with probability ``p``."""

    p: float = 1.0


def plan(op, step):
    return {"invert": step.coin(op.p).astype(np.int32)}


def on_torchvision(item, params, op, spec):
    if int(params["invert"]):
        item.image = 255 - item.image


def on_dali(g, j, op):
    from nvidia.dali import fn, types

    flag = g.on_device(fn.cast(g.p(j, "invert"), dtype=types.FLOAT))
    x = fn.cast(g.images, dtype=types.FLOAT)
    g.images = fn.cast(x + flag * (255.0 - 2.0 * x), dtype=types.UINT8)


register(ToyInvert, planner=plan, lowerings={"torchvision": on_torchvision, "dali": on_dali})


@dataclass(frozen=True)
class ToyTorchvisionOnly(Op):
    """An op with a torchvision lowering only."""


def leave_alone(item, params, op, spec):
    pass


register(ToyTorchvisionOnly, lowerings={"torchvision": leave_alone})
'''
