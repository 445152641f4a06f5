"""``hw_decoder_load="auto"``: the hardware decoder's share measured on this GPU and this data.

The best share of JPEGs for the GPU's hardware decoder depends on the data
(measured on one H100: 1.0 was best on small demo JPEGs, 0.65 on photos,
each 10-25 % ahead of the other value). So the loader measures: before its
first run, it reads the first few batches of the real pipeline at a few
shares, keeps the fastest, and logs what it measured. A coarse pass at
0.35, 0.65 and 1.0 is refined once around the best, so at most five short
pipelines are built; the result is kept for the process, so a loader built
again on the same data (a framework rebuilding it every epoch, the bench's
rounds) does not measure again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable

logger = logging.getLogger(__name__)

#: Shares measured first; then the best one's neighbours at ``REFINE`` either side.
COARSE = (0.35, 0.65, 1.0)
REFINE = 0.15
#: DALI's own default, used when nothing can be measured.
DEFAULT_LOAD = 0.65


def choose_hw_decoder_load(rate: Callable[[float], float]) -> tuple[float, dict[float, float]]:
    """The share with the highest ``rate(share)`` (images/s), and every figure measured.

    Args:
        rate: reads a few batches with the given ``hw_decoder_load`` and returns images per second.
    """
    figures: dict[float, float] = {}
    for load in COARSE:
        figures[load] = rate(load)
    best = max(figures, key=lambda k: figures[k])
    for load in (round(best - REFINE, 2), round(best + REFINE, 2)):
        if 0.0 <= load <= 1.0 and load not in figures:
            figures[load] = rate(load)
    best = max(figures, key=lambda k: figures[k])
    logger.info(
        "hw_decoder_load=auto chose %.2f (images/s by share: %s)",
        best,
        ", ".join(f"{k:.2f}: {v:,.0f}" for k, v in sorted(figures.items())),
    )
    return best, figures


_CHOSEN: dict[Hashable, tuple[float, dict[float, float]]] = {}
_CHOSEN_LOCK = threading.Lock()


def remembered_hw_decoder_load(key: Hashable, rate: Callable[[float], float]) -> tuple[float, dict[float, float]]:
    """``choose_hw_decoder_load``, measured once per process for each ``key`` (device, data, pipeline)."""
    with _CHOSEN_LOCK:
        if key not in _CHOSEN:
            _CHOSEN[key] = choose_hw_decoder_load(rate)
        else:
            logger.debug("hw_decoder_load=auto: %.2f, as measured before for this data", _CHOSEN[key][0])
        return _CHOSEN[key]


__all__ = ["choose_hw_decoder_load", "remembered_hw_decoder_load", "COARSE", "REFINE", "DEFAULT_LOAD"]
