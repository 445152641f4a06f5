"""A run: one DALI pipeline reading a planned list of batches, driven one batch at a time.

A run may span several epochs (short epochs are read by one pipeline, so
they cost what long ones do). The pipeline's reader reads the run's
samples in order; one ``external_source`` gives, for iteration ``i``, the
planned parameters (and masks or boxes) of batch ``i``. Iterations are
scheduled by hand, never beyond the run's last batch, so no sample is read
and thrown away at the end.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ...errors import Error

logger = logging.getLogger(__name__)


@dataclass
class BatchRef:
    """One batch a run reads.

    Attributes:
        epoch, batch: which batch of which epoch.
        indices, positions: ``(batch_size,)`` the samples and their slots, the
            last real one repeated to fill a short batch.
        count: the real samples.
        content_sizes: ``(batch_size, 2)`` the output images' content sizes (without padding), set when planned.
        tail_params: ``(batch_size, P)`` float32, the parameters of the ops run after the graph (``torch_form``),
            set when planned (in pinned memory where the batches go to a GPU).
    """

    epoch: int
    batch: int
    indices: np.ndarray
    positions: np.ndarray
    count: int
    content_sizes: np.ndarray | None = None
    tail_params: torch.Tensor | None = None

    @property
    def key(self) -> tuple[int, int]:
        return self.epoch, self.batch


def padded(values: np.ndarray, size: int) -> np.ndarray:
    """``values`` with its last element repeated up to ``size``."""
    if len(values) >= size:
        return values
    return np.concatenate([values, np.full(size - len(values), values[-1], values.dtype)])


class RunFailed(Error):
    """The pipeline failed while batch ``refs[at]`` (or one prepared with it) was being made.

    Attributes:
        at: the batch the consumer was waiting for.
        in_flight: the batches being prepared at that moment (their samples are the suspects).
        error: DALI's error.
    """

    def __init__(self, at: int, in_flight: list[BatchRef], error: Exception) -> None:
        super().__init__(str(error))
        self.at = at
        self.in_flight = in_flight
        self.error = error


class Run:
    """Drives one built pipeline over ``refs``.

    Args:
        pipe: the built pipeline.
        refs: the batches it reads, in order.
        check: called with each batch's reader identities and its ref; raises
            when DALI's order is not the planned one.
        on_close: frees what the run's reader needed (index files, links).
    """

    def __init__(self, pipe, refs: list[BatchRef], *, check: Callable, on_close: Callable[[], None]) -> None:
        self.pipe = pipe
        self.refs = refs
        self.check = check
        self.on_close = on_close
        self.consumed = 0
        self.scheduled = 0
        self.targets: torch.Tensor | None = None  # every ref's image-level targets on the device, made on first use
        self.holds_targets: bool | None = None  # whether those are small enough to make at once (asked once)
        self.shares_checked: dict[int, object] = {}  # epoch -> the rank share its refs were checked against

    @property
    def next_key(self) -> tuple[int, int] | None:
        return self.refs[self.consumed].key if self.consumed < len(self.refs) else None

    @property
    def remaining(self) -> int:
        return len(self.refs) - self.consumed

    @property
    def fully_scheduled(self) -> bool:
        return self.scheduled >= len(self.refs)

    def prime(self) -> None:
        """Starts the first iterations (DALI prefetches its queue depth of them)."""
        if self.scheduled == 0 and self.refs:
            self.pipe.schedule_run()
            self.scheduled = min(len(self.refs), self.pipe.prefetch_queue_depth)

    def next_batch(self, stream=None) -> tuple[BatchRef, Sequence]:
        """The next batch's ref and the pipeline's outputs (DALI TensorLists).

        Args:
            stream: the CUDA stream the outputs are for (the consumer's); ``None``: host-synchronous.

        Raises:
            RunFailed: the pipeline failed.
        """
        self.prime()
        ref = self.refs[self.consumed]
        try:
            outputs = self.pipe.share_outputs(stream) if stream is not None else self.pipe.share_outputs()
        except RuntimeError as err:
            raise RunFailed(
                self.consumed, self.refs[self.consumed : max(self.scheduled, self.consumed + 1)], err
            ) from err
        self.check(outputs[-1], ref, self.consumed)
        self.consumed += 1
        self.pipe.release_outputs()  # with exec_dynamic the buffers live on with their references
        if self.scheduled < len(self.refs):
            self.pipe.schedule_run()
            self.scheduled += 1
        return ref, outputs[:-1]

    def close(self) -> None:
        self.pipe = None
        self.on_close()


def to_torch(tensor_list, device: torch.device | None) -> torch.Tensor:
    """A DALI TensorList as a torch tensor sharing its memory (DLPack, no copy)."""
    dense = tensor_list.as_tensor()
    if device is not None and device.type == "cuda":
        with torch.cuda.device(device):
            return torch.from_dlpack(dense)
    return torch.from_dlpack(dense)


__all__ = ["BatchRef", "Run", "RunFailed", "padded", "to_torch"]
