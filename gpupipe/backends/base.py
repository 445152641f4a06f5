"""What the loader gives a backend and asks of it: where it runs, one rank's epoch, and the protocol."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from .. import env
from ..loading.sampling import RankShare

if TYPE_CHECKING:
    from ..loading.transfer import Batch


@dataclass(frozen=True)
class Placement:
    """Where a backend runs, chosen by the loader (again when a process group appears later).

    Attributes:
        device: where batches land.
        threads: DALI CPU threads, or DataLoader worker processes (0: decode in the main process).
    """

    device: torch.device
    threads: int

    @classmethod
    def chosen(cls, device: torch.device, num_threads: int | None) -> Placement:
        """On ``device`` with ``num_threads`` as asked, or (``None``) the cores this process may use,
        shared among the processes of its job on this host (``gpupipe.env.default_threads``)."""
        return cls(device, env.default_threads() if num_threads is None else num_threads)


@dataclass(frozen=True)
class EpochRead:
    """One rank's reading of one epoch: what ``Backend.iter_epoch`` is given.

    Attributes:
        epoch: the epoch number (it keys every sample's augmentation).
        share: the rank's samples and their slots.
        batches: batches in the epoch (a partial last one counts unless ``drop_last``).
    """

    epoch: int
    share: RankShare
    batches: int


class Backend(Protocol):
    """What the loader asks of a backend.

    A backend is built as ``factory(source, spec, config, placement, errors, **options)``
    (see ``registry``): the source, the checked pipeline, the loader's
    [`LoaderConfig`][gpupipe.LoaderConfig], its ``Placement`` and its
    ``ErrorPolicy``.
    """

    name: str

    def iter_epoch(
        self, read: EpochRead, start: int = 0, upcoming: Callable[[int], EpochRead] | None = None
    ) -> Iterator[Batch]:
        """Yields batches ``start, start + 1, ...`` of ``read``, each as ``(images, targets)``.

        ``upcoming(epoch)`` gives later epochs, which the backend may read ahead
        (a loop without ``set_epoch`` reads ``read.epoch + 1`` next).
        """

    def close(self) -> None:
        """Frees what the backend holds (pipelines, worker processes).

        A backend may also offer ``prepare(read, upcoming)``: start preparing the
        epoch a new loader is likely to read first.
        """


__all__ = ["Placement", "EpochRead", "Backend"]
