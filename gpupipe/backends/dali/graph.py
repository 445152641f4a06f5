"""Building DALI pipelines: a run's pipeline (reader + planned parameters + lowering) and the probe's.

The reader reads the run's samples; one ``external_source`` gives, per
iteration, the planned parameters the lowering reads (found once by
tracing the graph; drawn a few batches ahead on a background thread and
packed, see :mod:`.params`), the masks of a folder source (palette PNGs as
their indices) and the boxes of a detection source.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, Optional, Sequence, Union

import numpy as np
import torch
from nvidia.dali import fn, pipeline_def, types

from ... import ops as O
from ...fileio import UnreadableFile
from ...images import palette_as_gray_png
from ...plan import Planner
from ...seeding import mix_int
from ...sources import FileSource, Source
from ...spec import PipelineSpec
from ...targets import TargetKind
from .. import DecoderSettings, RunConfig
from ..common import source_boxes
from .calibrate import DEFAULT_LOAD, remembered_hw_decoder_load
from .lifetime import track
from .lowering import Graph, lower, quiet_auto_aug
from .params import ParamLayout, RunParams
from .readers import ReaderFiles, reader_for
from .recovery import Prober
from .run import BatchRef, Run, RunFailed

logger = logging.getLogger(__name__)

#: Batches read at each share when ``hw_decoder_load="auto"`` (two of them warm-up).
CALIBRATION_BATCHES = 10


def decoder_kwargs(gpu: bool, settings: DecoderSettings) -> dict:
    """The image decoder's arguments: libjpeg's fancy chroma upsampling (as torchvision and PIL decode);
    on the GPU the hardware decoder's share and the preallocation hints."""
    kwargs = dict(device="mixed" if gpu else "cpu", output_type=types.RGB, jpeg_fancy_upsampling=True)
    if gpu:
        load = DEFAULT_LOAD if settings.hw_decoder_load == "auto" else settings.hw_decoder_load  # DALI takes numbers
        kwargs.update(hw_decoder_load=load, preallocate_width_hint=settings.width_hint,
                      preallocate_height_hint=settings.height_hint)
    return kwargs


def uses_conditionals(spec: PipelineSpec) -> bool:
    """nvidia.dali.auto_aug branches per sample, which needs DALI's conditionals."""
    return any(isinstance(op, (O.RandAugment, O.TrivialAugment)) for op in spec.ops)


class Pipelines:
    """Builds the pipelines of one backend.

    Args:
        source, spec, config: as the backend's.
        graph_spec: the spec the graph computes (uint8 output when dali-cpu feeds a GPU).
        gpu: decode with ``device="mixed"`` and run the image ops on the GPU.
        planner: draws the parameters.
        sizes: ``(N, 2)`` the samples' image sizes.
    """

    def __init__(self, source: Source, spec: PipelineSpec, graph_spec: PipelineSpec, config: RunConfig, *,
                 gpu: bool, planner: Planner, sizes: np.ndarray) -> None:
        self.source, self.spec, self.graph_spec, self.config, self.gpu = source, spec, graph_spec, config, gpu
        self.planner, self.sizes = planner, sizes
        self.reader = reader_for(source)
        self.masks_from_files = source.kind is TargetKind.MASK and isinstance(source, FileSource)
        self.layout = self._used_params()
        load = config.decoder.hw_decoder_load
        self.hw_decoder_load: Optional[float] = None if load == "auto" else float(load)
        self.calibration: Dict[float, float] = {}  # hw_decoder_load -> images/s, when "auto" measured them
        self._calibrating = threading.Lock()
        self._planner_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpupipe-plan")

    def close(self) -> None:
        """Stops the thread that plans parameters ahead."""
        self._planner_thread.shutdown(wait=False, cancel_futures=True)

    def run(self, refs: List[BatchRef], hw_decoder_load: Optional[float] = None) -> Run:
        """A built pipeline reading ``refs`` in order (on the GPU with ``hw_decoder_load``, by default
        the loader's, measured on the first of these batches when it is ``"auto"``)."""
        if self.gpu and hw_decoder_load is None:
            hw_decoder_load = self._resolved_hw_decoder_load(refs)
        indices = np.concatenate([r.indices for r in refs])
        params = RunParams(refs, self._plan, self._planner_thread)
        held = self.source.hold(indices)  # remote tars: fetched, and kept until the run closes
        files = ReaderFiles()
        captured = {}

        def feed(info):
            k = min(info.iteration, len(refs) - 1)
            return params.batch(k) + self._targets(refs[k])

        @pipeline_def(enable_conditionals=uses_conditionals(self.spec))
        def graph():
            nodes = self.reader(indices, files)
            captured["expected"] = nodes.expected
            return (*self._lower(nodes.encoded, nodes.mask, self._external(feed), hw_decoder_load), nodes.identity)

        try:
            with quiet_auto_aug():
                pipe = graph(batch_size=self.config.batch_size, num_threads=self.config.num_threads,
                             device_id=self.device_id(), seed=mix_int(self.config.seed) % (2**31),
                             exec_dynamic=True, prefetch_queue_depth=max(1, min(self.config.prefetch, len(refs))))
                pipe.build()
        except BaseException:
            files.close()
            held.release()
            raise
        track(pipe)
        files.built()

        def close() -> None:
            files.close()
            held.release()

        return Run(pipe, refs, check=functools.partial(self._check_order, expected=captured["expected"]),
                   on_close=close)

    def _resolved_hw_decoder_load(self, refs: List[BatchRef]) -> float:
        """The loader's ``hw_decoder_load``; ``"auto"`` is measured once, on the first batches read."""
        with self._calibrating:
            if self.hw_decoder_load is None:
                sample = refs[:CALIBRATION_BATCHES]
                if len(sample) < 3:
                    logger.info("hw_decoder_load=auto: %d batches are too few to measure; using %.2f",
                                len(sample), DEFAULT_LOAD)
                    self.hw_decoder_load = DEFAULT_LOAD
                else:
                    key = (self.device_id(), type(self.source).__name__, len(self.source), repr(self.spec.ops),
                           self.config.batch_size, self.config.num_threads)
                    try:
                        self.hw_decoder_load, self.calibration = remembered_hw_decoder_load(
                            key, functools.partial(self._rate, sample))
                    except RunFailed as failure:  # a bad file among them: the run will find and report it
                        logger.warning("hw_decoder_load=auto could not measure (%s); using %.2f",
                                       failure.error, DEFAULT_LOAD)
                        self.hw_decoder_load = DEFAULT_LOAD
            return self.hw_decoder_load

    def _rate(self, refs: List[BatchRef], hw_decoder_load: float) -> float:
        """Images per second of ``refs`` read with ``hw_decoder_load``, after two warm-up batches."""
        run = self.run(refs, hw_decoder_load)
        try:
            run.next_batch()
            run.next_batch()
            started = time.perf_counter()
            for _ in range(len(refs) - 2):
                run.next_batch()
            return (len(refs) - 2) * self.config.batch_size / (time.perf_counter() - started)
        finally:
            run.close()

    def prober(self) -> Prober:
        """Runs suspect samples one at a time through the same graph (see :mod:`.recovery`)."""
        def read(index: int):
            image = self.source.read_bytes(index)
            mask = self.mask_bytes(index, strict=True) if self.source.kind is TargetKind.MASK else None
            return image, mask

        def prepare(suspect, data):
            (index, epoch, position), (image, mask) = suspect, data
            ref = BatchRef(epoch, 0, np.array([index]), np.array([position]), 1)
            params = self._plan([ref]) + self._targets(ref)
            if self.masks_from_files:
                params[self.layout.outputs] = [mask]
            return [image], params, [mask]

        return Prober(self._probe_pipeline, read, prepare)

    def _probe_pipeline(self, prober: Prober):
        shard_masks = self.source.kind is TargetKind.MASK and not self.masks_from_files

        @pipeline_def(enable_conditionals=uses_conditionals(self.spec))
        def graph():
            encoded = fn.external_source(source=lambda info: prober.current[0], batch=True, batch_info=True)
            params = self._external(lambda info: prober.current[1])
            mask = fn.external_source(source=lambda info: prober.current[2], batch=True, batch_info=True) \
                if shard_masks else None
            return tuple(self._lower(encoded, mask, params))

        with quiet_auto_aug():
            pipe = graph(batch_size=1, num_threads=1, device_id=self.device_id(), seed=0, exec_dynamic=False,
                         exec_pipelined=False, exec_async=False, prefetch_queue_depth=1)
            pipe.build()
        return track(pipe)

    def _used_params(self) -> ParamLayout:
        """The layout of the planned parameters the lowering reads (traced once in a graph never built)."""
        dummy = self.planner.plan(0, np.zeros(1, np.int64), np.array([[64, 64]]), [np.zeros((0, 4), np.float32)])
        every = ParamLayout(dummy.steps, [(j, name) for j, step in enumerate(dummy.steps) for name in sorted(step)])
        recorded: List = []

        @pipeline_def(enable_conditionals=uses_conditionals(self.spec))
        def trace():
            inputs = self._external(lambda info: None, every)
            params = every.nodes(inputs[:every.outputs])
            recorded.append(params)
            g = Graph(self.graph_spec, params, gpu=False, decoder={})
            g.encoded = fn.external_source(name="encoded")
            if self.source.kind is TargetKind.MASK:
                g.mask = fn.external_source(name="mask")
            if self.source.kind is TargetKind.BOXES:
                g.boxes = g.raw = inputs[every.outputs]
                g.box_labels = inputs[every.outputs + 1]
            return tuple(lower(g))

        with quiet_auto_aug(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The external source node")  # the trace feeds every parameter
            trace(batch_size=1, num_threads=1, device_id=None)
        used = set(recorded[0].used)
        return ParamLayout(dummy.steps, [key for key in every.keys if key in used])

    def _external(self, source: Callable, layout: Optional[ParamLayout] = None):
        layout = layout or self.layout
        outputs = layout.outputs + (1 if self.masks_from_files else 0) + \
            (2 if self.source.kind is TargetKind.BOXES else 0)
        if outputs == 0:
            return []
        nodes = fn.external_source(source=source, batch=True, batch_info=True, num_outputs=outputs)
        return list(nodes) if isinstance(nodes, (list, tuple)) else [nodes]

    def _lower(self, encoded, mask, inputs, hw_decoder_load: Optional[float] = None) -> List:
        """The lowered graph; on the GPU with ``hw_decoder_load``, else the share resolved so far
        (``"auto"`` before measuring: DALI's default)."""
        n = self.layout.outputs
        if hw_decoder_load is None:
            hw_decoder_load = DEFAULT_LOAD if self.hw_decoder_load is None else self.hw_decoder_load
        settings = dataclasses.replace(self.config.decoder, hw_decoder_load=hw_decoder_load)
        g = Graph(self.graph_spec, self.layout.nodes(inputs[:n]), gpu=self.gpu,
                  decoder=decoder_kwargs(self.gpu, settings))
        g.encoded = encoded
        extra = list(inputs[n:])
        if self.source.kind is TargetKind.MASK:
            mask = fn.decoders.image(extra.pop(0) if mask is None else mask, device="cpu", output_type=types.ANY_DATA)
            g.mask = mask.gpu() if self.gpu else mask
        if self.source.kind is TargetKind.BOXES:
            g.boxes = g.raw = extra[0]
            g.box_labels = extra[1]
        return lower(g)

    def _plan(self, refs: Sequence[BatchRef]) -> List[np.ndarray]:
        """The packed parameters of every sample of ``refs`` (``batch_size`` rows per ref, in order),
        drawn at once (the refs may span epochs); detection refs get their content sizes
        (``ref.content_sizes``)."""
        bs = refs[0].indices.shape[0]
        indices = np.concatenate([r.indices for r in refs])
        positions = np.concatenate([r.positions for r in refs])
        epochs = np.repeat(np.array([r.epoch for r in refs], np.int64), bs)
        boxes = source_boxes(self.source, indices)
        plan = self.planner.plan(epochs, positions, self.sizes[indices], boxes)
        if boxes is not None:
            content = self.planner.content_sizes(plan)
            for m, ref in enumerate(refs):
                ref.content_sizes = content[m * bs:(m + 1) * bs]
        return self.layout.pack(plan.steps, len(indices))

    def _targets(self, ref: BatchRef) -> List:
        """Batch ``ref``'s masks (folder sources) or boxes and labels, as the external source gives them."""
        out: List = []
        if self.masks_from_files:
            out.append([self.mask_bytes(int(i)) for i in ref.indices])
        if self.source.kind is TargetKind.BOXES:
            out.append([np.asarray(self.source.boxes[int(i)], np.float32).reshape(-1, 4) for i in ref.indices])
            out.append([np.asarray(self.source.box_labels[int(i)], np.int32) for i in ref.indices])
        return out

    def mask_bytes(self, index: int, strict: bool = False) -> np.ndarray:
        """A mask file's bytes, a palette PNG turned into its indices; an unreadable one gives no
        bytes (the decoder then fails, and the probe names the file) unless ``strict``."""
        try:
            data = self.source.read_mask_bytes(index).tobytes()
        except UnreadableFile:
            if strict:
                raise
            return np.zeros(0, np.uint8)
        return np.frombuffer(palette_as_gray_png(data), np.uint8)

    def device_id(self) -> Optional[int]:
        if not self.gpu:
            return None
        index = self.config.device.index
        return torch.cuda.current_device() if index is None else index

    def _check_order(self, identity, ref: BatchRef, consumed: int, expected) -> None:
        """DALI's reader must have read the planned samples: a mismatch would mean wrong targets."""
        bs = self.config.batch_size
        want = expected(consumed * bs, bs)
        if isinstance(self.source, FileSource):  # every slot: one array comparison
            got: Union[np.ndarray, List[str]] = np.asarray(identity.as_array()).ravel()
            if np.array_equal(got, want):
                return
        else:  # every sample's tar, offset and name (targets come from the plan: each slot must be right)
            got = [np.asarray(identity[i]).tobytes().decode("utf-8", "surrogateescape") for i in range(bs)]
            if got == list(want):
                return
        raise RuntimeError(f"internal error: DALI read {list(got[:3])}... for batch {ref.key}, "
                           f"the plan says {list(want[:3])}...")
