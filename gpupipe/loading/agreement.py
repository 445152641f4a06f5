"""What the ranks that share a loader must agree on, and the one exchange that compares it.

A loader whose share is the initialised process group's own (``rank`` and
``world_size`` of the group, given or taken from it) is built by every rank
of the group: when it is built, the ranks exchange their listing (how many
samples, and ``listing_digest`` of their names) and the settings that
decide which samples each reads (``AGREED``), and a difference is
refused on every rank alike (``RanksDisagree``, naming what differs and
the ranks), rather than giving the ranks different batches or another
sample's size. The scan's own exchange (``gpupipe.sources.scan``) happens among
the same ranks, and compares the listing it scanned again.

The ranks compare again when they load a state (``load_alike``): each must resume at the same batch (per-rank
files of which one is older would have them read different batches and batch counts), and a state refused on one
rank is refused on every rank, rather than leave the others resuming alone.

Each exchange first waits for the other ranks to reach it (``arrived``); a
rank that waits longer than ``WAIT_NOTICE_S`` says which ranks it waits for
and why (a loader built on some ranks only, without ``world_size=1``), then
waits on as any collective does.

A loader with any other share joins no collective: ``world_size=1`` (one
process reads everything, e.g. evaluation on rank 0 alone) scans alone; a
share that disagrees with the group is refused when the loader is first
used (``gpupipe.env.settle_world``). A sub-group cannot be made here:
creating one is itself a collective of the whole group.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import itertools
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .. import env
from ..errors import Error
from ..fileio import sha256_hex

#: The loader settings every rank must give alike (each changes which samples a rank reads, or
#: how many batches: a rank with one batch more or less hangs the job at its next collective).
AGREED = (
    "batch_size",
    "shuffle",
    "drop_last",
    "even_batches",
    "seed",
    "on_error",
    "max_pixels",
    "max_file_size",
    "reduced_decode",  # the torchvision backend's pixels (the pipeline and backend: gpupipe.loading.identity.agreed)
)

#: Seconds a rank waits for the others to reach a loader's exchange before it logs which it waits for.
WAIT_NOTICE_S = 60.0

logger = logging.getLogger("gpupipe.loader")
_EXCHANGES = itertools.count()  # this process's exchanges, numbered alike on every rank that builds alike

_GROUP: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("gpupipe_group", default=None)


class RanksDisagree(Error, ValueError):
    """The ranks sharing a loader listed different files or were given different settings."""


def listing_digest(names: Sequence[str]) -> str:
    """A digest of the ordered names, relative to their common folder (a dataset mounted elsewhere
    on another host, or restored elsewhere, gives the same digest): 16 hex digits."""
    joined = ""
    if len(names):
        names = [str(n) for n in names] if not isinstance(names[0], str) else names
        root = os.path.dirname(os.path.commonprefix([min(names), max(names)]))
        joined = "\0" + "\0".join(names)
        if root:  # every name starts with root: cut it after each separator, in one pass
            joined = joined.replace("\0" + root, "\0")
    return sha256_hex(joined, 16)


def exchange_group(world: env.World) -> tuple[int, int] | None:
    """``(rank, world_size)`` of the ranks that share a loader of share ``world``: the initialised
    process group when ``world`` is its own share, else ``None`` (this process is alone)."""
    group = env.process_group()
    if group is None or group[1] <= 1 or (world.rank, world.world_size) != group:
        return None
    return group


@contextlib.contextmanager
def shared_by(group: tuple[int, int] | None) -> Iterator[None]:
    """Within this block, a scan (``gpupipe.sources.scan.scan``) splits its work among ``group`` (``None``: alone)."""
    token = _GROUP.set(group)
    try:
        yield
    finally:
        _GROUP.reset(token)


def current_group() -> tuple[int, int] | None:
    """The ranks a scan started now shares its work with (see ``shared_by``); ``None``: alone."""
    return _GROUP.get()


#: What a rank waits for in a loader's exchange (``arrived``), and what to do where some ranks never reach it.
BUILD = (
    "build the same loader",
    "a loader built on some ranks only must be given rank=0, world_size=1",
)
LOAD = (
    "call load_state_dict",
    "every rank must load a state into its loader (each rank's own file, or rank 0's)",
)


def gather(payload: Any, waiting: tuple[str, str] = BUILD) -> list[Any]:
    """``payload`` of every rank of the default process group, in rank order (``waiting``: what the notice of
    ``arrived`` says)."""
    import torch.distributed as dist

    arrived(dist, waiting)
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, payload)
    return gathered


def arrived(dist: Any, waiting: tuple[str, str] = BUILD) -> None:
    """Marks this rank's arrival at its next exchange in the process group's store, and waits up to
    ``WAIT_NOTICE_S`` for the other ranks'; logs a warning naming those missing (then returns: the exchange
    waits on, as before). Without a store to use, returns at once."""
    try:
        store = dist.distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError, ValueError):
        return
    rank, world = dist.get_rank(), dist.get_world_size()
    prefix = f"gpupipe/exchange/{next(_EXCHANGES)}/"
    others = [r for r in range(world) if r != rank]
    try:
        store.set(prefix + str(rank), "1")
        store.wait([prefix + str(r) for r in others], datetime.timedelta(seconds=WAIT_NOTICE_S))
    except RuntimeError:  # DistStoreError: not all arrived in time (or the store is gone)
        try:
            missing = [r for r in others if not store.check([prefix + str(r)])]
        except RuntimeError:
            return
        if missing:
            logger.warning(
                "gpupipe loader: rank %d waits for %s to %s (%.0f s so far); %s, or this rank waits until the "
                "process group's timeout",
                rank,
                _ranks(missing),
                waiting[0],
                WAIT_NOTICE_S,
                waiting[1],
            )


def check_agree(gathered: Sequence[dict[str, Any]], what: str) -> None:
    """Refuses the first field on which the ranks' dicts (in rank order) differ.

    Raises:
        RanksDisagree: naming ``what``, the field, and each value with its ranks.
    """
    for name in gathered[0]:
        ranks: dict[str, list[int]] = {}
        for rank, payload in enumerate(gathered):
            ranks.setdefault(repr(payload.get(name)), []).append(rank)
        if len(ranks) > 1:
            values = "; ".join(f"{value} on {_ranks(r)}" for value, r in ranks.items())
            raise RanksDisagree(
                f"the ranks sharing this loader disagree on {what}: {name} is {values}; every rank must "
                "build its loader over the same files with the same settings (otherwise the ranks read "
                "different samples or batch counts and the job hangs at its next collective)"
            )


def _ranks(ranks: list[int]) -> str:
    shown = ", ".join(str(r) for r in ranks[:8]) + (f", ... ({len(ranks)} ranks)" if len(ranks) > 8 else "")
    return f"rank{'s' if len(ranks) > 1 else ''} {shown}"


def check_ranks_agree(
    names: Sequence[str],
    config: Any,
    group: tuple[int, int] | None,
    draws: Any = None,
    extra: dict[str, Any] | None = None,
) -> None:
    """Under ``group`` (``exchange_group``), one exchange comparing every rank's listing of
    ``names``, its ``AGREED`` settings of ``config``, its ``draws`` (epochs drawn by weight: their
    digest) and ``extra`` (the classes, labels, pipeline and backend: ``gpupipe.loading.identity.agreed``);
    nothing without a group.

    Raises:
        RanksDisagree: on every rank alike, naming the first difference and the ranks.
    """
    if group is None:
        return
    settings = {name: getattr(config, name) for name in AGREED}
    settings["on_error"] = str(getattr(settings["on_error"], "value", settings["on_error"]))
    payload = {"files": len(names), "listing": listing_digest(names), **settings}
    payload["draws"] = None if draws is None else draws.digest()
    payload.update(extra or {})
    check_agree(gather(payload), "the loader's files and settings")


def load_alike(load: Callable[[], tuple[int, ...]], group: tuple[int, int] | None) -> None:
    """Runs ``load`` (a loader's ``load_state_dict``, which returns where the state resumes: ``(epoch,
    batches_done)``, or ``(epoch, batches_done, offset)`` on another split) and, under ``group``
    (``exchange_group``), compares in one exchange what each rank loaded:
    ranks that resume at different batches (per-rank files, one of them older: a job stopped between the ranks'
    saves) would read different batches and batch counts, and a state refused on some ranks only would leave the
    others resuming alone.

    Raises:
        ValueError: this rank's refusal, as ``load`` raised it (any other error too); ``RanksDisagree``: on the
            other ranks, naming the ranks that refused and the first refusal, or naming where each rank resumes.
    """
    if group is None:
        load()
        return
    refusal: Exception | None = None
    try:
        where = list(load())
    except Exception as error:  # any failure: the other ranks hear of it, rather than wait in the exchange
        where, refusal = None, error
    said = None if refusal is None else str(refusal) if isinstance(refusal, ValueError) else repr(refusal)
    gathered = gather({"where": where, "refused": said}, LOAD)
    if refusal is not None:
        raise refusal
    refused = [rank for rank, payload in enumerate(gathered) if payload["refused"] is not None]
    if refused:
        raise RanksDisagree(
            f"load_state_dict: {_ranks(refused)} refused its state ({gathered[refused[0]]['refused']}); every rank "
            "must resume from a state that fits, or the ranks read different batches"
        )
    places: dict[tuple[int, ...], list[int]] = {}
    for rank, payload in enumerate(gathered):
        places.setdefault(tuple(payload["where"]), []).append(rank)
    if len(places) > 1:
        shown = "; ".join(
            f"({place[0]}, {place[1]}){f' from slot {place[2]}' if place[2:] else ''} on {_ranks(ranks)}"
            for place, ranks in places.items()
        )
        raise RanksDisagree(
            f"load_state_dict: the ranks loaded states that resume at different batches: (epoch, batches_done) is "
            f"{shown}; they would read different batches and batch counts (a DDP job then hangs). Load the same "
            "state on every rank (rank 0's, as Accelerate's load_state does: with even_batches every rank is at the "
            "same batch; with even_batches=False a rank that read all its share first says the next epoch), or "
            "per-rank files saved at the same step"
        )


__all__ = [
    "AGREED",
    "load_alike",
    "RanksDisagree",
    "listing_digest",
    "exchange_group",
    "shared_by",
    "current_group",
    "gather",
    "arrived",
    "check_agree",
    "check_ranks_agree",
]
