"""The DALI backend: ops lowered to a DALI graph on the GPU (``dali``) or CPU (``dali-cpu``).

Files are read by DALI's file reader in the order the loader decides (one
pipeline per epoch, ``random_shuffle=False``), so the order is the same as
on every other backend. Lowering rules:

* ``Decode`` + ``RandomResizedCrop`` fuse into ``decoders.image_random_crop``
  (ROI decoding: only the crop is decoded) followed by ``resize``.
* ``Decode`` runs with ``device="mixed"`` on the GPU (nvJPEG, with the
  hardware JPEG decoder where the GPU has one); every later op then runs on
  the GPU, and the batch lands on the CUDA device with no host round trip.
* A trailing ``CenterCrop`` and/or ``HorizontalFlip``, ``Normalize`` and the
  output dtype / layout fuse into one ``crop_mirror_normalize``.
"""

from __future__ import annotations

import base64
import logging
import math
from collections import deque
import tempfile
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence

import numpy as np
import torch
from nvidia.dali import fn, pipeline, pipeline_def, types
from nvidia.dali import math as dmath
from nvidia.dali.auto_aug import rand_augment, trivial_augment
from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

from ..batch import Batch, from_hwc_or_chw, to_device
from ..ops import (
    CenterCrop,
    ColorJitter,
    Decode,
    GaussianBlur,
    HorizontalFlip,
    Op,
    RandAugment,
    RandomErasing,
    RandomGrayscale,
    RandomResizedCrop,
    RandomRotation,
    Resize,
    TrivialAugment,
)
from .. import shardfmt
from ..sources import Shards, Source
from ..spec import PipelineSpec
from . import RunConfig

logger = logging.getLogger(__name__)

_READER = "reader"

#: DALI dtype that ``crop_mirror_normalize`` emits for each output dtype;
#: bfloat16 (which DALI lacks) is emitted as float32 and converted by torch.
_DALI_DTYPE = {
    "float32": types.FLOAT,
    "bfloat16": types.FLOAT,
    "float16": types.FLOAT16,
    "uint8": types.UINT8,
}


class _Graph:
    """The DataNode being built, the decoder placement, the spec and the images' size so far."""

    def __init__(self, encoded, gpu: bool, spec: PipelineSpec) -> None:
        self.images = encoded
        self.gpu = gpu
        self.decoder_device = "mixed" if gpu else "cpu"
        self.spec = spec
        self.size: Optional[tuple] = None  # (h, w) once fixed

    def on_device(self, node):
        """A CPU-made tensor (random numbers) moved next to the images, for arithmetic with them."""
        return node.gpu() if self.gpu and not isinstance(node, float) else node


def _decoder_kwargs() -> Dict:
    # libjpeg's default (fancy) chroma upsampling, as torchvision and PIL decode.
    return {"output_type": types.RGB, "jpeg_fancy_upsampling": True}


def _decode(g: _Graph, op: Decode) -> None:
    g.images = fn.decoders.image(g.images, device=g.decoder_device, **_decoder_kwargs())


def _decode_random_resized_crop(g: _Graph, decode: Decode, crop: RandomResizedCrop) -> None:
    g.images = fn.decoders.image_random_crop(
        g.images,
        device=g.decoder_device,
        random_area=list(crop.scale),
        random_aspect_ratio=list(crop.ratio),
        num_attempts=10,
        **_decoder_kwargs(),
    )
    _resize_exact(g, crop.size)
    g.size = crop.size


def _random_resized_crop(g: _Graph, op: RandomResizedCrop) -> None:
    g.images = fn.random_resized_crop(
        g.images, size=list(op.size), random_area=list(op.scale), random_aspect_ratio=list(op.ratio),
        num_attempts=10, antialias=True,
    )
    g.size = op.size


def _resize_exact(g: _Graph, size) -> None:
    h, w = size
    g.images = fn.resize(g.images, resize_x=w, resize_y=h, antialias=True, interp_type=types.INTERP_LINEAR)


def _resize(g: _Graph, op: Resize) -> None:
    if isinstance(op.size, tuple):
        _resize_exact(g, op.size)
        g.size = op.size
    else:
        g.images = fn.resize(g.images, resize_shorter=op.size, antialias=True, interp_type=types.INTERP_LINEAR)
        g.size = None


def _center_crop(g: _Graph, op: CenterCrop) -> None:
    g.images = fn.crop(g.images, crop=list(op.size), out_of_bounds_policy="pad")
    g.size = op.size


def _flip(g: _Graph, op: HorizontalFlip) -> None:
    g.images = fn.flip(g.images, horizontal=fn.random.coin_flip(probability=op.p))


def _uniform(lo_hi):
    """A per-sample draw from ``[lo, hi)``, or the number itself when ``lo == hi`` (DALI refuses empty ranges)."""
    lo, hi = float(lo_hi[0]), float(lo_hi[1])
    return lo if lo == hi else fn.random.uniform(range=[lo, hi])


def _color_jitter(g: _Graph, op: ColorJitter) -> None:
    """Brightness and contrast as torchvision computes them (contrast around each image's mean
    gray level: ``b * (c * x + (1 - c) * mean)``), then saturation and hue with ``hsv``."""
    if op.brightness or op.contrast:
        x = fn.cast(g.images, dtype=types.FLOAT)
        if op.contrast:
            c = g.on_device(_uniform(op.contrast))
            gray = fn.color_space_conversion(g.images, image_type=types.RGB, output_type=types.GRAY)
            x = c * x + (1.0 - c) * fn.reductions.mean(fn.cast(gray, dtype=types.FLOAT))
        if op.brightness:
            x = x * g.on_device(_uniform(op.brightness))
        g.images = fn.cast(dmath.clamp(x, 0.0, 255.0), dtype=types.UINT8)
    if op.saturation or op.hue:
        g.images = fn.hsv(
            g.images,
            saturation=_uniform(op.saturation) if op.saturation else 1.0,
            hue=_uniform(op.hue) * 360.0 if op.hue else 0.0,  # DALI's hue is in degrees
        )


def _random_grayscale(g: _Graph, op: RandomGrayscale) -> None:
    gray = fn.cast(fn.random.coin_flip(probability=op.p), dtype=types.FLOAT)
    g.images = fn.hsv(g.images, saturation=1.0 - gray)


def _gaussian_blur(g: _Graph, op: GaussianBlur) -> None:
    g.images = fn.gaussian_blur(g.images, window_size=op.kernel, sigma=_uniform(op.sigma))


def _random_rotation(g: _Graph, op: RandomRotation) -> None:
    g.images = fn.rotate(g.images, angle=_uniform(op.degrees), keep_size=True, fill_value=0,
                         interp_type=types.INTERP_LINEAR)


def _rand_augment(g: _Graph, op: RandAugment) -> None:
    g.images = rand_augment.rand_augment(g.images, n=op.num_ops, m=op.magnitude,
                                         num_magnitude_bins=op.num_magnitude_bins, shape=list(g.size), fill_value=0)


def _trivial_augment(g: _Graph, op: TrivialAugment) -> None:
    g.images = trivial_augment.trivial_augment_wide(g.images, num_magnitude_bins=op.num_magnitude_bins,
                                                    shape=list(g.size), fill_value=0)


def _random_erasing(g: _Graph, op: RandomErasing) -> None:
    """One rectangle, normalised coordinates: area and log-ratio drawn as torchvision does;
    where torchvision retries a rectangle that does not fit, it is clipped to the image."""
    h, w = g.size
    area = _uniform(op.scale)
    ratio = dmath.exp(_uniform((math.log(op.ratio[0]), math.log(op.ratio[1]))))
    height = dmath.min(dmath.sqrt(area * ratio * (w / h)), 1.0)
    width = dmath.min(dmath.sqrt(area / ratio * (h / w)), 1.0)
    erase = fn.cast(fn.random.coin_flip(probability=op.p), dtype=types.FLOAT)
    anchor = fn.stack(_uniform((0, 1)) * (1.0 - height), _uniform((0, 1)) * (1.0 - width))
    g.images = fn.erase(
        g.images, anchor=anchor, shape=fn.stack(height, width) * erase, normalized_anchor=True,
        normalized_shape=True, axis_names="HW", fill_value=[round(255 * m) for m in g.spec.mean],
    )


#: op type -> lowering; pairs of neighbours that fuse into one DALI operator.
LOWERINGS: Dict[type, Callable[[_Graph, Op], None]] = {
    Decode: _decode,
    RandomResizedCrop: _random_resized_crop,
    Resize: _resize,
    CenterCrop: _center_crop,
    HorizontalFlip: _flip,
    ColorJitter: _color_jitter,
    RandomGrayscale: _random_grayscale,
    GaussianBlur: _gaussian_blur,
    RandomRotation: _random_rotation,
    RandAugment: _rand_augment,
    TrivialAugment: _trivial_augment,
    RandomErasing: _random_erasing,
}
FUSIONS: Dict[tuple, Callable[[_Graph, Op, Op], None]] = {
    (Decode, RandomResizedCrop): _decode_random_resized_crop,
}


def lower(spec: PipelineSpec, encoded, *, gpu: bool):
    """Builds the DALI graph of ``spec`` from a node of encoded images.

    Returns:
        The output node: ``(B, C, H, W)``, or ``(B, H, W, C)`` for channels_last.
    """
    ops = list(spec.ops)
    # Trailing CenterCrop / HorizontalFlip are done by crop_mirror_normalize.
    tail_flip = ops.pop() if ops and isinstance(ops[-1], HorizontalFlip) else None
    tail_crop = ops.pop() if ops and isinstance(ops[-1], CenterCrop) else None

    g = _Graph(encoded, gpu, spec)
    i = 0
    while i < len(ops):
        pair = tuple(type(op) for op in ops[i:i + 2])
        if pair in FUSIONS:
            FUSIONS[pair](g, *ops[i:i + 2])
            i += 2
        else:
            LOWERINGS[type(ops[i])](g, ops[i])
            i += 1

    cmn = {}
    if tail_crop is not None:
        cmn.update(crop=list(tail_crop.size), out_of_bounds_policy="pad")
    if tail_flip is not None:
        cmn["mirror"] = fn.random.coin_flip(probability=tail_flip.p)
    if spec.output.dtype != "uint8":
        cmn["mean"] = [255.0 * m for m in spec.mean]
        cmn["std"] = [255.0 * s for s in spec.std]
    return fn.crop_mirror_normalize(
        g.images,
        dtype=_DALI_DTYPE[spec.output.dtype],
        output_layout="HWC" if spec.output.channels_last else "CHW",
        **cmn,
    )


class DaliBackend:
    """Runs a spec through DALI, one pipeline per epoch.

    Args:
        source: the samples.
        spec: the checked pipeline.
        config: batch size, device and threads.
        gpu: decode with ``device="mixed"`` and run all ops on the GPU.
    """

    def __init__(self, source: Source, spec: PipelineSpec, config: RunConfig, *, gpu: bool) -> None:
        self.name = "dali" if gpu else "dali-cpu"
        self.source = source
        self.spec = spec
        self.config = config
        self.gpu = gpu
        if gpu and config.device.type != "cuda":
            raise ValueError(f"backend 'dali' runs on a CUDA device, got device={config.device}; use 'dali-cpu'")
        self._paths = source.paths
        self._labels = source.labels
        self._iterator: Optional[DALIGenericIterator] = None
        self._recovered = False
        if isinstance(source, Shards):
            # Per-epoch index files for readers.webdataset; removed with the backend.
            self._index_dir = tempfile.TemporaryDirectory(prefix="gpupipe-idx-")
            self._epochs_built = 0

    def _device_id(self) -> Optional[int]:
        if not self.gpu:
            return None
        index = self.config.device.index
        return torch.cuda.current_device() if index is None else index

    def build_pipeline(
        self, indices: Sequence[int], seed: int, checkpoint: Optional[bytes] = None, *,
        batch_size: Optional[int] = None, probe: bool = False,
    ) -> "pipeline.Pipeline":
        """Returns the (built) DALI pipeline reading ``indices`` in order.

        Args:
            indices: samples, in reading order.
            seed: seeds the random ops.
            checkpoint: a DALI checkpoint to restore (reader position, random states).
            batch_size: default: the loader's.
            probe: a synchronous pipeline (no prefetch), so that an error
                belongs to the sample just read; used to find a bad file.
        """
        settings = dict(exec_dynamic=False, exec_pipelined=False, exec_async=False, prefetch_queue_depth=1) if probe \
            else dict(
                # The dynamic executor hands outputs to torch through DLPack, without a copy.
                exec_dynamic=True,
                prefetch_queue_depth=self.config.prefetch,
                # Checkpoints (reader position and random-op states) make mid-epoch resume exact.
                enable_checkpointing=True,
                checkpoint=checkpoint,
            )
        auto_augment = any(isinstance(op, (RandAugment, TrivialAugment)) for op in self.spec.ops)

        # nvidia.dali.auto_aug branches per sample, which needs DALI's conditionals (pipeline_def).
        @pipeline_def(enable_conditionals=auto_augment)
        def graph():
            encoded, label = self._reader(indices)
            images = lower(self.spec, encoded, gpu=self.gpu)
            return images, label.gpu() if self.gpu else label

        pipe = graph(
            batch_size=batch_size or self.config.batch_size,
            num_threads=self.config.num_threads,
            device_id=self._device_id(),
            seed=seed % (2**31),
            **settings,
        )
        pipe.build()
        return pipe

    def _reader(self, indices: Sequence[int]):
        """The reader node giving ``(encoded, label)`` for ``indices``, in that order.

        Files: ``readers.file`` with the list. Packed shards:
        ``readers.webdataset`` over index files written for this epoch, one
        per run of consecutive samples from one shard (a shuffled epoch
        visits the shards one by one, so there are about as many runs as
        shards); the ``.cls`` digits are turned into the label in the graph.
        """
        if not isinstance(self.source, Shards):
            files = [self._paths[i] for i in indices]
            labels = [self._labels[i] for i in indices]
            return fn.readers.file(files=files, labels=labels, random_shuffle=False, pad_last_batch=True, name=_READER)
        paths, index_paths = [], []
        for stale in Path(self._index_dir.name).glob("*.idx"):  # the last epoch's, already parsed by DALI
            stale.unlink()
        for shard, start, end in shardfmt.runs([self.source.shard_of[i] for i in indices]):
            index_path = Path(self._index_dir.name) / f"epoch{self._epochs_built}-run{len(paths)}.idx"
            shardfmt.write_index(index_path, [self.source.entries[i] for i in indices[start:end]])
            paths.append(self.source.tar_paths[shard])
            index_paths.append(str(index_path))
        self._epochs_built += 1
        encoded, digits = fn.readers.webdataset(
            paths=paths, index_paths=index_paths, ext=list(shardfmt.COMPONENTS), random_shuffle=False,
            pad_last_batch=True, missing_component_behavior="error", name=_READER,
        )
        weights = types.Constant(np.array([10**k for k in range(shardfmt.CLASS_DIGITS - 1, -1, -1)], np.int32))
        label = fn.reductions.sum((fn.cast(digits, dtype=types.INT32) - ord("0")) * weights, axes=0)
        return encoded, label

    def iter_epoch(
        self, indices: Sequence[int], seed: int, *, skip_batches: int = 0, state: Optional[str] = None
    ) -> Iterator[Batch]:
        """Yields the batches of ``indices`` in order, resuming after ``skip_batches``.

        With a ``state`` from :meth:`state` the pipeline is restored from
        that DALI checkpoint (reader position and random states), so the
        rest of the epoch is exactly what the interrupted run would have
        given; without one, reading starts after the skipped batches.

        A file that fails to decode invalidates a DALI pipeline. The failing
        batches' files are then decoded one by one to find the bad ones
        (``on_error="raise"``: an error naming them); the rest of the epoch
        continues in new pipelines, the affected batches short by the bad
        files, every other batch as it was, so the batch count holds.
        """
        bs = self.config.batch_size
        checkpoint = base64.b64decode(state) if state is not None else None
        done = skip_batches if checkpoint is not None else 0
        if checkpoint is None:
            indices = indices[skip_batches * bs:]
        segments = deque([_Segment(list(indices), bs, done, checkpoint)])
        self._recovered = False
        while segments:
            segment = segments.popleft()
            if segment.empty(self.config.drop_last):
                continue
            pipe = self.build_pipeline(segment.indices, seed + 1_000_003 * segment.serial, segment.checkpoint,
                                       batch_size=segment.batch_size)
            self._iterator = DALIGenericIterator(
                [pipe], ["images", "labels"], reader_name=_READER,
                last_batch_policy=LastBatchPolicy.DROP if self.config.drop_last else LastBatchPolicy.PARTIAL,
                auto_reset=False, prepare_first_batch=False,
            )
            try:
                for (out,) in self._iterator:
                    images = from_hwc_or_chw(out["images"], hwc=self.spec.output.channels_last, spec=self.spec)
                    labels = out["labels"].view(-1).to(torch.int64)
                    segment.delivered += 1
                    yield to_device((images, labels), self.config.device)
            except RuntimeError as err:
                segments.extendleft(reversed(self._recover(segment, seed, err)))
            finally:
                self._iterator = None
                del pipe

    def _recover(self, segment: "_Segment", seed: int, err: RuntimeError) -> List["_Segment"]:
        """Finds the bad files behind a pipeline error; returns the segments that read the rest."""
        self._recovered = True
        bs = segment.batch_size
        start = segment.delivered * bs
        suspects = segment.indices[start:start + bs * (self.config.prefetch + 1)]
        bad = self._probe(suspects, seed)
        if not bad or len(bad) == len(suspects) > 1:
            raise err  # no file to blame, or every file fails: the pipeline itself is broken
        if self.config.on_error == "raise":
            detail = "; ".join(f"{self.source.samples[i].path}: {reason}" for i, reason in bad.items())
            raise RuntimeError(f"cannot decode ({self.name}): {detail}") from err
        for i, reason in bad.items():
            self.config.skip_log.add(self.source.samples[i].path, f"cannot decode: {reason}")
        rest = segment.indices[start:]
        before = [rest[b:b + bs] for b in range(0, len(rest), bs)]
        after = [[i for i in batch if i not in bad] for batch in before]
        return _Segment.regroup(after, [len(a) < len(b) for a, b in zip(after, before)], bs, segment.serial)

    def _probe(self, suspects: List[int], seed: int) -> Dict[int, str]:
        """Decodes ``suspects`` one at a time; returns ``{index: reason}`` for those that fail."""
        bad: Dict[int, str] = {}
        remaining = list(suspects)
        while remaining:
            pipe = self.build_pipeline(remaining, seed, batch_size=1, probe=True)
            read = 0
            try:
                for _ in remaining:
                    pipe.run()
                    read += 1
                remaining = []
            except RuntimeError as err:
                bad[remaining[read]] = _dali_reason(err)
                remaining = remaining[read + 1:]
            finally:
                del pipe
        return bad

    def state(self) -> Optional[str]:
        """The running epoch's DALI checkpoint, base64 (a few hundred bytes).

        ``None`` after bad files were taken out of the epoch: the pipelines
        no longer match the epoch's order, and a resume then re-reads from
        the batch count with fresh random states.
        """
        if self._iterator is None or self._recovered:
            return None
        return base64.b64encode(self._iterator.checkpoints()[0]).decode("ascii")


class _Segment:
    """A run of batches read by one pipeline: equal batches (the last may be partial)."""

    def __init__(self, indices: List[int], batch_size: int, delivered: int = 0,
                 checkpoint: Optional[bytes] = None, serial: int = 0) -> None:
        self.indices = indices
        self.batch_size = batch_size
        self.delivered = delivered  # batches out so far (a restored checkpoint counts its own)
        self.checkpoint = checkpoint
        self.serial = serial

    def empty(self, drop_last: bool) -> bool:
        remaining = len(self.indices) - self.delivered * self.batch_size
        return remaining <= 0 or (drop_last and remaining < self.batch_size)

    @staticmethod
    def regroup(batches: List[List[int]], shortened: List[bool], batch_size: int, serial: int) -> List["_Segment"]:
        """Intact batches in a row share a segment; each shortened batch gets its own, of its own size.

        The last batch of an epoch may be partial and stays at the end of its
        run, where the iterator's last-batch policy handles it as before.
        """
        segments: List[_Segment] = []
        run: List[int] = []
        for batch, short in zip(batches, shortened):
            if not batch:
                logger.warning("every file of a batch failed to decode; the batch is left out")
                continue
            if not short:
                run.extend(batch)
                continue
            if run:
                segments.append(_Segment(run, batch_size, serial=serial + len(segments) + 1))
                run = []
            segments.append(_Segment(batch, len(batch), serial=serial + len(segments) + 1))
        if run:
            segments.append(_Segment(run, batch_size, serial=serial + len(segments) + 1))
        return segments


def _dali_reason(err: Exception) -> str:
    """The useful line of a DALI error message."""
    text = str(err)
    body = text.split("encountered:", 1)[-1]
    lines = [line.strip() for line in body.splitlines()
             if line.strip() and "pipeline object is no longer valid" not in line and "Critical error" not in line]
    return lines[0] if lines else text.strip().splitlines()[0]
