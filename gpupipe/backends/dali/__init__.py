"""The DALI backend: ops lowered to a DALI graph on the GPU (``dali``) or CPU (``dali-cpu``).

The loader decides each epoch's order; DALI's reader reads exactly that
list (never shuffling on its own), and every random parameter comes from
the plan (:mod:`gpupipe.plan`), so the order and the augmentations are the
same as on every other backend. Pipelines are *runs* (:mod:`.run`): short
epochs are read by one pipeline, and the next run is built in the
background while the current one is read, so epoch boundaries cost no
pipeline build. A sample that fails while loading is found by the probe
(:mod:`.recovery`) and replaced (:class:`~gpupipe.backends.common.BadSamples`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterator, List, Optional

import numpy as np
import torch
from nvidia.dali import fn, pipeline_def, types

from ...batch import Batch, CudaPrefetcher, normalize_uint8
from ...fileio import UnreadableFile
from ...images import palette_as_gray_png
from ...ops import Output, RandAugment, TrivialAugment
from ...plan import Planner
from ...seeding import mix_int
from ...sources import FileSource, Source
from ...spec import PipelineSpec
from ...targets import TargetKind
from .. import EpochRead, RunConfig
from ..common import BadSamples, batch_slots, host_targets, source_boxes, targets_to
from .lifetime import cuda_keep_alive, track
from .lowering import Graph, Params, lower, quiet_auto_aug
from .readers import ReaderFiles, reader_for, remove_stale_folders
from .recovery import Prober, suspects_of
from .run import BatchRef, Run, RunFailed, compact_boxes, padded, to_torch

logger = logging.getLogger(__name__)

#: A run reads whole epochs until it holds at least this many samples (short epochs share a pipeline).
RUN_SAMPLES = 32_768
#: The next run is built in the background once this share of the current one is read.
PREBUILD_AT = 0.5


class DaliBackend:
    """Runs a spec through DALI pipelines.

    Args:
        source: the samples.
        spec: the checked pipeline.
        config: batch size, device, threads and decoder settings.
        gpu: decode with ``device="mixed"`` and run the image ops on the GPU.
    """

    def __init__(self, source: Source, spec: PipelineSpec, config: RunConfig, *, gpu: bool) -> None:
        self.name = "dali" if gpu else "dali-cpu"
        if gpu and config.device.type != "cuda":
            raise ValueError(f"backend 'dali' runs on a CUDA device, got device={config.device}; use 'dali-cpu'")
        self.source, self.spec, self.config, self.gpu = source, spec, config, gpu
        # dali-cpu feeding a GPU: uint8 batches, normalised on the GPU while the previous step runs.
        self.finish_on_gpu = not gpu and config.device.type == "cuda"
        self.graph_spec = dataclasses.replace(spec, output=Output("uint8", channels_last=spec.output.channels_last)) \
            if self.finish_on_gpu else spec
        self.planner = Planner(spec, config.seed)
        self.sizes = source.sizes()
        self.bad = BadSamples(source, config.on_error, config.skip_log)
        self.reader = reader_for(source)
        self.masks_from_files = source.kind is TargetKind.MASK and isinstance(source, FileSource)
        self.param_names = self._used_params()
        self._run: Optional[Run] = None
        self._next: Optional[Future] = None
        self._builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpupipe-dali")
        self._keep = cuda_keep_alive(config.device) if gpu else None
        remove_stale_folders()

    # -- building runs ------------------------------------------------------------

    def _refs(self, read: EpochRead, start: int, reads: Optional[Callable[[int], EpochRead]]) -> List[BatchRef]:
        """The batches of ``read`` from ``start``, then whole following epochs up to :data:`RUN_SAMPLES`."""
        bs = self.config.batch_size
        refs: List[BatchRef] = []
        while True:
            for b in range(start, read.batches):
                indices, positions = batch_slots(read.share, b, bs)
                indices = self.bad.replace(indices, read.share, b * bs)
                refs.append(BatchRef(read.epoch, b, padded(indices, bs), padded(positions, bs), len(indices)))
            if reads is None or len(refs) * bs >= RUN_SAMPLES or read.batches == 0:
                return refs
            read, start = reads(read.epoch + 1), 0

    def _build(self, refs: List[BatchRef]) -> Run:
        files = ReaderFiles()
        indices = np.concatenate([r.indices for r in refs])
        captured = {}
        @pipeline_def(enable_conditionals=_uses_conditionals(self.spec))
        def graph():
            nodes = self.reader(self.source, indices, files)
            captured["expected"] = nodes.expected
            inputs = self._external(lambda info: self._inputs(refs[min(info.iteration, len(refs) - 1)]))
            return (*self._lower(nodes.encoded, nodes.mask, inputs), nodes.identity)

        try:
            with quiet_auto_aug():
                pipe = graph(batch_size=self.config.batch_size, num_threads=self.config.num_threads,
                             device_id=self._device_id(), seed=mix_int(self.config.seed) % (2**31),
                             exec_dynamic=True, prefetch_queue_depth=max(1, min(self.config.prefetch, len(refs))))
                pipe.build()
        except BaseException:
            files.close()
            raise
        track(pipe)
        files.built()
        check = functools.partial(self._check_order, expected=captured["expected"])
        return Run(pipe, refs, check=check, on_close=files.close)

    def _used_params(self) -> List:
        """The planned parameters the lowering reads (traced once in a graph that is never built)."""
        dummy = self.planner.plan(0, np.zeros(1, np.int64), np.array([[64, 64]]), [np.zeros((0, 4), np.float32)])
        self.param_names = [(j, name) for j, step in enumerate(dummy.steps) for name in sorted(step)]
        used = []

        class Recording(Params):
            def __getitem__(self, key):
                used.append(key)
                return super().__getitem__(key)

        @pipeline_def(enable_conditionals=_uses_conditionals(self.spec))
        def trace():
            encoded = fn.external_source(name="encoded")
            inputs = self._external(lambda info: None)
            n = len(self.param_names)
            g = Graph(self.graph_spec, Recording(self.param_names, inputs[:n]), gpu=False, decoder={})
            g.encoded = encoded
            if self.source.kind is TargetKind.MASK:
                g.mask = fn.external_source(name="mask")
            if self.source.kind is TargetKind.BOXES:
                g.boxes = g.raw = inputs[n + 0]
                g.box_labels = inputs[n + 1]
            return tuple(lower(g))

        with quiet_auto_aug(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The external source node")  # the trace feeds every parameter
            trace(batch_size=1, num_threads=1, device_id=None)
        return [key for key in self.param_names if key in set(used)]

    def _external(self, source: Callable):
        outputs = len(self.param_names) + (1 if self.masks_from_files else 0) + \
            (2 if self.source.kind is TargetKind.BOXES else 0)
        nodes = fn.external_source(source=source, batch=True, batch_info=True, num_outputs=outputs)
        return list(nodes) if isinstance(nodes, (list, tuple)) else [nodes]

    def _lower(self, encoded, mask, inputs) -> List:
        n = len(self.param_names)
        g = Graph(self.graph_spec, Params(self.param_names, inputs[:n]), gpu=self.gpu, decoder=self._decoder())
        g.encoded = encoded
        extra = list(inputs[n:])
        if self.source.kind is TargetKind.MASK:
            mask = fn.decoders.image(extra.pop(0) if mask is None else mask, device="cpu",
                                     output_type=types.ANY_DATA)
            g.mask = mask.gpu() if self.gpu else mask
        if self.source.kind is TargetKind.BOXES:
            g.boxes = g.raw = extra[0]
            g.box_labels = extra[1]
        return lower(g)

    def _decoder(self) -> dict:
        kwargs = dict(device="mixed" if self.gpu else "cpu", output_type=types.RGB, jpeg_fancy_upsampling=True)
        if self.gpu:
            d = self.config.decoder
            kwargs.update(hw_decoder_load=d.hw_decoder_load, preallocate_width_hint=d.width_hint,
                          preallocate_height_hint=d.height_hint)
        return kwargs

    def _inputs(self, ref: BatchRef) -> List:
        """Batch ``ref``'s planned parameters (and masks or boxes), as the external source gives them."""
        boxes = source_boxes(self.source, ref.indices)
        plan = self.planner.plan(ref.epoch, ref.positions, self.sizes[ref.indices], boxes)
        out: List = []
        for j, name in self.param_names:
            values = plan.steps[j][name]
            out.append(np.ascontiguousarray(values, np.float32 if values.dtype.kind == "f" else np.int32))
        if self.masks_from_files:
            out.append([self._mask_bytes(int(i)) for i in ref.indices])
        if boxes is not None:
            out.append([np.asarray(b, np.float32).reshape(-1, 4) for b in boxes])
            out.append([np.asarray(self.source.box_labels[int(i)], np.int32) for i in ref.indices])
        return out

    def _mask_bytes(self, index: int, strict: bool = False) -> np.ndarray:
        """A mask file's bytes, a palette PNG turned into its indices; an unreadable one gives no
        bytes (the decoder then fails, and the probe names the file) unless ``strict``."""
        try:
            data = self.source.read_mask_bytes(index).tobytes()
        except UnreadableFile:
            if strict:
                raise
            return np.zeros(0, np.uint8)
        return np.frombuffer(palette_as_gray_png(data), np.uint8)

    def _device_id(self) -> Optional[int]:
        if not self.gpu:
            return None
        index = self.config.device.index
        return torch.cuda.current_device() if index is None else index

    def _check_order(self, identity, ref: BatchRef, consumed: int, expected) -> None:
        """DALI's reader must have read the planned samples: a mismatch would mean wrong targets."""
        bs = self.config.batch_size
        if isinstance(self.source, FileSource):
            got = np.asarray(identity.as_array()).ravel().tolist()
        else:
            got = [np.asarray(identity[i]).tobytes().decode("utf-8", "surrogateescape") for i in range(len(identity))]
        want = list(expected(consumed * bs, bs))
        if list(got) != want:
            raise RuntimeError(f"internal error: DALI read {got[:3]}... for batch {ref.key}, the plan says {want[:3]}...")

    # -- reading epochs -------------------------------------------------------------

    def iter_epoch(self, read: EpochRead, start: int = 0,
                   upcoming: Optional[Callable[[int], EpochRead]] = None) -> Iterator[Batch]:
        """Yields batches ``start ..`` of ``read``; ``upcoming(epoch)`` gives later epochs to read ahead."""
        batches = self._batches(read, start, upcoming)
        if self.finish_on_gpu:
            return iter(CudaPrefetcher(batches, self.config.device, functools.partial(normalize_uint8, spec=self.spec)))
        return batches

    def _batches(self, read: EpochRead, start: int, upcoming) -> Iterator[Batch]:
        reads = _reads_after(read, upcoming)
        b = start
        try:
            while b < read.batches:
                run = self._run_at(read, b, reads)
                stream = torch.cuda.current_stream(self.config.device) if self.gpu else None
                try:
                    ref, outputs = run.next_batch(stream)
                except RunFailed as failure:
                    self._recover(failure)
                    continue
                batch = self._assemble(ref, outputs)
                self._look_ahead(run, reads)
                b += 1
                yield batch
                if self._keep is not None:
                    self._keep.asked_again()
        finally:
            if self._keep is not None:
                self._keep.release_all(lambda: torch.cuda.synchronize(self.config.device))

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
        self._replace(self._build(self._refs(read, b, reads)))
        return self._run

    def _same_share(self, run: Run, read: EpochRead) -> bool:
        ref = run.refs[run.consumed]
        _, positions = batch_slots(read.share, ref.batch, self.config.batch_size)
        return np.array_equal(ref.positions[:ref.count], positions)

    def _replace(self, run: Optional[Run]) -> None:
        if self._run is not None and self._run is not run:
            self._retire(self._run)
        self._run = run

    def _retire(self, run: Run) -> None:
        """Deletes a pipeline on the builder thread (a pipeline's teardown blocks for a while)."""
        self._builder.submit(run.close)

    def _look_ahead(self, run: Run, reads) -> None:
        """Builds the next run in the background, and starts it as the current one runs dry."""
        if reads is None:
            return
        if self._next is None and run.consumed >= PREBUILD_AT * len(run.refs):
            last = run.refs[-1]
            nxt = reads(last.epoch + 1)
            if nxt.batches:
                self._next = self._builder.submit(self._build, self._refs(nxt, 0, reads))
        if self._next is not None and run.fully_scheduled and self._next.done() and self._next.exception() is None:
            self._next.result().prime()

    def _recover(self, failure: RunFailed) -> None:
        """Finds the bad samples among those in flight, reports them, and drops the failed run."""
        failed, self._run = self._run, None
        if failed is not None:
            self._retire(failed)
        bad = self._prober().probe(suspects_of(failure.in_flight))
        if not bad:
            raise RuntimeError(f"the {self.name} pipeline failed and no sample could be blamed: {failure.error}") \
                from failure.error
        self.bad.report(bad.items())
        if self._next is not None:  # built before these were known bad
            self._next.add_done_callback(lambda f: f.exception() is None and self._retire(f.result()))
            self._next = None

    def _prober(self) -> Prober:
        def read(index: int):
            image = self.source.read_bytes(index)
            mask = self._mask_bytes(index, strict=True) if self.source.kind is TargetKind.MASK else None
            return image, mask

        def prepare(suspect, data):
            (index, epoch, position), (image, mask) = suspect, data
            params = self._inputs(BatchRef(epoch, 0, np.array([index]), np.array([position]), 1))
            if self.masks_from_files:
                params[len(self.param_names)] = [mask]
            return [image], params, [mask]

        return Prober(self._build_probe, read, prepare)

    def _build_probe(self, prober: Prober):
        shard_masks = self.source.kind is TargetKind.MASK and not self.masks_from_files

        @pipeline_def(enable_conditionals=_uses_conditionals(self.spec))
        def graph():
            encoded = fn.external_source(source=lambda info: prober.current[0], batch=True, batch_info=True)
            params = self._external(lambda info: prober.current[1])
            mask = fn.external_source(source=lambda info: prober.current[2], batch=True, batch_info=True) \
                if shard_masks else None
            return tuple(self._lower(encoded, mask, params))

        with quiet_auto_aug():
            pipe = graph(batch_size=1, num_threads=1, device_id=self._device_id(), seed=0, exec_dynamic=False,
                         exec_pipelined=False, exec_async=False, prefetch_queue_depth=1)
            pipe.build()
        return track(pipe)

    # -- batches ---------------------------------------------------------------------

    def _assemble(self, ref: BatchRef, outputs) -> Batch:
        n = ref.count
        device = self.config.device if self.gpu else None
        raw = to_torch(outputs[0], device)
        images = raw.permute(0, 3, 1, 2) if self.graph_spec.output.channels_last else raw
        images = images[:n]
        if images.dtype != self.graph_spec.output.torch_dtype:
            images = images.to(self.graph_spec.output.torch_dtype)
        kind = self.source.kind
        if kind is TargetKind.MASK:
            targets = to_torch(outputs[1], device)[:n, :, :, 0].long()
        elif kind is TargetKind.BOXES:
            boxes, labels = compact_boxes(to_torch(outputs[1], None)[:n], to_torch(outputs[2], None)[:n].long())
            targets = {"boxes": boxes, "labels": labels}
        else:
            targets = host_targets(self.source, ref.indices[:n])
        if self._keep is not None:
            self._keep.handed_out([raw])
        if not self.finish_on_gpu and self.config.device.type == "cuda":
            targets = targets_to(targets, self.config.device)
        return images, targets

    def close(self) -> None:
        if self._run is not None:
            self._run.close()
            self._run = None
        if self._next is not None:
            ahead = self._next
            self._next = None
            ahead.add_done_callback(lambda f: f.exception() is None and f.result().close())
        self._builder.shutdown(wait=True)


def _uses_conditionals(spec: PipelineSpec) -> bool:
    """nvidia.dali.auto_aug branches per sample, which needs DALI's conditionals."""
    return any(isinstance(op, (RandAugment, TrivialAugment)) for op in spec.ops)


def _reads_after(read: EpochRead, upcoming: Optional[Callable[[int], EpochRead]]):
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
