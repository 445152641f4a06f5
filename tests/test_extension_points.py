"""Extension points (#32): adding an op, a target kind, a source or a backend is one new file plus its
registrations, with no edit of gpupipe's files. Each toy below is written to ``tmp_path``, imported
from there, and run end to end through ``gpupipe.loader`` (on torchvision, and dali-cpu where it
applies); docs/development.md ("Where each kind of change goes") lists the same steps."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import CPU_BACKENDS, HAS_DALI, TOY_OP
from PIL import Image

import gpupipe
from gpupipe import backends, ops, targets
from gpupipe.backends.common import NoTargetLowering
from gpupipe.backends.torchvision.targets import TARGETS as TORCHVISION_TARGETS
from gpupipe.loading import batchsteps
from gpupipe.ops import registry as op_registry
from gpupipe.targets import TargetKind

PACKAGE = Path(gpupipe.__file__).resolve().parent

TOY_SOURCE = '''
"""A source of one's own: a CSV file of ``image,class`` rows, in one file (a ``FileSource``: every
backend reads its files, DALI's file reader included)."""
import csv
from pathlib import Path

import numpy as np

from gpupipe.sources import FileSource


class CsvImages(FileSource):
    """The images a CSV file lists, each with its class name; paths are relative to the CSV."""

    def __init__(self, path):
        path = Path(path)
        with open(path, newline="") as f:
            rows = [row for row in csv.reader(f) if row]
        self.classes = sorted({name for _, name in rows})
        self.names = [str(path.parent / image) for image, _ in rows]
        self.labels = np.array([self.classes.index(name) for _, name in rows], np.int64)
'''

TOY_KIND = '''
"""Two target kinds of one's own, each in one file with its registrations: ``weight`` (one number per
image, batched on the host: no backend needs a lowering) and ``points`` (``(K, 2)`` ``(x, y)`` points
that move with the pixels: a lowering on the torchvision backend only)."""
import numpy as np
import torch

from gpupipe.backends.torchvision.targets import torchvision_target
from gpupipe.sources import FileSource
from gpupipe.targets import Target, register


class Weights(Target):
    """A float per image; a batch is ``(B,)`` float32."""

    kind = "weight"
    member = "json"
    sources = "a WeightedImages source"

    def read(self, source, index):
        return float(source.weights[index])

    def batch(self, source, indices):
        return torch.from_numpy(source.weights[np.asarray(indices, np.int64)])


class Points(Target):
    """``(K, 2)`` points per image; a batch is ``(B, K, 2)`` float32."""

    kind = "points"
    moves_with_pixels = True
    member = "json"
    sources = "a PointImages source"

    def read(self, source, index):
        return source.points[index]


WEIGHT = register(Weights(), "sample weights").kind
POINTS = register(Points(), "points").kind


@torchvision_target(POINTS)
class TorchvisionPoints:
    """Points move by each geometric op's affine map."""

    def load(self, source, index, size, path):
        return np.asarray(source.points[index], np.float64)

    def move(self, state, kernel, params, op, spec):
        affine = np.asarray(params["affine"], np.float64)
        return state @ affine[:, :2].T + affine[:, 2]

    def finish(self, state, spec):
        return torch.from_numpy(state.astype(np.float32))

    def stack(self, parts, spec):
        return torch.stack([p if p is not None else torch.zeros(2, 2) for p in parts])

    def replace(self, part, row, value):
        part[row] = value
        return part

    def complete(self, part, source, indices, content_sizes):
        return part


class WeightedImages(FileSource):
    """Image files, each with a weight."""

    kind = WEIGHT

    def __init__(self, files, weights):
        self.classes, self.names = ["all"], [str(f) for f in files]
        self.labels = np.zeros(len(files), np.int64)
        self.weights = np.asarray(weights, np.float32)


class PointImages(FileSource):
    """Image files, each with two points."""

    kind = POINTS

    def __init__(self, files, points):
        self.classes, self.names = ["all"], [str(f) for f in files]
        self.labels = np.zeros(len(files), np.int64)
        self.points = [np.asarray(p, np.float64) for p in points]
'''

TOY_BACKEND = '''
"""A backend of one's own, in one file: PIL decodes, numpy crops, one sample at a time in the
main process. It registers its name, its op lowering table (``Decode``, ``CenterCrop``) and its
target lowering table (image-level kinds only)."""
import io

import numpy as np
import torch
from PIL import Image

from gpupipe import ops
from gpupipe.backends import BackendInfo, register
from gpupipe.backends.common import TargetLowerings, batch_slots
from gpupipe.backends.torchvision.targets import ImageLevel
from gpupipe.ops.registry import lowering_table
from gpupipe.plan import Planner

NAME = "toy-pil"
LOWERINGS = lowering_table(NAME)
TARGETS = TargetLowerings(NAME, ImageLevel())


@LOWERINGS.register(ops.Decode)
def decode(image, params, op):
    return image


@LOWERINGS.register(ops.CenterCrop)
def center_crop(image, params, op):
    top, left = int(params["top"]), int(params["left"])
    return image[:, top : top + int(params["height"]), left : left + int(params["width"])]


class PilBackend:
    """Reads one rank's epoch batch by batch."""

    name = NAME

    def __init__(self, source, spec, config, placement, errors):
        self.source, self.spec, self.batch_size = source, spec, config.batch_size
        self.planner = Planner(spec, config.seed)
        self.sizes = source.sizes()
        self.batches_read = 0

    def iter_epoch(self, read, start=0, upcoming=None):
        for b in range(start, read.batches):
            indices, positions = batch_slots(read.share, b, self.batch_size)
            plan = self.planner.plan(read.epoch, positions, self.sizes[indices], None)
            images = []
            for k, index in enumerate(indices):
                with Image.open(io.BytesIO(self.source.read_bytes(int(index)).tobytes())) as img:
                    image = torch.from_numpy(np.asarray(img.convert("RGB")).copy()).permute(2, 0, 1)
                for op, params in zip(self.spec.ops, plan.sample(k)):
                    image = LOWERINGS[type(op)].apply(image, params, op)
                images.append(image)
            self.batches_read += 1
            yield torch.stack(images), TARGETS.of(self.source.target).complete(None, self.source, indices, None)

    def close(self):
        pass


register(BackendInfo(NAME, "PIL", needs_cuda=False, main_process=True, factory=f"{__name__}:PilBackend",
                     lowerings=__name__, targets=__name__))
'''

TOY_BATCH_OP = '''
"""A batch op of one's own, in one file: the class and its step in the table of batch-level work."""
from dataclasses import dataclass

from gpupipe.loading.batchsteps import batch_step
from gpupipe.ops import BatchOp


@dataclass(frozen=True)
class ToyNegate(BatchOp):
    """Negates each float batch, on the loader's device, after it arrives."""


@batch_step(ToyNegate)
def negate(ops, spec, num_classes):
    return lambda images, targets, key: (-images, targets)
'''

TOYS = {"toy_op": TOY_OP, "toy_source": TOY_SOURCE, "toy_kind": TOY_KIND, "toy_backend": TOY_BACKEND,
        "toy_batch_op": TOY_BATCH_OP}


@pytest.fixture
def toys(tmp_path, monkeypatch):
    """Each toy written as one file to ``tmp_path/toys`` and imported from there; unregistered after."""
    folder = tmp_path / "toys"
    folder.mkdir()
    for name, text in TOYS.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(folder))
    modules = {name: importlib.import_module(name) for name in TOYS}
    yield modules
    op_registry.unregister(modules["toy_op"].ToyInvert)
    op_registry.unregister(modules["toy_op"].ToyTorchvisionOnly)
    batchsteps.remove_batch_step(modules["toy_batch_op"].ToyNegate)
    op_registry.unregister(modules["toy_batch_op"].ToyNegate)
    kind = modules["toy_kind"]
    for k in (kind.WEIGHT, kind.POINTS):
        TORCHVISION_TARGETS.pop(k, None)
        targets.unregister(k)
    backends.unregister("toy-pil")
    op_registry.LOWERINGS.pop("toy-pil", None)
    for name in TOYS:
        sys.modules.pop(name, None)


@pytest.fixture
def images(tmp_path):
    """Eight 40x60 PNGs (``i.png``), each a different flat grey, and a CSV naming them in two classes."""
    folder = tmp_path / "images"
    folder.mkdir()
    rows = []
    for i in range(8):
        Image.fromarray(np.full((40, 60, 3), 20 + 25 * i, np.uint8)).save(folder / f"{i}.png")
        rows.append(f"{i}.png,{'odd' if i % 2 else 'even'}")
    (folder / "list.csv").write_text("\n".join(rows) + "\n")
    return folder


def read_all(source, pipeline, backend, batch_size=4):
    loader = gpupipe.loader(source, pipeline, batch_size=batch_size, backend=backend, device="cpu",
                            shuffle=False, num_threads=1, dtype="uint8", seed=3)
    images, targets_ = zip(*loader)
    return loader, torch.cat(images), targets_


def test_each_toy_is_one_file_outside_gpupipe(toys):
    for name, module in toys.items():
        path = Path(module.__file__).resolve()
        assert path.name == f"{name}.py" and PACKAGE not in path.parents


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_toy_op_and_a_toy_source_run_end_to_end(toys, images, backend):
    source = toys["toy_source"].CsvImages(images / "list.csv")
    assert source.classes == ["even", "odd"] and len(source) == 8
    pipeline = [ops.Decode(), ops.CenterCrop(32), toys["toy_op"].ToyInvert()]
    _, got, labels = read_all(source, pipeline, backend)
    grey = torch.tensor([20 + 25 * i for i in range(8)], dtype=torch.uint8)
    assert got.shape == (8, 3, 32, 32)
    assert torch.equal(got[:, :, 16, 16], (255 - grey)[:, None].expand(8, 3)), "every image negated"
    assert torch.cat(labels).tolist() == [0, 1] * 4


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_toy_batch_op_runs_after_the_batch_arrives(toys, images, backend):
    source = toys["toy_source"].CsvImages(images / "list.csv")
    pipeline = [ops.Decode(), ops.CenterCrop(32), ops.Normalize()]
    plain = gpupipe.loader(source, pipeline, batch_size=4, backend=backend, device="cpu", num_threads=1)
    negated = gpupipe.loader(source, [*pipeline, toys["toy_batch_op"].ToyNegate()], batch_size=4,
                             backend=backend, device="cpu", num_threads=1)
    for (got, labels), (want, want_labels) in zip(negated, plain, strict=True):
        assert torch.equal(got, -want) and torch.equal(labels, want_labels)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_toy_image_level_target_kind_needs_no_backend_lowering(toys, images, backend):
    kind = toys["toy_kind"]
    assert TargetKind("weight") is kind.WEIGHT and kind.WEIGHT.title == "sample weights"
    assert kind.WEIGHT in targets.IMAGE_LEVEL and kind.WEIGHT in ops.Resize.carries
    weights = np.linspace(0.5, 4.0, 8, dtype=np.float32)
    source = kind.WeightedImages(sorted(images.glob("*.png")), weights)
    _, got, batches = read_all(source, [ops.Decode(), ops.Resize((20, 30)), ops.HorizontalFlip()], backend)
    assert got.shape == (8, 3, 20, 30)
    assert torch.cat(batches).tolist() == weights.tolist()


def test_a_toy_kind_that_moves_with_the_pixels_moves_on_its_backend_and_is_refused_by_name_elsewhere(toys, images):
    kind = toys["toy_kind"]
    points = [[[10.0, 8.0], [50.0, 30.0 + i]] for i in range(8)]
    source = kind.PointImages(sorted(images.glob("*.png")), points)
    _, got, batches = read_all(source, [ops.Decode(), ops.Resize((20, 30))], "torchvision")
    moved = torch.cat(batches)
    assert got.shape == (8, 3, 20, 30) and moved.shape == (8, 2, 2)
    assert torch.allclose(moved, torch.tensor(points) * 0.5), "halved with the 40x60 image"
    if HAS_DALI:
        with pytest.raises(NoTargetLowering, match=r"points have no target lowering on backend 'dali-cpu' "
                                                   r"\(it lowers: boxes, mask\)"):
            gpupipe.loader(source, [ops.Decode(), ops.CenterCrop(32)], batch_size=2, backend="dali-cpu", device="cpu")
    with pytest.raises(NoTargetLowering, match="points have no target lowering on backend 'toy-pil'"):
        gpupipe.loader(source, [ops.Decode(), ops.CenterCrop(32)], batch_size=2, backend="toy-pil", device="cpu")


def test_a_toy_backend_reads_what_torchvision_reads(toys, images):
    source = toys["toy_source"].CsvImages(images / "list.csv")
    pipeline = [ops.Decode(), ops.CenterCrop(32)]
    loader, got, labels = read_all(source, pipeline, "toy-pil", batch_size=3)
    _, want, want_labels = read_all(source, pipeline, "torchvision", batch_size=3)
    assert loader.backend == "toy-pil" and len(labels) == 3
    assert torch.equal(got, want) and torch.equal(torch.cat(labels), torch.cat(want_labels))
    with pytest.raises(ValueError, match=r"ToyInvert has no lowering on backend 'toy-pil'"):
        gpupipe.loader(source, pipeline + [toys["toy_op"].ToyInvert()], batch_size=2, backend="toy-pil",
                       device="cpu")


def test_a_second_registration_of_a_kind_or_a_backend_is_refused_naming_both(toys):
    kind = toys["toy_kind"]
    with pytest.raises(targets.TargetRegistryError, match="target kind 'weight' registered twice"):
        targets.register(type("Weights", (targets.Target,), {"kind": "weight"})())
    with pytest.raises(op_registry.RegistryError, match=r"target kind 'points': torchvision target lowering "
                                                        r"registered twice: toy_kind\.TorchvisionPoints and"):
        TORCHVISION_TARGETS.register(kind.POINTS)(type("Other", (), {}))
    info = backends.REGISTRY["toy-pil"]
    with pytest.raises(op_registry.RegistryError, match="backend 'toy-pil' registered twice: toy_backend:PilBackend"):
        backends.register(backends.BackendInfo("toy-pil", "PIL", needs_cuda=False, main_process=True,
                                               factory="elsewhere:Other", lowerings=info.lowerings))


BACKEND_LIBRARIES = ("nvidia", "torchvision")


def backend_imports(folder: Path) -> list[str]:
    """``file: module`` of every import of a backend library or of ``gpupipe.backends`` in ``folder``'s
    files (at the top, in functions and under ``TYPE_CHECKING`` alike)."""
    found = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [("." * node.level) + (node.module or "")]
            else:
                continue
            found += [f"{path.name}: {name}" for name in names
                      if name.split(".")[0] in BACKEND_LIBRARIES or "backends" in name.split(".")]
    return found


def test_targets_import_no_backend_library():
    """What a target is lives in gpupipe/targets; how it moves on a backend lives with the backend."""
    assert backend_imports(PACKAGE / "targets") == []
    code = ("import importlib, pkgutil, sys, gpupipe.targets as t\n"
            "for m in pkgutil.iter_modules(t.__path__): importlib.import_module('gpupipe.targets.' + m.name)\n"
            "print(sorted(m for m in sys.modules if m.startswith(('nvidia.dali', 'torchvision.transforms'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_import_check_sees_a_backend_import(tmp_path):
    (tmp_path / "bad.py").write_text("def f():\n    from nvidia.dali import fn\n    from ..backends.dali import targets\n")
    assert backend_imports(tmp_path) == ["bad.py: nvidia.dali", "bad.py: ..backends.dali"]
