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
from ..ops import CenterCrop, Decode, HorizontalFlip, Op, RandomResizedCrop, Resize
from ..sources import Source
from ..spec import PipelineSpec
from . import RunConfig

logger = logging.getLogger(__name__)

# torchvision 0.29 deprecates torchvision.io decoding in favour of TorchCodec;
# it is still the fastest CPU JPEG path here, so the notice is silenced.
warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities of TorchVision", category=DeprecationWarning)


def decode(data: torch.Tensor, path: str) -> torch.Tensor:
    """Decodes encoded bytes to ``(3, H, W)`` uint8 RGB, EXIF orientation applied.

    ``torchvision.io`` handles JPEG, PNG, WebP and GIF; other formats (BMP)
    fall back to PIL. 16-bit images keep their high byte, as on DALI.

    Raises:
        RuntimeError: naming ``path`` when neither decoder can read it.
    """
    try:
        image = torchvision.io.decode_image(data, mode=ImageReadMode.RGB, apply_exif_orientation=True)
    except RuntimeError as tv_error:
        try:
            return torch.from_numpy(decode_rgb(data.numpy().tobytes()).copy()).permute(2, 0, 1)
        except (OSError, ValueError, SyntaxError) as pil_error:
            raise RuntimeError(f"cannot decode image {path!r}: {tv_error}; PIL: {pil_error}") from tv_error
    if image.dtype == torch.uint16:  # 16-bit PNG (uint16 has no shift in torch)
        image = (image.to(torch.int32) >> 8).to(torch.uint8)
    return image


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


#: op type -> transforms.v2 lowering (``Decode`` happens when reading, see :func:`decode`).
LOWERINGS: Dict[type, Callable[[Op], torch.nn.Module]] = {
    RandomResizedCrop: lambda op: v2.RandomResizedCrop(list(op.size), scale=op.scale, ratio=op.ratio, antialias=True),
    Resize: _resize,
    CenterCrop: _CenterCrop,
    HorizontalFlip: lambda op: v2.RandomHorizontalFlip(p=op.p),
}


def lower(spec: PipelineSpec) -> v2.Compose:
    """Returns the ``transforms.v2`` chain for the spec's ops after ``Decode``."""
    return v2.Compose([LOWERINGS[type(op)](op) for op in spec.ops if not isinstance(op, Decode)])


def sample_seed(epoch_seed: int, index: int) -> int:
    """The seed of one sample's augmentation in one epoch."""
    return (epoch_seed * 6_364_136_223_846_793_005 + index * 1_442_695_040_888_963_407) % (2**63 - 1)


class _DecodedImages(Dataset):
    """Reads, decodes and transforms one sample; keys are ``(index, seed)``."""

    def __init__(self, source: Source, transform: v2.Compose) -> None:
        self.source = source
        self.labels = source.labels
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, key: Tuple[int, int]) -> Tuple[torch.Tensor, int]:
        index, seed = key
        image = decode(torch.from_numpy(self.source.read_bytes(index)), self.source.samples[index].path)
        if get_worker_info() is not None:
            torch.default_generator.manual_seed(seed)  # the CPU generator alone: ~100x cheaper than torch.manual_seed
            image = self.transform(image)
        else:  # in the main process: leave the caller's RNG alone
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                image = self.transform(image)
        return image, self.labels[index]


def _collate(samples: List[Tuple[torch.Tensor, int]], spec: PipelineSpec, finish: bool) -> Batch:
    """Stacks samples into a ``(B, 3, H, W)`` uint8 batch and int64 labels; finishes them on request.

    For channels_last output the batch is stacked as ``(B, H, W, 3)`` (each
    image transposed while it is still in cache) and returned as its
    ``(B, 3, H, W)`` view.
    """
    labels = torch.tensor([label for _, label in samples], dtype=torch.int64)
    in_worker = get_worker_info() is not None
    if spec.output.channels_last:
        images = torch.stack([image.permute(1, 2, 0) for image, _ in samples]).permute(0, 3, 1, 2)
    else:
        images = torch.stack([image for image, _ in samples])
    if finish:
        images = normalize_uint8(images, spec, out=empty_like_output(images, spec, shared=in_worker))
    elif in_worker:
        images = images.share_memory_()
    return images, labels


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
            _DecodedImages(source, lower(spec)),
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
        if self.on_cuda:
            finish = functools.partial(normalize_uint8, spec=self.spec)
            return iter(CudaPrefetcher(self.dataloader, self.config.device, finish))
        return iter(self.dataloader)

    def state(self) -> Optional[str]:
        return None
