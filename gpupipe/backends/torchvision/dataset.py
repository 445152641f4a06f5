"""Reading, decoding and transforming one sample in a DataLoader worker, and stacking a batch."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import cast

import numpy as np
import torch
import torchvision
from torch.utils.data import Dataset, get_worker_info
from torchvision.io import ImageReadMode

from ...errors import DecodeError, first_line
from ...fileio import UnreadableFile
from ...images import decode_rgb, read_header, upright
from ...loading.batchsteps import finisher
from ...loading.transfer import empty_like_output
from ...ops import RandomResizedCrop
from ...plan.spec import PipelineSpec
from ...sources import Source
from .lowering import Item, apply_ops
from .targets import TARGETS, TorchvisionTarget

#: The start of torchvision 0.29's deprecation notice for its image decoders (silenced around our call only).
_TORCHVISION_DEPRECATION = "The image decoding and encoding capabilities of TorchVision"


def _torchvision_jpeg(data: torch.Tensor, turn: bool = True) -> torch.Tensor:
    with warnings.catch_warnings():  # local: the process's own warning filters are left as they are
        warnings.filterwarnings("ignore", message=_TORCHVISION_DEPRECATION, category=DeprecationWarning)
        return torchvision.io.decode_jpeg(data, mode=ImageReadMode.RGB, apply_exif_orientation=turn)


def jpeg_decoder() -> tuple[Callable[[torch.Tensor], torch.Tensor], str]:
    """``(decode, name)``: TorchCodec's JPEG decoder where it is installed (the ``torchvision``
    extra), else ``torchvision.io``'s. Both are libjpeg-turbo, apply the EXIF orientation and give
    the same pixels; see the backends page for their measured speed."""
    try:
        from torchcodec.decoders import decode_jpeg
    except (ImportError, OSError, RuntimeError):  # absent, or its native library does not load here
        return _torchvision_jpeg, "torchvision.io"
    return (lambda data: cast(torch.Tensor, decode_jpeg(data, mode="RGB"))), "torchcodec"  # one image in, one out


_JPEG, JPEG_DECODER = jpeg_decoder()


def decode(data: torch.Tensor, path: str, decode_as: str = "upright") -> torch.Tensor:
    """Decodes encoded bytes to ``(3, H, W)`` uint8 RGB, EXIF orientation applied (``decode_as="stored"``:
    not applied, as torchvision's PIL loader reads the file).

    JPEGs go to TorchCodec (``torchvision.io`` without it, and for ``"stored"``; see
    ``jpeg_decoder``); every other format to PIL, because torchvision
    0.29's PNG decoder crashes the process (SIGSEGV) on some corrupt files
    instead of raising.

    Raises:
        DecodeError: naming ``path`` when the file cannot be decoded.
    """
    if data[:3].tolist() == [0xFF, 0xD8, 0xFF]:
        try:
            return _JPEG(data) if decode_as == "upright" else _torchvision_jpeg(data, turn=False)
        except RuntimeError as err:
            raise DecodeError(path, decoder_words(err)) from err
    try:
        return torch.from_numpy(decode_rgb(data.numpy().tobytes(), decode_as).copy()).permute(2, 0, 1)
    except (OSError, ValueError, SyntaxError) as err:
        raise DecodeError(path, first_line(err)) from err


#: What a C++ decoder puts before its message: ``decode_jpeg, /path/to/decode_jpeg.cpp:171, ``.
_WHERE_IN_SOURCE = re.compile(r"^\s*(?:[\w:]+, )?\S+\.(?:cpp|cc|cu|c|h|hpp):\d+,?\s*")


def decoder_words(err: BaseException) -> str:
    """A decoder's message without the function, source file and line it came from (a reason for users)."""
    line = first_line(err)
    return _WHERE_IN_SOURCE.sub("", line) or line


def reduction(window, size) -> int:
    """The JPEG scale denominator (8, 4, 2 or 1) that still gives the crop window at least ``size`` pixels."""
    for denominator in (8, 4, 2):
        if window[0] >= denominator * size[0] and window[1] >= denominator * size[1]:
            return denominator
    return 1


def decode_reduced(data: np.ndarray, path: str, params, size, decode_as: str = "upright"):
    """Decodes a JPEG at 1/2, 1/4 or 1/8 scale in the DCT domain (libjpeg-turbo through PIL's
    ``draft``) when the planned crop window is at least that many times its output, and moves the
    window onto the smaller image. The reduced decode is itself an area-averaging downscale; the
    window's corners snap to the smaller image's pixels (at most half of one: 4 pixels at 1/8).

    An EXIF-rotated JPEG (most of a phone's photos) is turned upright after the reduced decode, by the
    orientation the scan read (its sizes, and so the window, are as displayed); with ``decode_as="stored"``
    it is left as stored (the sizes and the window are so too).

    Returns:
        ``(image, params)``: the ``(3, H, W)`` uint8 image and the window in its pixels, or
        ``(None, params)`` when a full decode is needed (not a JPEG, not YCbCr, no gain).
    """
    import io

    from PIL import Image

    height, width = int(params["height"]), int(params["width"])
    denominator = reduction((height, width), size)
    if denominator == 1 or bytes(data[:3]) != b"\xff\xd8\xff":
        return None, params
    raw = data.tobytes()
    try:
        with Image.open(io.BytesIO(raw)) as img:
            if img.mode != "RGB":
                return None, params
            orientation = read_header(io.BytesIO(raw), max_pixels=1 << 62).orientation if decode_as == "upright" else 1
            full_w, full_h = img.size
            img.draft("RGB", (full_w // denominator, full_h // denominator))  # PIL picks 1/denominator
            pixels = np.asarray(upright(img, orientation).convert("RGB"))
    except (OSError, ValueError, SyntaxError) as err:  # (ImageRefused is a ValueError)
        raise DecodeError(path, first_line(err)) from err
    if orientation in (5, 6, 7, 8):  # the window is in the displayed image's pixels
        full_w, full_h = full_h, full_w
    sy, sx = pixels.shape[0] / full_h, pixels.shape[1] / full_w
    top, left = int(round(int(params["top"]) * sy)), int(round(int(params["left"]) * sx))
    moved = dict(
        params,
        top=np.int64(top),
        left=np.int64(left),
        height=np.int64(min(max(1, round(height * sy)), pixels.shape[0] - top)),
        width=np.int64(min(max(1, round(width * sx)), pixels.shape[1] - left)),
    )
    return torch.from_numpy(pixels.copy()).permute(2, 0, 1), moved


class DecodedSamples(Dataset):
    """Reads, decodes and transforms one sample; a key is ``(index, planned parameters per op)``.

    Returns ``(image, target, failure)``: the ``(3, H, W)`` uint8 image, the
    sample's moved target as its lowering (``targets``) finishes it (``None`` for image-level
    targets, which the main process looks up), and ``None``; or, for a sample
    that cannot be read or decoded, ``(None, None, reason)``.
    """

    def __init__(self, source: Source, spec: PipelineSpec, reduced_decode: bool = True) -> None:
        self.source = source
        self.spec = spec
        self.target: TorchvisionTarget = TARGETS.of(source.target)  # refuses a kind it has no lowering for
        # Scaled JPEG decoding applies to a RandomResizedCrop right after Decode, with class targets only.
        self.reduced_decode = (
            reduced_decode
            and len(spec.ops) > 1
            and isinstance(spec.ops[1], RandomResizedCrop)
            and not source.target.moves_with_pixels
        )

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, key):
        index, steps = key
        path = self.source.names[index]
        try:
            item = self.load(index, path, steps)
        except DecodeError as err:
            return None, None, f"cannot decode: {err.skipped.reason}"
        except UnreadableFile as err:
            return None, None, err.reason
        apply_ops(item, self.spec, steps)
        return item.image, self.target.finish(item.state, self.spec) if item.state is not None else None, None

    def load(self, index: int, path: str, steps) -> Item:
        data = self.source.read_bytes(index)
        image = None
        if self.reduced_decode:
            crop = self.spec.ops[1]
            assert isinstance(crop, RandomResizedCrop)  # what reduced_decode was decided on
            image, steps[1] = decode_reduced(data, path, steps[1], crop.size, self.source.decode_as)
        if image is None:
            image = decode(torch.from_numpy(data), path, self.source.decode_as)
        size = (int(image.shape[-2]), int(image.shape[-1]))
        return Item(image=image, target=self.target, state=self.target.load(self.source, index, size, path))


def collate(results: list[tuple], spec: PipelineSpec, target: TorchvisionTarget, finish: bool):
    """Stacks samples into a batch; failed samples get an empty slot and are listed.

    Returns:
        ``(images, target_part, failures)``: ``(B, 3, H, W)`` images (normalised
        when ``finish``, else uint8), the target's part made here (``stack``;
        ``None`` for image-level targets), and the failures ``(slot, reason)``.
    """
    failures = [(k, reason) for k, (_, _, reason) in enumerate(results) if reason is not None]
    h, w = spec.size
    images = []
    for image, _, reason in results:
        images.append(image if reason is None else torch.zeros(3, h, w, dtype=torch.uint8))
    in_worker = get_worker_info() is not None
    if spec.output.channels_last:
        batch = torch.stack([image.permute(1, 2, 0) for image in images]).permute(0, 3, 1, 2)
    else:
        batch = torch.stack(images)
    if finish:
        batch = finisher(spec)(batch, out=empty_like_output(batch, spec, shared=in_worker))  # Output, in the worker
    elif in_worker:
        batch = batch.share_memory_()
    return batch, target.stack([t for _, t, _ in results], spec), failures


def finish_one(image: torch.Tensor, spec: PipelineSpec, finish: bool) -> torch.Tensor:
    """One sample's ``(3, H, W)`` uint8 image as it would stand in a collated batch."""
    return finisher(spec)(image[None])[0] if finish else image


__all__ = ["JPEG_DECODER", "DecodedSamples", "collate", "decode", "finish_one", "jpeg_decoder"]
