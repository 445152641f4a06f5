"""The DALI backend: ops lowered to a DALI graph on the GPU (``dali``) or CPU (``dali-cpu``).

The loader decides each epoch's order; DALI's reader reads exactly that
list (never shuffling on its own), and every random parameter comes from
the plan (``gpupipe.plan``), so the order and the augmentations are the
same as on every other backend. Pipelines are *runs* (``run``): short
epochs are read by one pipeline, and the next run is built in the
background while the current one is read, so epoch boundaries cost no
pipeline build. A sample that fails while loading is found by the probe
(``recovery``) and replaced (``BadSamples``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from ...errors import ErrorPolicy
from ...loading.batchsteps import finisher
from ...loading.config import LoaderConfig
from ...loading.transfer import Batch, CudaPrefetcher, to_device
from ...ops import Output
from ...plan import Planner
from ...plan.spec import PipelineSpec
from ...sources import Source
from .. import forks
from ..base import EpochRead, Placement
from ..common import BadSamples, batch_slots
from .forms import lowering_form
from .graph import Pipelines
from .lifetime import FORK_FIX, cuda_keep_alive, refuse_in_fork
from .readers import remove_stale_folders
from .recovery import suspects_of
from .run import BatchRef, Run, RunFailed, padded, to_torch
from .torch_form import tail_of

logger = logging.getLogger(__name__)

#: A run reads whole epochs until it holds at least this many samples (short epochs share a pipeline).
RUN_SAMPLES = 32_768
#: ... or this many epochs: a tiny folder would otherwise plan thousands of epochs before its first batch.
RUN_EPOCHS = 64
#: ... or until it reads this many stretches of one tar (each is one path of ``readers.webdataset``, opened and
#: indexed when the pipeline is built): a tiny pack of many tars would otherwise make tens of thousands.
RUN_TAR_STRETCHES = 1_024
#: The next run is built in the background once this share of the current one is read.
PREBUILD_AT = 0.5
#: A run's image-level targets are copied to the GPU at once (a batch's are then a view) up to this size.
RUN_TARGETS_BYTES = 64 << 20


class DaliBackend:
    """Runs a spec through DALI pipelines.

    Args:
        source: the samples.
        spec: the checked pipeline.
        config: the loader's settings (batch size, prefetch, seed, decoder settings).
        placement: the device and the CPU threads.
        errors: the loader's ``on_error`` policy.
        gpu: decode with ``device="mixed"`` and run the image ops on the GPU.
    """

    def __init__(
        self,
        source: Source,
        spec: PipelineSpec,
        config: LoaderConfig,
        placement: Placement,
        errors: ErrorPolicy,
        *,
        gpu: bool,
    ) -> None:
        self.name = "dali" if gpu else "dali-cpu"
        device = placement.device
        if gpu and device.type != "cuda":
            raise ValueError(f"backend 'dali' runs on a CUDA device, got device={device}; use 'dali-cpu'")
        self.source, self.spec, self.config, self.gpu = source, spec, config, gpu
        self.device = device
        self.target = source.target
        # dali-cpu feeding a GPU: uint8 batches, normalised on the GPU while the previous step runs.
        self.finish_on_gpu = not gpu and device.type == "cuda"
        # the "torch" form: the trailing policies and erasing as torch ops on the graph's uint8 batch
        self.tail = tail_of(spec, targets_move=self.target.moves_with_pixels) if lowering_form(gpu) == "torch" else None
        if self.tail is not None:
            self.graph_spec = self.tail.graph_spec()
            self._finish = finisher(spec)
        elif self.finish_on_gpu:
            self.graph_spec = dataclasses.replace(spec, output=Output("uint8", channels_last=spec.output.channels_last))
        else:
            self.graph_spec = spec
        self.bad = BadSamples(source, errors)
        self.pipelines = Pipelines(
            source,
            spec,
            self.graph_spec,
            config,
            placement,
            gpu=gpu,
            planner=Planner(spec, config.seed),
            sizes=source.sizes(),
            tail=self.tail,
        )
        self._run: Run | None = None
        self._next: Future | None = None
        self._builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpupipe-dali")
        # GPUPIPE_NO_KEEPALIVE=1 is a diagnostic switch for the GPU proof's stream-safety check only.
        self._keep = cuda_keep_alive(device) if gpu and os.environ.get("GPUPIPE_NO_KEEPALIVE") != "1" else None
        # GPUPIPE_DALI_OUTPUTS=host is a diagnostic switch for the GPU proof's ResNet-50 step only: outputs
        # synchronised with the host (as DALI's own iterator takes them) instead of bound to the consumer's stream.
        self._stream_outputs = gpu and os.environ.get("GPUPIPE_DALI_OUTPUTS") != "host"
        remove_stale_folders()
        self._owner = os.getpid()  # a forked child is refused (lifetime.refuse_in_fork) and leaves all this alone

    # -- building runs ------------------------------------------------------------

    def _refs(self, read: EpochRead, start: int, reads: Callable[[int], EpochRead] | None) -> list[BatchRef]:
        """The batches of ``read`` from ``start``, then whole following epochs up to ``RUN_SAMPLES`` (or
        ``RUN_EPOCHS`` epochs, or ``RUN_TAR_STRETCHES``); a source whose tars must fit a cache (remote) ends the
        run before it spans more than its ``shards_per_run`` tars, even within an epoch."""
        bs = self.config.batch_size
        refs: list[BatchRef] = []
        budget = self.source.shards_per_run
        tars: set = set()
        stretches = epochs = 0
        while True:
            for b in range(start, read.batches):
                indices, positions = batch_slots(read.share, b, bs)
                indices = self.bad.replace(indices, read.share, b * bs)
                if budget is not None:
                    read_from = self.source.tars_of(indices)
                    new = set() if read_from is None else set(read_from.tolist()) - tars
                    if refs and len(tars) + len(new) > budget:
                        return refs
                    tars |= new
                refs.append(BatchRef(read.epoch, b, padded(indices, bs), padded(positions, bs), len(indices)))
            stretches += _tar_stretches(self.source.tars_of(read.share.indices[start * bs :]))
            epochs += 1
            if reads is None or read.batches == 0 or epochs >= RUN_EPOCHS:
                return refs
            if len(refs) * bs >= RUN_SAMPLES or stretches >= RUN_TAR_STRETCHES:
                return refs
            read, start = reads(read.epoch + 1), 0

    # -- reading epochs -------------------------------------------------------------

    def prepare(self, read: EpochRead, upcoming: Callable[[int], EpochRead] | None = None) -> None:
        """Starts building the run of ``read`` in the background (the pass a new loader is likely to read
        first), so that a large file list's pipeline build overlaps the training script's own set-up."""
        if self._next is None and read.batches:
            self._next = self._builder.submit(self.pipelines.run, self._refs(read, 0, _reads_after(read, upcoming)))

    def iter_epoch(
        self, read: EpochRead, start: int = 0, upcoming: Callable[[int], EpochRead] | None = None
    ) -> Iterator[Batch]:
        """Yields batches ``start ..`` of ``read``; ``upcoming(epoch)`` gives later epochs to read ahead."""
        refuse_in_fork(self._owner)
        batches = forks.owned(self._batches(read, start, upcoming), FORK_FIX)  # a pass read on in a child: refused
        if self.finish_on_gpu:
            return iter(CudaPrefetcher(batches, self.device, finisher(self.spec)))
        return batches

    def _batches(self, read: EpochRead, start: int, upcoming) -> Iterator[Batch]:
        reads = _reads_after(read, upcoming)
        b = start
        try:
            while b < read.batches:
                run = self._run_at(read, b, reads)
                stream = torch.cuda.current_stream(self.device) if self._stream_outputs else None
                try:
                    ref, outputs = run.next_batch(stream)
                except RunFailed as failure:
                    self._recover(failure)
                    continue
                batch = self._assemble(ref, outputs, run)
                self._look_ahead(run, read, reads)
                b += 1
                yield batch
                if self._keep is not None:
                    self._keep.asked_again()
        finally:
            if self._keep is not None:
                self._keep.release_all(lambda: torch.cuda.synchronize(self.device))

    def _run_at(self, read: EpochRead, b: int, reads) -> Run:
        """A run whose next batch is batch ``b`` of ``read``: the current one, the one built ahead, or a new one."""
        key = (read.epoch, b)
        if self._run is not None and self._run.next_key == key and self._same_share(self._run, read):
            return self._run
        if self._next is not None:
            ahead = self._next.result()
            self._next = None
            if ahead.next_key == key and self._same_share(ahead, read):
                self._replace(ahead)
                return ahead
            self._retire(ahead)
        run = self.pipelines.run(self._refs(read, b, reads))
        self._replace(run)
        return run

    def _same_share(self, run: Run, read: EpochRead) -> bool:
        """Whether the run's remaining batches of ``read.epoch`` hold ``read``'s slots (compared once per run
        and share, all those batches in one array comparison; not again for every batch)."""
        if run.shares_checked.get(read.epoch) is read.share:
            return True
        refs = [r for r in run.refs[run.consumed :] if r.epoch == read.epoch]
        bs = self.config.batch_size
        planned = np.concatenate([r.positions[: r.count] for r in refs])
        start = refs[0].batch * bs
        if not np.array_equal(planned, read.share.positions[start : start + len(planned)]):
            return False
        run.shares_checked[read.epoch] = read.share
        return True

    def _replace(self, run: Run | None) -> None:
        if self._run is not None and self._run is not run:
            self._retire(self._run)
        self._run = run

    def _retire(self, run: Run) -> None:
        """Deletes a pipeline on the builder thread (a pipeline's teardown blocks for a while)."""
        self._builder.submit(run.close)

    def _look_ahead(self, run: Run, read: EpochRead, reads) -> None:
        """Builds the next run in the background, and starts it as the current one runs dry."""
        if self._next is None and run.consumed >= PREBUILD_AT * len(run.refs):
            last = run.refs[-1]
            if last.epoch != read.epoch and reads is None:
                return
            # a run may end inside an epoch (remote tars): the next one starts after its last batch
            nxt, start = (read if last.epoch == read.epoch else reads(last.epoch)), last.batch + 1
            if start >= nxt.batches:
                if reads is None:
                    return
                nxt, start = reads(last.epoch + 1), 0
            if nxt.batches:
                self._next = self._builder.submit(self.pipelines.run, self._refs(nxt, start, reads))
        if self._next is not None and run.fully_scheduled and self._next.done() and self._next.exception() is None:
            self._next.result().prime()

    def _recover(self, failure: RunFailed) -> None:
        """Finds the bad samples among those in flight, reports them, and drops the failed run."""
        failed, self._run = self._run, None
        if failed is not None:
            self._retire(failed)
        bad = self.pipelines.prober().probe(suspects_of(failure.in_flight))
        if not bad:
            raise RuntimeError(
                f"the {self.name} pipeline failed and no sample could be blamed: {failure.error}"
            ) from failure.error
        self.bad.report(bad.items())
        if self._next is not None:  # built before these were known bad

            def retire_built(f: Future) -> None:
                if f.exception() is None:
                    self._retire(f.result())

            self._next.add_done_callback(retire_built)
            self._next = None

    # -- batches ---------------------------------------------------------------------

    def _assemble(self, ref: BatchRef, outputs, run: Run) -> Batch:
        n = ref.count
        device = self.device if self.gpu else None
        raw = to_torch(outputs[0], device)
        images = raw.permute(0, 3, 1, 2) if self.graph_spec.output.channels_last else raw
        if n < images.shape[0]:
            images = images[:n]
        if self.tail is not None:
            assert ref.tail_params is not None  # planned with the run
            images = self.tail.apply(images, to_device(ref.tail_params[:n], images.device))
            if not self.finish_on_gpu:
                images = self._finish(images)
        elif images.dtype != self.graph_spec.output.torch_dtype:
            images = images.to(self.graph_spec.output.torch_dtype)
        targets: Any
        if self.target.moves_with_pixels:
            assert ref.content_sizes is not None  # planned with the run
            targets = self.pipelines.target.collect([to_torch(o, device) for o in outputs[1:]], n, ref.content_sizes)
        elif not self.finish_on_gpu and self._holds_run_targets(run):
            start = (run.consumed - 1) * self.config.batch_size
            targets = self._run_targets(run)[start : start + n]
        else:
            targets = self.target.batch(self.source, ref.indices[:n])
        if self._keep is not None:
            self._keep.handed_out([raw])
        if not self.finish_on_gpu and self.device.type == "cuda":
            targets = to_device(targets, self.device)
        return images, targets

    def _holds_run_targets(self, run: Run) -> bool:
        """Whether a run's image-level targets are small enough to make (and copy to the GPU) at once."""
        if run.holds_targets is None:
            rows = len(run.refs) * self.config.batch_size
            run.holds_targets = rows * self.target.bytes_per_sample(self.source) <= RUN_TARGETS_BYTES
        return run.holds_targets

    def _run_targets(self, run: Run) -> torch.Tensor:
        """Every image-level target of ``run`` on the loader's device, made (and copied) once: a batch's are then
        a view, not a new tensor and a copy."""
        if run.targets is None:
            indices = np.concatenate([r.indices for r in run.refs])
            run.targets = to_device(self.target.batch(self.source, indices), self.device)
        return run.targets

    def close(self) -> None:
        if os.getpid() != self._owner:  # a forked child: the runs' folders and threads are the parent's
            return
        if self._run is not None:
            self._run.close()
            self._run = None
        if self._next is not None:
            ahead = self._next
            self._next = None
            ahead.add_done_callback(lambda f: f.exception() is None and f.result().close())
        self._builder.shutdown(wait=True)
        self.pipelines.close()


def _tar_stretches(tars: np.ndarray | None) -> int:
    """How many stretches of consecutive samples from one tar ``tars`` (``(n,)``, ``None``: loose files) holds."""
    if tars is None or len(tars) == 0:
        return 0
    return 1 + int(np.count_nonzero(tars[1:] != tars[:-1]))


def _reads_after(read: EpochRead, upcoming: Callable[[int], EpochRead] | None):
    """``epoch -> EpochRead`` for the epochs after ``read`` (``None`` when the loader gives none)."""
    if upcoming is None:
        return None
    memo = {read.epoch: read}

    def reads(epoch: int) -> EpochRead:
        if epoch not in memo:
            memo[epoch] = upcoming(epoch)
        return memo[epoch]

    return reads


__all__ = ["DaliBackend", "RUN_SAMPLES"]
