"""The DALI image decoder's settings: fancy upsampling, the hardware decoder's share, preallocation."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from nvidia.dali import types

from ...loading.config import LoaderConfig
from .calibrate import DEFAULT_LOAD


@dataclass(frozen=True)
class DecoderSettings:
    """DALI decoder settings.

    Attributes:
        hw_decoder_load: share of JPEGs sent to the GPU's hardware decoder
            (where it has one); the rest go to the CUDA decoder. ``"auto"``: measured
            on the first batches (``calibrate``).
        width_hint, height_hint: sizes the decoders preallocate for (0: grown at run time).
    """

    hw_decoder_load: float | str = "auto"
    width_hint: int = 0
    height_hint: int = 0


def decoder_settings(config: LoaderConfig, sizes: np.ndarray) -> DecoderSettings:
    """The loader's decoder settings; ``preallocate="auto"`` takes the 99th percentile of the
    samples' scanned image ``sizes`` (``(N, 2)`` ``(h, w)``, ``-1`` where unknown)."""
    if config.preallocate is None:
        width = height = 0
    elif config.preallocate == "auto":
        known = sizes[sizes[:, 0] > 0]
        height, width = (int(v) for v in np.percentile(known, 99, axis=0)) if len(known) else (0, 0)
    else:
        assert isinstance(config.preallocate, tuple)  # LoaderConfig checked: (width, height)
        width, height = config.preallocate
    return DecoderSettings(hw_decoder_load=config.hw_decoder_load, width_hint=width, height_hint=height)


def decoder_kwargs(gpu: bool, settings: DecoderSettings) -> dict:
    """The image decoder's arguments: libjpeg's fancy chroma upsampling (as torchvision and PIL decode);
    on the GPU the hardware decoder's share and the preallocation hints."""
    kwargs = dict(device="mixed" if gpu else "cpu", output_type=types.RGB, jpeg_fancy_upsampling=True)
    if gpu:
        load = DEFAULT_LOAD if settings.hw_decoder_load == "auto" else settings.hw_decoder_load  # DALI takes numbers
        kwargs.update(
            hw_decoder_load=load,
            preallocate_width_hint=settings.width_hint,
            preallocate_height_hint=settings.height_hint,
        )
    return kwargs


__all__ = ["DecoderSettings", "decoder_settings", "decoder_kwargs"]
