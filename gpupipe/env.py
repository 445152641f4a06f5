"""Where gpupipe runs: CPU cores, this process's place in a distributed job, cache folders, versions.

The one home for each of these questions; every other module asks here.

- ``cores``: the CPU cores this process may use (its affinity mask).
- ``process_group``: ``(rank, world_size)`` of an initialised ``torch.distributed`` group.
- ``rank_and_world``: that, else ``RANK`` / ``WORLD_SIZE`` from the launcher, else ``(0, 1)``.
- ``World``, ``resolve_world``, ``settle_world``: a loader's share of the data, where
  it came from, and how it gives way to a process group initialised later.
- ``local_world_size``: the processes of this job on this host, from any launcher.
- ``default_threads``: the cores shared among those processes.
- ``cache_dir``: ``$GPUPIPE_CACHE``, else ``$XDG_CACHE_HOME/gpupipe``, else ``~/.cache/gpupipe``.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from ._version import __version__
from .checks import positive_int

#: Host names of a rendezvous that cannot span machines.
LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: Variables other launchers use for the processes on this host (torchrun's first).
LOCAL_SIZE_VARS = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")


def cores() -> int:
    """The CPU cores this process may use (its affinity mask where the OS has one), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def process_group() -> tuple[int, int] | None:
    """``(rank, world_size)`` of the initialised ``torch.distributed`` default group, else ``None``."""
    if "torch.distributed" not in sys.modules:  # no group was started: torch stays unimported (gpupipe.pack)
        return None
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


def _env_int(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def rank_and_world() -> tuple[int, int]:
    """``(rank, world_size)``: from an initialised process group, else from ``RANK`` and
    ``WORLD_SIZE`` (set by torchrun and ``accelerate launch`` before the group exists), else ``(0, 1)``."""
    group = process_group()
    if group is not None:
        return group
    rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
    if rank is not None and world is not None and 0 <= rank < world:
        return rank, world
    return 0, 1


@dataclass(frozen=True)
class World:
    """This process's share of the data: ``rank`` of ``world_size``, and where it came from.

    Attributes:
        rank, world_size: the share.
        origin: ``"argument"`` (given to [`gpupipe.loader`][gpupipe.loader]), ``"group"`` (an
            initialised process group), ``"launcher"`` (``RANK`` / ``WORLD_SIZE``, or
            ``(0, 1)``, before any group existed: replaced by the group's once there is one),
            ``"unsampled"`` (``gpupipe.DataLoader`` without a sampler: ``(0, 1)``, every sample in
            every process as torch's, unless a framework that shards torch's loaders drives it) or
            ``"framework"`` (the group's share such a framework gave it).
    """

    rank: int
    world_size: int
    origin: str

    def __str__(self) -> str:
        return f"rank {self.rank} of {self.world_size}"


def resolve_world(rank: int | None, world_size: int | None) -> World:
    """The share from the arguments, else from torch.distributed, else from the launcher, else ``(0, 1)``.

    Raises:
        ValueError: a rank outside ``[0, world_size)`` or a world size below 1.
    """
    group = process_group()
    default_rank, default_world = group if group is not None else rank_and_world()
    origin = "argument" if rank is not None or world_size is not None else "group" if group is not None else "launcher"
    world_size = default_world if world_size is None else world_size
    rank = (default_rank if default_rank < world_size else 0) if rank is None else rank
    world_size = positive_int("world_size", world_size, 1, 2**31 - 1)
    try:
        rank = positive_int("rank", rank, 0, world_size - 1)  # a numpy int or 0-d tensor too, as world_size
    except ValueError:
        raise ValueError(f"rank must be an int in [0, world_size={world_size}), got {rank!r}") from None
    return World(rank, world_size, origin)


def settle_world(
    world: World, group: tuple[int, int] | None, framework_shards: Callable[[], bool] = lambda: False
) -> World:
    """The share to read once an initialised process group says ``group`` (``(rank, world_size)``, or ``None``).

    A launcher's share gives way to the group's, and so does an ``"unsampled"`` one when
    ``framework_shards()`` (a framework that shards a torch ``DataLoader`` given without a sampler drives
    the loader; ``gpupipe.loading.frameworks.shards_torch_loaders``), asked at every call: outside the
    framework (the script's own loop after ``fit``) it reads everything again, as torch's; an explicit ``world_size=1``
    (this process reads everything, as asked) stands; any other share that
    disagrees with the group is refused, since each rank would read the wrong part.

    Raises:
        ValueError: one line naming both shares.
    """
    if world.origin in ("unsampled", "framework"):  # decided again at every call, as the framework drives or not
        if group is not None and framework_shards():
            return World(group[0], group[1], "framework")
        return World(0, 1, "unsampled")
    if group is None:
        return world
    if group == (world.rank, world.world_size) or world.origin == "launcher":
        return World(group[0], group[1], "group" if world.origin == "launcher" else world.origin)
    if world.origin == "argument" and world.world_size == 1:
        return world
    how = "was given" if world.origin == "argument" else "took from torch.distributed when it was built"
    raise ValueError(
        f"this gpupipe loader {how} {world}, but the initialised process group has rank {group[0]} "
        f"of {group[1]}: its ranks would read the wrong shares; build the loader with the group's rank "
        f"and world size (or leave both out)"
    )


def local_world_size() -> int:
    """The processes of this job on this host, at least 1.

    In order: the launcher's count (``LOCAL_WORLD_SIZE`` from torchrun and
    ``accelerate launch``, or MPI's); the whole world when the job meets on
    a loopback address (``MASTER_ADDR``, as Lightning's launcher sets it on
    one machine), which no other host can reach; else the processes of
    this user on this host whose environment names this job (its
    ``MASTER_ADDR``, ``MASTER_PORT`` and the other ``JOB_VARS`` this
    process has) and that are kin to this process (same launcher; Linux,
    read from ``/proc``), the highest ``LOCAL_RANK`` among them plus one;
    else 1. A stale process of an earlier launch does not count.
    """
    for name in LOCAL_SIZE_VARS:
        value = _env_int(name)
        if value is not None and value >= 1:
            return value
    group = process_group()
    world = group[1] if group is not None else (_env_int("WORLD_SIZE") or 1)
    if world <= 1:
        return 1
    if os.environ.get("MASTER_ADDR", "").strip("[]") in LOOPBACK:
        return world
    return max(1, min(world, _job_processes_here()))


#: Variables that tell one launch from another: a process counts as a rank of this job only when it
#: has the same value as this process for each of these that this process has.
JOB_VARS = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID")


#: Seconds before this process that a process of the same parent may have started and still be a rank of this
#: launch (``_job_processes_here``): a launcher starts the ranks of one host together.
STALE_SIBLING_S = 60.0


def _stat(folder: str) -> tuple[bytes, int, int]:
    """``(state, parent's pid, start time in clock ticks since boot)`` of the process whose ``/proc`` folder is
    ``folder``."""
    with open(os.path.join(folder, "stat"), "rb") as fh:
        fields = fh.read(4096).rsplit(b")", 1)[1].split()  # after the name, which may hold spaces and ")"
    return fields[0], int(fields[1]), int(fields[19])


def _job_processes_here() -> int:
    """The highest ``LOCAL_RANK`` plus one among this user's processes of this job on this host (0 if unknown).

    A process counts when its environment has this job's ``JOB_VARS`` and a ``LOCAL_RANK``, and
    it is kin to this process: started by the same parent (the launcher: torchrun, mpirun,
    srun's step daemon), this process's parent or its child (a launcher that runs rank 0 itself
    and starts the others, as Lightning's). A stale process of an earlier launch with the same
    address and port has another parent (its launcher is gone), so it does not count; nor does
    one of the same parent (a shell that started the ranks of both launches in the background)
    that started ``STALE_SIBLING_S`` or more before this process (a launcher starts its ranks
    together), nor a zombie.
    """
    port = os.environ.get("MASTER_PORT")
    if not port or not os.path.isdir("/proc"):
        return 0
    want = {k.encode(): os.environ[k].encode() for k in JOB_VARS if k in os.environ}
    me, parent = os.getpid(), os.getppid()
    try:
        mine, ticks = _stat(f"/proc/{me}")[2], os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        mine, ticks = 0, 0
    local = {_env_int("LOCAL_RANK") or 0}
    uid = os.getuid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            with open(os.path.join(entry.path, "environ"), "rb") as fh:
                data = fh.read(1 << 20)
            state, ppid, started = _stat(entry.path)
        except (OSError, ValueError, IndexError):  # gone, not ours to read, or unreadable
            continue
        if (ppid not in (parent, me) and int(entry.name) != parent) or state in (b"Z", b"X"):
            continue
        if ppid == parent and started < mine - STALE_SIBLING_S * ticks:  # a sibling of an earlier launch
            continue
        variables = dict(item.split(b"=", 1) for item in data.split(b"\0") if b"=" in item)
        if all(variables.get(k) == v for k, v in want.items()) and variables.get(b"LOCAL_RANK", b"").isdigit():
            local.add(int(variables[b"LOCAL_RANK"]))
    return max(local) + 1


def default_threads() -> int:
    """The CPU cores this process may use, shared among the processes of this job on this host
    (``local_world_size``): 8 ranks on a 16-core node get 2 threads each rather than 16. A
    process that a launcher pinned to its own cores (an affinity mask smaller than the host) keeps
    them all: they are already its share."""
    usable = cores()
    if usable < (os.cpu_count() or usable):
        return usable
    return max(1, usable // local_world_size())


def cache_dir(*parts: str) -> Path:
    """gpupipe's cache folder (scan caches, demo data, remote tars), joined with ``parts``.

    ``$GPUPIPE_CACHE``, else ``$XDG_CACHE_HOME/gpupipe``, else ``~/.cache/gpupipe``; a ``~`` the shell left
    (a ``.env`` file, a Dockerfile's ``ENV``) is the home folder, and a relative path starts at the current
    folder (made absolute, so that messages and worker processes name one folder).
    """
    if os.environ.get("GPUPIPE_CACHE"):
        base = Path(os.environ["GPUPIPE_CACHE"])
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")) / "gpupipe"
    return base.expanduser().absolute().joinpath(*parts)


def versions() -> dict[str, str | None]:
    """The versions that decide gpupipe's behaviour: Python, gpupipe, torch, torchvision, DALI (``None``: absent).

    gpupipe's is the running code's own (``gpupipe.__version__``), installed or not (a working tree on
    ``PYTHONPATH`` has no package metadata).
    """
    out: dict[str, str | None] = {"python": platform.python_version(), "gpupipe": __version__}
    for name, dist in (
        ("torch", "torch"),
        ("torchvision", "torchvision"),
        ("dali", "nvidia-dali-cuda120"),
        ("dali", "nvidia-dali-cuda130"),
    ):
        try:
            out[name] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out.setdefault(name, None)
    return out


#: Module prefixes of Lightning's loops: with ``use_distributed_sampler`` (its default) Lightning gives a torch
#: ``DataLoader`` without a sampler a ``DistributedSampler``, so a swapped ``gpupipe.DataLoader`` shards too.
LIGHTNING_LOOPS = ("lightning.pytorch.", "pytorch_lightning.")


def on_stack(modules: tuple[str, ...], pick: Callable[[Any], Any]) -> Any:
    """The first ``pick(self)`` that is not ``None``, over the call stack's frames (innermost first) of methods
    in modules whose names start with one of ``modules``; else ``None``."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__", "").startswith(modules):
            found = pick(frame.f_locals.get("self"))
            if found is not None:
                return found
        frame = frame.f_back
    return None


def lightning_trainer() -> Any:
    """The Lightning ``Trainer`` whose loops are on the call stack (asking for the loader), else ``None``."""

    def trainer_of(owner: Any) -> Any:  # not a frame without its trainer (a CombinedLoader's)
        trainer = owner if hasattr(owner, "_accelerator_connector") else getattr(owner, "trainer", None)
        return trainer if hasattr(trainer, "_accelerator_connector") else None

    return on_stack(LIGHTNING_LOOPS, trainer_of)


__all__ = [
    "LIGHTNING_LOOPS",
    "lightning_trainer",
    "on_stack",
    "cores",
    "process_group",
    "rank_and_world",
    "World",
    "resolve_world",
    "settle_world",
    "local_world_size",
    "default_threads",
    "cache_dir",
    "versions",
]
