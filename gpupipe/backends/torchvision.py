"""The torchvision backend: ``torchvision.io`` decoding and ``transforms.v2`` in DataLoader workers.

Workers decode and transform uint8 ``(3, H, W)`` tensors. For a CPU target
the workers also normalise, so the main process only receives finished
batches; for a CUDA target the uint8 batch is pinned, copied with
``non_blocking=True`` on a side stream and normalised on the GPU while the
previous step computes (:class:`~gpupipe.batch.CudaPrefetcher`).

Each sample's random augmentation is seeded from ``(epoch seed, sample
index)``, so it does not depend on the number of workers or the order.
"""

from __future__ import annotations

import functools
import logging
import warnings
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torchvision
from torch.utils.data import DataLoader, Dataset, get_worker_info
from torchvision.io import ImageReadMode
from torchvision.transforms import v2

from ..batch import Batch, CudaPrefetcher, empty_like_output, normalize_uint8
from ..images import decode_rgb
from ..scan import Skipped
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
from ..sources import Source
from ..spec import PipelineSpec
from . import RunConfig

logger = logging.getLogger(__name__)

# torchvision 0.29 deprecates torchvision.io decoding in favour of TorchCodec;
# it is still the fastest CPU JPEG path here, so the notice is silenced.
warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities of TorchVision", category=DeprecationWarning)


def decode(data: torch.Tensor, path: str) -> torch.Tensor:
    """Decodes encoded bytes to ``(3, H, W)`` uint8 RGB, EXIF orientation applied.

    JPEGs go to ``torchvision.io`` (libjpeg-turbo); every other format to
    PIL, because torchvision 0.29's PNG decoder crashes the process
    (SIGSEGV) on some corrupt files instead of raising.

    Raises:
        RuntimeError: naming ``path`` when the file cannot be decoded.
    """
    if data[:3].tolist() == [0xFF, 0xD8, 0xFF]:
        try:
            return torchvision.io.decode_jpeg(data, mode=ImageReadMode.RGB, apply_exif_orientation=True)
        except RuntimeError as err:
            raise RuntimeError(f"cannot decode {path}: {_first_line(err)}") from err
    try:
        return torch.from_numpy(decode_rgb(data.numpy().tobytes()).copy()).permute(2, 0, 1)
    except (OSError, ValueError, SyntaxError) as err:
        raise RuntimeError(f"cannot decode {path}: {_first_line(err)}") from err


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


class _ResizeShorter(torch.nn.Module):
    """``Resize(int)``: shorter side to ``op.size``, the longer rounded as on DALI."""

    def __init__(self, op: Resize) -> None:
        super().__init__()
        self.op = op

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        h, w = self.op.output_size(image.shape[-2], image.shape[-1])
        return v2.functional.resize(image, [h, w], antialias=True)


class _CenterCrop(torch.nn.Module):
    """``CenterCrop``: the anchor of :meth:`CenterCrop.anchor`; pads images smaller than the crop."""

    def __init__(self, op: CenterCrop) -> None:
        super().__init__()
        self.op = op

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        height, width = image.shape[-2:]
        h, w = self.op.size
        top, left = self.op.anchor(height, width)
        if 0 <= top and 0 <= left and top + h <= height and left + w <= width:
            return image[..., top:top + h, left:left + w]
        # The window reaches outside the image: copy the overlap into zeros.
        out = image.new_zeros((*image.shape[:-2], h, w))
        y0, x0 = max(top, 0), max(left, 0)
        y1, x1 = min(top + h, height), min(left + w, width)
        out[..., y0 - top:y1 - top, x0 - left:x1 - left] = image[..., y0:y1, x0:x1]
        return out


def _resize(op: Resize) -> torch.nn.Module:
    if isinstance(op.size, tuple):
        return v2.Resize(list(op.size), antialias=True)
    return _ResizeShorter(op)


def _color_jitter(op: ColorJitter) -> torch.nn.Module:
    return v2.ColorJitter(brightness=op.brightness, contrast=op.contrast, saturation=op.saturation, hue=op.hue)


def _random_erasing(op: RandomErasing, spec: PipelineSpec) -> torch.nn.Module:
    # Erased pixels take the normalisation mean: 0 once normalised, as v2.RandomErasing(value=0) after Normalize.
    fill = [round(255 * m) for m in spec.mean]
    return v2.RandomErasing(p=op.p, scale=op.scale, ratio=op.ratio, value=fill)


#: op type -> transforms.v2 lowering, called with the op and the spec
#: (``Decode`` happens when reading, see :func:`decode`).
LOWERINGS: Dict[type, Callable[[Op, PipelineSpec], torch.nn.Module]] = {
    RandomResizedCrop: lambda op, spec: v2.RandomResizedCrop(list(op.size), scale=op.scale, ratio=op.ratio,
                                                              antialias=True),
    Resize: lambda op, spec: _resize(op),
    CenterCrop: lambda op, spec: _CenterCrop(op),
    HorizontalFlip: lambda op, spec: v2.RandomHorizontalFlip(p=op.p),
    ColorJitter: lambda op, spec: _color_jitter(op),
    RandomGrayscale: lambda op, spec: v2.RandomGrayscale(p=op.p),
    GaussianBlur: lambda op, spec: v2.GaussianBlur(op.kernel, sigma=op.sigma),
    RandomRotation: lambda op, spec: v2.RandomRotation(op.degrees, interpolation=v2.InterpolationMode.BILINEAR),
    RandAugment: lambda op, spec: v2.RandAugment(op.num_ops, op.magnitude, op.num_magnitude_bins),
    TrivialAugment: lambda op, spec: v2.TrivialAugmentWide(op.num_magnitude_bins),
    RandomErasing: _random_erasing,
}


def lower(spec: PipelineSpec) -> v2.Compose:
    """Returns the ``transforms.v2`` chain for the spec's ops after ``Decode``."""
    return v2.Compose([LOWERINGS[type(op)](op, spec) for op in spec.ops if not isinstance(op, Decode)])


def sample_seed(epoch_seed: int, index: int) -> int:
    """The seed of one sample's augmentation in one epoch."""
    return (epoch_seed * 6_364_136_223_846_793_005 + index * 1_442_695_040_888_963_407) % (2**63 - 1)


class _DecodedImages(Dataset):
    """Reads, decodes and transforms one sample; keys are ``(index, seed)``.

    Returns ``(image, label, None)``, or with ``on_error="skip"`` and a file
    that cannot be decoded ``(None, label, Skipped)``.
    """

    def __init__(self, source: Source, transform: v2.Compose, on_error: str) -> None:
        self.source = source
        self.labels = source.labels
        self.transform = transform
        self.on_error = on_error

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, key: Tuple[int, int]):
        index, seed = key
        path = self.source.samples[index].path
        try:
            image = decode(torch.from_numpy(self.source.read_bytes(index)), path)
        except (RuntimeError, OSError, ValueError) as err:
            if self.on_error == "raise":
                raise
            reason = str(err).removeprefix(f"cannot decode {path}: ")
            return None, self.labels[index], Skipped(path, f"cannot decode: {reason}")
        if get_worker_info() is not None:
            torch.default_generator.manual_seed(seed)  # the CPU generator alone: ~100x cheaper than torch.manual_seed
            image = self.transform(image)
        else:  # in the main process: leave the caller's RNG alone
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                image = self.transform(image)
        return image, self.labels[index], None


def _collate(samples: List[tuple], spec: PipelineSpec, finish: bool) -> Tuple[torch.Tensor, torch.Tensor, list]:
    """Stacks samples into a ``(B, 3, H, W)`` uint8 batch and int64 labels; finishes them on request.

    Samples that failed to decode are left out and returned as the third
    element. For channels_last output the batch is stacked as ``(B, H, W, 3)``
    (each image transposed while it is still in cache) and returned as its
    ``(B, 3, H, W)`` view.
    """
    skipped = [s for _, _, s in samples if s is not None]
    samples = [(image, label) for image, label, s in samples if s is None]
    labels = torch.tensor([label for _, label in samples], dtype=torch.int64)
    if not samples:
        return torch.empty(0, 3, *spec.size, dtype=torch.uint8), labels, skipped
    in_worker = get_worker_info() is not None
    if spec.output.channels_last:
        images = torch.stack([image.permute(1, 2, 0) for image, _ in samples]).permute(0, 3, 1, 2)
    else:
        images = torch.stack([image for image, _ in samples])
    if finish:
        images = normalize_uint8(images, spec, out=empty_like_output(images, spec, shared=in_worker))
    elif in_worker:
        images = images.share_memory_()
    return images, labels, skipped


class _EpochKeys(torch.utils.data.Sampler):
    """The current epoch's ``(index, seed)`` keys; replaced before each epoch."""

    def __init__(self) -> None:
        self.keys: List[Tuple[int, int]] = []

    def __iter__(self):
        return iter(self.keys)

    def __len__(self) -> int:
        return len(self.keys)


class TorchvisionBackend:
    """Runs a spec with ``torchvision.io`` + ``transforms.v2`` in a DataLoader.

    Args:
        source: the samples.
        spec: the checked pipeline.
        config: batch size, device and ``num_threads`` worker processes
            (0 decodes in the main process).
    """

    name = "torchvision"

    def __init__(self, source: Source, spec: PipelineSpec, config: RunConfig) -> None:
        self.spec = spec
        self.config = config
        self.on_cuda = config.device.type == "cuda"
        self._keys = _EpochKeys()
        workers = config.num_threads
        self.dataloader = DataLoader(
            _DecodedImages(source, lower(spec), config.on_error),
            batch_size=config.batch_size,
            sampler=self._keys,
            drop_last=config.drop_last,
            num_workers=workers,
            collate_fn=functools.partial(_collate, spec=spec, finish=not self.on_cuda),
            pin_memory=self.on_cuda,
            persistent_workers=workers > 0,
            prefetch_factor=config.prefetch if workers > 0 else None,
            generator=torch.Generator().manual_seed(0),
        )

    def iter_epoch(
        self, indices: Sequence[int], seed: int, *, skip_batches: int = 0, state: Optional[str] = None
    ) -> Iterator[Batch]:
        """Yields the batches of ``indices`` after the first ``skip_batches``, in order.

        Augmentations are seeded per sample, so a resumed epoch needs no
        ``state`` to repeat them exactly.
        """
        keys = [(i, sample_seed(seed, i)) for i in indices]
        self._keys.keys = keys[skip_batches * self.config.batch_size:]
        if not self._keys.keys:
            return iter(())
        batches = self._without_failed(self.dataloader)
        if self.on_cuda:
            finish = functools.partial(normalize_uint8, spec=self.spec)
            return iter(CudaPrefetcher(batches, self.config.device, finish))
        return batches

    def _without_failed(self, batches) -> Iterator[Batch]:
        """Records the samples that failed to decode; a batch comes out short by them."""
        for images, labels, skipped in batches:
            for entry in skipped:
                self.config.skip_log.add(entry.path, entry.reason)
            if len(labels) == 0:
                logger.warning("every file of a batch failed to decode; the batch is left out")
                continue
            yield images, labels

    def state(self) -> Optional[str]:
        return None
