"""The DALI image decoder's settings: fancy upsampling, the hardware decoder's share, preallocation."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from nvidia.dali import types

from ...loading.config import LoaderConfig
from ...sources import Source
from ...sources.scan import GREY16
from .calibrate import DEFAULT_LOAD


@dataclass(frozen=True)
class DecoderSettings:
    """DALI decoder settings.

    Attributes:
        hw_decoder_load: share of JPEGs sent to the GPU's hardware decoder
            (where it has one); the rest go to the CUDA decoder. ``"auto"``: measured
            on the first batches (``calibrate``).
        width_hint, height_hint: sizes the decoders preallocate for (0: grown at run time).
        decode_as: ``"upright"`` (EXIF orientation applied) or ``"stored"`` (not: torchvision's PIL loader's
            reading, the source's ``decode_as``).
    """

    hw_decoder_load: float | str = "auto"
    width_hint: int = 0
    height_hint: int = 0
    decode_as: str = "upright"


def decoder_settings(config: LoaderConfig, sizes: np.ndarray, decode_as: str = "upright") -> DecoderSettings:
    """The loader's decoder settings; ``preallocate="auto"`` takes the 99th percentile of the
    samples' scanned image ``sizes`` (``(N, 2)`` ``(h, w)``, ``-1`` where unknown); ``decode_as`` is the
    source's (``Source.decode_as``)."""
    if config.preallocate is None:
        width = height = 0
    elif config.preallocate == "auto":
        known = sizes[sizes[:, 0] > 0]
        height, width = (int(v) for v in np.percentile(known, 99, axis=0)) if len(known) else (0, 0)
    else:
        assert isinstance(config.preallocate, tuple)  # LoaderConfig checked: (width, height)
        width, height = config.preallocate
    return DecoderSettings(config.hw_decoder_load, width_hint=width, height_hint=height, decode_as=decode_as)


def decoder_kwargs(gpu: bool, settings: DecoderSettings) -> dict:
    """The image decoder's arguments (``decoders.image`` and ``decoders.image_slice`` alike): libjpeg's fancy
    chroma upsampling (as torchvision and PIL decode); the EXIF orientation applied or not (``decode_as``); on
    the GPU the hardware decoder's share and the preallocation hints."""
    kwargs = dict(
        device="mixed" if gpu else "cpu",
        output_type=types.RGB,
        jpeg_fancy_upsampling=True,
        adjust_orientation=settings.decode_as == "upright",
    )
    if gpu:
        load = DEFAULT_LOAD if settings.hw_decoder_load == "auto" else settings.hw_decoder_load  # DALI takes numbers
        kwargs.update(
            hw_decoder_load=load,
            preallocate_width_hint=settings.width_hint,
            preallocate_height_hint=settings.height_hint,
        )
    return kwargs


def warn_unlike_pil(source: Source) -> None:
    """Warns, once when the loader is built, naming the 16-bit grey PNGs of a source read as torchvision's PIL
    loader reads it (``decode_as="stored"``): DALI's decoders scale them to 8 bits (``v * 255 / 65535``,
    rounded), where PIL's ``convert("RGB")`` clamps every value above 255 to 255."""
    if source.decode_as != "stored":
        return
    deep = np.flatnonzero(source.last_scan().has(GREY16))
    if len(deep):
        named = ", ".join(source.names[i] for i in deep[:3]) + (", ..." if len(deep) > 3 else "")
        warnings.warn(
            f"{len(deep)} 16-bit grey PNG{'s' if len(deep) > 1 else ''} ({named}): torchvision's PIL loader "
            "(convert('RGB')) clamps their values above 255 to 255 (a nearly white image), DALI scales them to 8 "
            "bits (v * 255 / 65535): these images differ from torch's. backend='torchvision' reads them as PIL "
            "does; or save them as 8-bit images",
            UserWarning,
            stacklevel=2,
        )


__all__ = ["DecoderSettings", "decoder_settings", "decoder_kwargs", "warn_unlike_pil"]
